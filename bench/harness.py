"""What every scenario shares: the run's settings, figures, child processes, statistics.

A scenario is an `async def run(bench: Bench) -> list[Row]` in its own module of `bench/`.
It measures majordomus and the raw baseline of the same work in the same run (the machines
are noisy, so only a ratio taken side by side means anything) and answers rows of figures.
This module starts and stops the processes a scenario needs (majordomus workers, plain arq
workers, the API), samples their CPU and memory, and never asserts anything: goals are
printed as met or missed, never enforced.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from majordomus.config import Settings
from majordomus.engine import Engine
from majordomus.loading import load_capabilities
from majordomus.local.embedded import free_port
from majordomus.registry import REGISTRY
from majordomus.store.connect import connect

ROOT = Path(__file__).resolve().parent.parent
BENCH_PREFIX = os.environ.get("MAJORDOMUS_BENCH_PREFIX", "mdbench")
"""Key prefix (and pub/sub channel prefix, which no database number separates) of a run,
apart from real data and from another run on the same server."""
CAPABILITIES = "bench.capabilities"


@dataclass
class Row:
    """One figure of a scenario beside its baseline."""

    scenario: str
    metric: str
    ours: float
    unit: str
    baseline: float | None = None
    baseline_name: str = ""
    goal: str = ""
    met: bool | None = None
    """True/False when the row has a goal, None when it is a figure without one."""
    higher_is_better: bool = True

    @property
    def ratio(self) -> float | None:
        """majordomus / baseline, oriented so that above 1 is better for majordomus
        when higher is better (throughput), and below 1 is better when lower is better
        (latency): always the plain quotient, the unit says which way is good."""
        if self.baseline is None or self.baseline == 0:
            return None
        return self.ours / self.baseline


@dataclass
class Bench:
    """The run: where Redis is, how big the scenarios are, where logs go."""

    redis_url: str
    quick: bool
    workdir: Path
    prefix: str = BENCH_PREFIX
    notes: list[str] = field(default_factory=list)

    def size(self, full: int, quick: int) -> int:
        return quick if self.quick else full

    def settings(self, **overrides: Any) -> Settings:
        base: dict[str, Any] = {
            "redis_url": self.redis_url,
            "key_prefix": self.prefix,
            "capabilities": [CAPABILITIES],
        }
        base.update(overrides)
        return Settings.from_env({}, **base)

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of a child process on this run's Redis and prefix."""
        environ = dict(os.environ)
        environ.update(
            {
                "MAJORDOMUS_REDIS_URL": self.redis_url,
                "MAJORDOMUS_KEY_PREFIX": self.prefix,
                "MAJORDOMUS_CAPABILITIES": CAPABILITIES,
                "PYTHONPATH": os.pathsep.join(
                    p for p in (str(ROOT), environ.get("PYTHONPATH", "")) if p
                ),
                "PYTHONUNBUFFERED": "1",
            }
        )
        environ.update(extra)
        return environ

    def redis(self, **kwargs: Any) -> Any:
        return connect(self.redis_url, **kwargs)

    async def flush(self) -> None:
        """Empty the run's database; the benchmark's Redis is its own to flush."""
        client = self.redis()
        try:
            await client.flushdb()
        finally:
            await client.aclose()

    @contextlib.asynccontextmanager
    async def engine(self, **overrides: Any) -> AsyncIterator[Engine]:
        load_capabilities([CAPABILITIES])
        client = self.redis()
        try:
            yield Engine(client, REGISTRY, self.settings(**overrides))
        finally:
            await client.aclose()

    def note(self, text: str) -> None:
        self.notes.append(text)


# -- child processes --------------------------------------------------------------------


class Child:
    """A process of the run, its output in a log file, stopped on exit."""

    def __init__(self, name: str, argv: Sequence[str], env: dict[str, str], workdir: Path):
        self.name = name
        self.log_path = workdir / f"{name}-{time.monotonic_ns()}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            list(argv), cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT
        )
        self.ps = psutil.Process(self.process.pid)

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def rss(self) -> int:
        return int(self.ps.memory_info().rss)

    def cpu_seconds(self) -> float:
        t = self.ps.cpu_times()
        return float(t.user + t.system)

    def stop(self, timeout: float = 10) -> None:
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self._log.close()


