"""Fixtures for the console: a real API (`majordomus serve`) and a real worker on the suite's
Redis, under a key prefix of their own, and headless Chromium driven by Playwright.

The browser is the machine's (Debian's `chromium` at `/usr/bin/chromium`, or
`MAJORDOMUS_TEST_CHROMIUM`), never a download; when it is missing, the browser tests fail
under CI (`.ci/run` installs it) and elsewhere are skipped, saying what to install, in the
pytest header and in each skip. The API and the worker reuse
`tests.api.conftest`'s `ApiProcess` and `WorkerChild`; they live for this package and use
the key prefix `console` (the 10,000-execution test another), so nothing here meets the
other packages' keys, and only these prefixes are deleted.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis as redis_sync

from bench.browser import CHROMIUM_ARGS
from tests.api.conftest import ApiProcess, WorkerChild
from tests.conftest import CHROMIUM, _redis_url, chromium_found

PREFIX = "console"
CAPABILITIES = "tests.capabilities,tests.console.paced"
SCREENSHOTS = os.environ.get("MAJORDOMUS_CONSOLE_SCREENSHOTS")
"""A folder to save the documentation's screenshots in, when set."""


def forget_prefix(redis_url: str, prefix: str) -> None:
    """Delete every key under `prefix:` (and nothing else of the database)."""
    client = redis_sync.Redis.from_url(redis_url)
    try:
        client.ping()
    except redis_sync.RedisError as exc:  # CI must fail, not skip, when its Redis is missing.
        pytest.fail(f"Redis at {redis_url} is unreachable: {exc}")
    batch: list[bytes] = []
    for key in client.scan_iter(match=f"{prefix}:*", count=2000):
        batch.append(key)
        if len(batch) >= 2000:
            client.unlink(*batch)
            batch.clear()
    if batch:
        client.unlink(*batch)
    client.close()


class ConsoleWorker(WorkerChild):
    """`WorkerChild` under the console's prefix, with its capabilities."""

    def __init__(self, redis_url: str, prefix: str = PREFIX, **env: str) -> None:
        super().__init__(
            redis_url, MAJORDOMUS_CAPABILITIES=CAPABILITIES, MAJORDOMUS_KEY_PREFIX=prefix, **env
        )
        self.prefix = prefix

    def wait_reported(self, redis_url: str, count: int = 1, timeout: float = 30) -> None:
        client = redis_sync.Redis.from_url(redis_url)
        deadline = time.monotonic() + timeout
        while int(client.zcard(f"{self.prefix}:workers")) < count:  # type: ignore[arg-type]
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the worker did not report:\n{self.output()}")
            time.sleep(0.05)
        client.close()


def console_api(redis_url: str, prefix: str = PREFIX, **env: str) -> ApiProcess:
    env.update(MAJORDOMUS_CAPABILITIES=CAPABILITIES, MAJORDOMUS_KEY_PREFIX=prefix)
    return ApiProcess(redis_url, None, **env)


@pytest.fixture(scope="package")
def console_redis_url() -> str:
    return _redis_url()


@contextlib.contextmanager
def api_and_worker(redis_url: str, prefix: str = PREFIX, **env: str) -> Iterator[ApiProcess]:
    """An API and one worker behind it, on a prefix emptied before and after."""
    forget_prefix(redis_url, prefix)
    # Both processes start at once (each takes a second or two to import), then both are
    # waited for.
    server = console_api(redis_url, prefix=prefix, **env).launch()
    worker = ConsoleWorker(redis_url, prefix=prefix, **env)
    try:
        server.wait_ready()
        worker.wait_reported(redis_url)
        yield server
    finally:
        worker.stop()
        server.close()
        forget_prefix(redis_url, prefix)


@pytest.fixture(scope="package")
def console(spawns: None, console_redis_url: str) -> Iterator[ApiProcess]:
    """The package's API and one worker behind it, on the `console` prefix."""
    with api_and_worker(console_redis_url) as server:
        yield server


@pytest.fixture
def http(console: ApiProcess) -> Iterator[httpx.Client]:
    with console.client() as client:
        yield client


@pytest.fixture(scope="package")
def browser() -> Iterator[Any]:
    """Headless Chromium from the machine's packages, driven by Playwright."""
    if not chromium_found():
        missing = (
            f"no Chromium at {CHROMIUM}: install Debian's package (apt-get install chromium), "
            "as .ci/run does, or name one in MAJORDOMUS_TEST_CHROMIUM"
        )
        if os.environ.get("CI"):
            pytest.fail(missing)
        # A developer's machine without a browser: said in the header and here, never
        # silent; CI, which installs one, fails instead.
        pytest.skip(missing)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh tab on a laptop-sized screen, failing the test on any script error."""
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    tab.set_default_timeout(15_000)
    yield tab
    context.close()
    assert not errors, f"the page raised: {errors}"


def screenshot(page: Any, name: str, full_page: bool = False) -> None:
    """Save `docs/console-<name>.png` into `MAJORDOMUS_CONSOLE_SCREENSHOTS` when it is set."""
    if SCREENSHOTS:
        os.makedirs(SCREENSHOTS, exist_ok=True)
        page.screenshot(path=os.path.join(SCREENSHOTS, f"console-{name}.png"), full_page=full_page)


class CuttableProxy:
    """A TCP proxy in front of the API whose connections can be cut: what a dropped
    network does to a browser (Chromium's emulated offline mode leaves an open stream
    flowing, so it cannot show a reconnect)."""

    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.open: set[socket.socket] = set()
        self.down_until = 0.0
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if time.monotonic() < self.down_until:
                client.close()
                continue
            upstream = socket.create_connection(self.target)
            with self.lock:
                self.open.update((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(65536):
                sink.sendall(chunk)
        except OSError:
            pass
        for s in (source, sink):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
            with self.lock:
                self.open.discard(s)

    def cut(self, down_seconds: float) -> None:
        """Close every open connection, and refuse new ones for `down_seconds`."""
        self.down_until = time.monotonic() + down_seconds
        with self.lock:
            cut = list(self.open)
        for s in cut:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.cut(0)
        self.listener.close()