@contextlib.contextmanager
def children() -> Iterator[list[Child]]:
    """A list to put children in; every one is stopped when the block ends."""
    started: list[Child] = []
    try:
        yield started
    finally:
        for child in started:
            with contextlib.suppress(Exception):
                child.stop()


def majordomus_worker(bench: Bench, max_jobs: int = 10, **env: str) -> Child:
    return Child(
        "majordomus-worker",
        [sys.executable, "-m", "majordomus.cli", "worker", "--max-jobs", str(max_jobs)],
        bench.env(**env),
        bench.workdir,
    )


def arq_worker(
    bench: Bench, queue: str, max_jobs: int = 10, poll_delay: float = 0.5, *, cron: bool = False
) -> Child:
    """A plain arq worker (`bench.arq_baseline`) running the no-op baseline job (and, with
    `cron`, its cron job of every second)."""
    return Child(
        "arq-worker",
        [
            sys.executable,
            "-m",
            "bench.arq_baseline",
            "--queue",
            queue,
            "--max-jobs",
            str(max_jobs),
            "--poll-delay",
            str(poll_delay),
            *(["--cron"] if cron else []),
        ],
        bench.env(),
        bench.workdir,
    )


def api_server(bench: Bench, port: int | None = None, **env: str) -> tuple[Child, str]:
    """`majordomus serve` on a free port; answers the child and its base URL."""
    port = port or free_port()
    child = Child(
        "api",
        [sys.executable, "-m", "majordomus.cli", "serve", "--port", str(port)],
        bench.env(**env),
        bench.workdir,
    )
    return child, f"http://127.0.0.1:{port}"


async def wait_for_workers(bench: Bench, count: int, timeout: float = 30) -> None:
    """Until `count` majordomus workers have published their presence."""
    client = bench.redis()
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if await client.zcard(f"{bench.prefix}:workers") >= count:
                return
            await asyncio.sleep(0.05)
    finally:
        await client.aclose()
    raise RuntimeError(f"{count} majordomus workers did not report within {timeout}s")


async def wait_for_api(base_url: str, child: Child, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient() as http:
        while time.monotonic() < deadline:
            if not child.alive():
                raise RuntimeError(f"the API exited early:\n{child.log()[-2000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if (await http.get(f"{base_url}/api/v1/live")).status_code == 200:
                    return
            await asyncio.sleep(0.05)
    raise RuntimeError(f"the API at {base_url} did not become ready within {timeout}s")


async def wait_for_arq_worker(bench: Bench, child: Child, timeout: float = 30) -> None:
    """Until the plain arq worker says it is ready (it prints `ready` when it starts)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not child.alive():
            raise RuntimeError(f"the arq worker exited early:\n{child.log()[-2000:]}")
        if "ready" in child.log():
            return
        await asyncio.sleep(0.05)
    raise RuntimeError(f"the arq worker did not start within {timeout}s")


async def idle_cpu_percent(child: Child, seconds: float) -> float:
    """The child's CPU use over `seconds` of wall time, in percent of one core."""
    before = child.cpu_seconds()
    t0 = time.monotonic()
    await asyncio.sleep(seconds)
    used = child.cpu_seconds() - before
    return 100.0 * used / (time.monotonic() - t0)


# -- statistics ---------------------------------------------------------------------------


async def fan_out(n: int, one: Callable[[], Awaitable[Any]], tasks: int) -> None:
    """Run `one` n times in all, from `tasks` concurrent tasks (how a busy client enqueues)."""
    left = n

    async def runner() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await one()

    await asyncio.gather(*(runner() for _ in range(tasks)))


def percentile(values: Sequence[float], p: float) -> float:
    """The p-th percentile (0-100), linear between closest ranks."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    if len(ordered) == 1:
        return float(ordered[0])
    rank = (len(ordered) - 1) * p / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return float(ordered[low] + (ordered[high] - ordered[low]) * (rank - low))


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


async def read_http_answer(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """An HTTP/1.1 answer as the API writes one (a status line, headers with a
    Content-Length, the body): its status and body, for the benchmarks' plain clients."""
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return status, await reader.readexactly(length)


def ms(seconds: float) -> float:
    return seconds * 1000.0


def workdir() -> Path:
    return Path(tempfile.mkdtemp(prefix="majordomus-bench-"))
