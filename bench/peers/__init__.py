"""Peers: majordomus beside the job runners a user would pick instead of it.

The peers are plain arq 0.28, SAQ 0.26, streaQ 7 and taskiq 0.13 (with taskiq-redis'
`RedisStreamBroker` and `RedisAsyncResultBackend`). Their redis-py pins conflict with ours,
so each runs from a virtual environment of its own under `bench/.venvs/<peer>` (or
`MAJORDOMUS_BENCH_VENVS`), which a full run creates with `python -m venv` and pip, and reuses
while it holds the pinned versions (`PEERS`). A quick run installs nothing: without the
venvs it says so in a note and measures no peer. Each peer's worker and producers are a
small script beside this module (`<peer>_side.py`, protocol in `wire.py`), run with that
peer's python, so it imports that peer alone; majordomus runs from this repo's venv
(`majordomus_side.py`, the worker of `majordomus worker --max-jobs 10`) and enqueues from
this process through `Engine.start("bench.noop", {})`.

Settings (each peer's fastest recommended, read from its source; the side scripts say why):
every worker runs 10 jobs at once on the plain asyncio loop (no uvloop is installed in any
venv, nor used by majordomus); arq `poll_delay` 0.01 s; SAQ `concurrency` 10 with blocking
`BLMOVE` dequeue (its default); streaQ `concurrency` 10, default prefetch (10 more),
silent tasks; taskiq `taskiq worker --workers 1 --max-async-tasks 10 --max-prefetch 10
--log-level WARNING`; majordomus `--max-jobs 10` and its defaults.

Method, all on a redis-server of this scenario's own (`--save '' --appendonly no`, started
and stopped here, so its `INFO cpu` counts this work alone), emptied before each round:
- Enqueue-first: one producer enqueues N no-op jobs (16 concurrent tasks of one process)
  with no worker running, then 1 (next round: 2) worker processes start, import, connect
  and say `loaded`, and all wait for a gate file. jobs/s = N / (the gate opening .. the
  N-th job finished), finished as the worker stamps it when its no-op returns (majordomus:
  when its index of finished executions, read every 5 ms, holds N). Redis CPU per job:
  the server's used_cpu_sys + used_cpu_user over that drain / N, and over the enqueue phase
  / N (majordomus' create is part of its cost, so both `drain` and `enqueue+drain` are
  given). Worker CPU per job: user + system time of the worker processes and their
  children, from the gate opening (start-up excluded) to the end / N.
- Interleaved: the workers and the producer all wait for the gate; the producer then
  enqueues N while the workers drain; jobs/s = N / (gate .. N-th finished).
- Pick-up: one idle worker; jobs one at a time after a random 20-50 ms gap; latency = the
  time the job's function recorded as it began (its result; majordomus: `bench.stamp`'s
  output) minus the time just before the enqueue, same machine, same clock.
Rows compare majordomus with each peer (ratio = majordomus / peer); the best peer of each
figure is marked `(best peer)`. A full run measures every side `PEER_ROUNDS` times, the
order of the sides turned by one each round (so none is always first after an idle
machine, or last after the others' heat), and each figure is the median of its rounds: on
this shared machine one round of a side could land in a slow minute and swing a ratio by
half (two single-round runs 6 minutes apart on 2026-12-05: majordomus' Redis CPU per job
131 then 180 us, its drain 6,275 then 3,852 jobs/s). Read ratios, not absolute figures.
Nothing here measures events, followers or real work.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from bench.harness import Bench, Row, fan_out, percentile
from bench.peers import wire
from majordomus.engine import Engine
from majordomus.local.embedded import EmbeddedRedis

HERE = Path(__file__).resolve().parent
VENVS = Path(os.environ.get("MAJORDOMUS_BENCH_VENVS", HERE.parent / ".venvs"))
PINS_FILE = "majordomus-bench-pins.json"
CONCURRENCY = 10
OURS = "majordomus"
DONE_POLL = 0.005
RETAIN_ENV, RETAIN = "MAJORDOMUS_RETAIN_EXECUTIONS", 1_000_000
"""majordomus' workers forget finished executions over 10,000 by default; a round counts
its N in that index, so it must keep them all (the peers keep their results by TTL)."""
NOT_RUN = "peers: not run (venvs absent; run python -m bench --only peers to install)"


@dataclass(frozen=True)
class Peer:
    """A runner compared with majordomus, installed in a venv of its own."""

    name: str
    label: str
    pins: tuple[str, ...]

    @property
    def venv(self) -> Path:
        return VENVS / self.name

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def script(self) -> Path:
        return HERE / f"{self.name}_side.py"

    def worker_argv(self) -> list[str]:
        if self.name == "taskiq":
            return [
                str(self.venv / "bin" / "taskiq"), "worker", "taskiq_side:broker",
                "--workers", "1", "--max-async-tasks", str(CONCURRENCY),
                "--max-prefetch", str(CONCURRENCY), "--log-level", "WARNING",
            ]  # fmt: skip
        return [str(self.python), str(self.script), "worker", "--concurrency", str(CONCURRENCY)]

    def producer_argv(self, command: str, n: int) -> list[str]:
        return [str(self.python), str(self.script), command, "--n", str(n)]


PEERS = (
    Peer("arq", "arq 0.28.0 (plain)", ("arq==0.28.0",)),
    # SAQ imports typing_extensions without declaring it (0.26.4), so it is named here.
    Peer("saq", "SAQ 0.26.4", ("saq[redis]==0.26.4", "typing-extensions")),
    Peer("streaq", "streaQ 7.2.0", ("streaq==7.2.0",)),
    Peer("taskiq", "taskiq 0.13.0 + taskiq-redis 1.2.4", ("taskiq==0.13.0", "taskiq-redis==1.2.4")),
)


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    higher_is_better: bool


ENQUEUE_RATE = Metric("enqueue jobs/s (one producer, 16 tasks)", "/s", True)
DRAIN_1 = Metric("jobs/s, enqueue-first drain, 1 worker", "/s", True)
DRAIN_2 = Metric("jobs/s, enqueue-first drain, 2 workers", "/s", True)
MIXED_1 = Metric("jobs/s, interleaved, 1 worker", "/s", True)
MIXED_2 = Metric("jobs/s, interleaved, 2 workers", "/s", True)
REDIS_DRAIN = Metric("Redis CPU per job, drain (1 worker)", "us", False)
REDIS_ALL = Metric("Redis CPU per job, enqueue+drain", "us", False)
WORKER_CPU = Metric("worker CPU per job (1 worker)", "us", False)
PICKUP_50 = Metric("pickup p50, idle worker", "ms", False)
PICKUP_99 = Metric("pickup p99, idle worker", "ms", False)
METRICS = (
    DRAIN_1, DRAIN_2, MIXED_1, MIXED_2, REDIS_DRAIN, REDIS_ALL, WORKER_CPU, ENQUEUE_RATE,
    PICKUP_50, PICKUP_99,
)  # fmt: skip

Figures = dict[str, dict[str, float]]
"""Runner label -> metric name -> value."""


def rows_of(figures: Figures) -> list[Row]:
    """One row per metric and peer: majordomus' figure beside the peer's, the best peer
    of the metric marked. Peers or metrics without a finite figure give no row."""
    rows: list[Row] = []
    ours = figures.get(OURS, {})
    for metric in METRICS:
        mine = ours.get(metric.name)
        if mine is None or not math.isfinite(mine):
            continue
        theirs = {
            name: f[metric.name]
            for name, f in figures.items()
            if name != OURS and math.isfinite(f.get(metric.name, math.nan))
        }
        top = wire.best(theirs, metric.higher_is_better)
        for name, value in theirs.items():
            rows.append(
                Row(
                    "peers",
                    metric.name,
                    mine,
                    metric.unit,
                    baseline=value,
                    baseline_name=name + (" (best peer)" if name == top else ""),
                    higher_is_better=metric.higher_is_better,
                )
            )
    return rows


# -- the peers' venvs ----------------------------------------------------------------------


def installed(peer: Peer) -> bool:
    """The venv exists and was installed with exactly the pins."""
    stamp = peer.venv / PINS_FILE
    if not peer.python.exists() or not stamp.exists():
        return False
    with contextlib.suppress(ValueError):
        return bool(json.loads(stamp.read_text()) == list(peer.pins))
    return False


def install(peer: Peer, log: Path) -> None:
    """Create (or complete) the peer's venv with its pins; raises with pip's output."""
    with open(log, "ab") as out:
        if not peer.python.exists():
            subprocess.run(
                [sys.executable, "-m", "venv", str(peer.venv)], check=True, stdout=out, stderr=out
            )
        subprocess.run(
            [str(peer.python), "-m", "pip", "install", "--disable-pip-version-check",
             "--quiet", *peer.pins],
            check=True, stdout=out, stderr=out,
        )  # fmt: skip
    (peer.venv / PINS_FILE).write_text(json.dumps(list(peer.pins)))


# -- processes -------------------------------------------------------------------------------


class Side:
    """A side script's process: its JSON lines read as they come, its CPU sampled."""

    def __init__(self, name: str, process: asyncio.subprocess.Process, log: Path) -> None:
        self.name = name
        self.process = process
        self.log_path = log
        self.loaded = asyncio.Event()
        self.done = 0
        self.last = 0.0
        self.closing: dict[str, Any] = {}
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def start(cls, name: str, argv: list[str], env: dict[str, str], workdir: Path) -> Side:
        log = workdir / f"{name}-{time.monotonic_ns()}.log"
        with open(log, "wb") as err:
            process = await asyncio.create_subprocess_exec(
                *argv, cwd=HERE, env=env, stdout=asyncio.subprocess.PIPE, stderr=err
            )
        return cls(name, process, log)

    async def _read(self) -> None:
        assert self.process.stdout is not None
        async for line in self.process.stdout:
            message = wire.parse(line)
            if message is None:
                continue
            if message.get("loaded"):
                self.loaded.set()
            elif "done" in message:
                self.done, self.last = int(message["done"]), float(message["last"])
            else:
                self.closing = message

    def alive(self) -> bool:
        return self.process.returncode is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-2000:]

    async def wait_loaded(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not self.loaded.is_set():
            if not self.alive() or time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} did not load:\n{self.log()}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.loaded.wait(), 0.1)

    async def result(self, timeout: float) -> dict[str, Any]:
        """Its closing line, once it exits by itself."""
        try:
            await asyncio.wait_for(self.process.wait(), timeout)
            await self._reader
        except TimeoutError:
            message = f"{self.name} did not finish in {timeout:g} s:\n{self.log()}"
            raise RuntimeError(message) from None
        if self.process.returncode != 0 or not self.closing:
            raise RuntimeError(f"{self.name} exited {self.process.returncode}:\n{self.log()}")
        return self.closing

    def cpu_seconds(self) -> float:
        return tree_cpu_seconds(self.process.pid)

    async def stop(self, grace: float = 3) -> None:
        """SIGTERM, then, after `grace` seconds, SIGKILL to whatever of its tree is left
        (taskiq's worker command takes its own shutdown timeout and more to exit)."""
        tree = _tree(self.process.pid)
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.process.wait(), grace)
        for p in tree:
            with contextlib.suppress(psutil.Error):
                p.kill()
        await self.process.wait()
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._reader


def _tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def tree_cpu_seconds(pid: int) -> float:
    """User + system seconds of a process, its live descendants and the children it reaped."""
    total = 0.0
    for p in _tree(pid):
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
    return total


# -- the runners -----------------------------------------------------------------------------


class Runner:
    """What a round needs of one runner: workers, producers, and when N jobs are done."""

    label: str

    async def start_worker(self, gate: Path) -> Side:
        raise NotImplementedError

    async def enqueue(self, n: int) -> float:
        """Enqueue n no-op jobs with no gate; answers the enqueue rate (jobs/s)."""
        raise NotImplementedError

    async def start_producer(self, n: int, gate: Path) -> Callable[[], Awaitable[object]]:
        """A producer of n jobs waiting for the gate; answers how to wait for its end."""
        raise NotImplementedError

    async def wait_loaded(self) -> None:
        """Until the producers started by `start_producer` wait at the gate."""

    async def finished(self, workers: list[Side]) -> tuple[int, float]:
        """(jobs finished, epoch time of the last) this round."""
        raise NotImplementedError

    async def pickup(self, n: int) -> list[float]:
        raise NotImplementedError


class PeerRunner(Runner):
    def __init__(self, peer: Peer, bench: Bench) -> None:
        self.peer = peer
        self.bench = bench
        self.label = peer.label
        self._producers: list[Side] = []

    def env(self, gate: Path | None = None) -> dict[str, str]:
        drop = ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")
        env = {
            k: v for k, v in os.environ.items() if k not in drop and not k.startswith("MAJORDOMUS_")
        }
        env.update(
            {
                "PYTHONPATH": str(HERE),
                "PYTHONUNBUFFERED": "1",
                "PATH": f"{self.peer.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
                wire.URL_ENV: self.bench.redis_url,
                wire.QUEUE_ENV: f"{self.bench.prefix}-{self.peer.name}",
            }
        )
        if gate is not None:
            env[wire.GATE_ENV] = str(gate)
        return env

    async def start_worker(self, gate: Path) -> Side:
        return await Side.start(
            f"{self.peer.name}-worker", self.peer.worker_argv(), self.env(gate), self.bench.workdir
        )

    async def _producer(self, command: str, n: int, gate: Path | None) -> Side:
        return await Side.start(
            f"{self.peer.name}-{command}",
            self.peer.producer_argv(command, n),
            self.env(gate),
            self.bench.workdir,
        )

    async def enqueue(self, n: int) -> float:
        found = await (await self._producer("enqueue", n, None)).result(max(120, n / 50))
        return wire.rate(n, found["t0"], found["t1"])

    async def start_producer(self, n: int, gate: Path) -> Callable[[], Awaitable[object]]:
        side = await self._producer("enqueue", n, gate)
        self._producers.append(side)

        async def ended() -> object:
            try:
                return await side.result(max(120, n / 50))
            finally:
                self._producers.remove(side)

        return ended

    async def wait_loaded(self) -> None:
        for side in self._producers:
            await side.wait_loaded()

    async def finished(self, workers: list[Side]) -> tuple[int, float]:
        return sum(w.done for w in workers), max((w.last for w in workers), default=0.0)

    async def pickup(self, n: int) -> list[float]:
        found = await (await self._producer("pickup", n, None)).result(60 + n)
        return [float(v) for v in found["pickup_ms"]]


class OursRunner(Runner):
    """majordomus: workers from this repo's python, enqueued through this process's Engine."""

    label = OURS

    def __init__(self, bench: Bench, engine: Engine) -> None:
        self.bench = bench
        self.engine = engine
        self._seen = 0.0

    async def start_worker(self, gate: Path) -> Side:
        argv = [sys.executable, str(HERE / "majordomus_side.py"), "worker"]
        argv += ["--concurrency", str(CONCURRENCY)]
        env = self.bench.env(**{wire.GATE_ENV: str(gate), RETAIN_ENV: str(RETAIN)})
        return await Side.start("majordomus-worker", argv, env, self.bench.workdir)

    async def _enqueue_all(self, n: int) -> tuple[float, float]:
        await asyncio.gather(*(self.engine.redis.ping() for _ in range(wire.ENQUEUERS + 1)))

        async def one() -> None:
            await self.engine.start("bench.noop", {})

        t0 = time.time()
        await fan_out(n, one, wire.ENQUEUERS)
        return t0, time.time()

    async def enqueue(self, n: int) -> float:
        t0, t1 = await self._enqueue_all(n)
        return wire.rate(n, t0, t1)

    async def start_producer(self, n: int, gate: Path) -> Callable[[], Awaitable[object]]:
        async def produce() -> None:
            while not gate.exists():
                await asyncio.sleep(0.001)
            await self._enqueue_all(n)

        task = asyncio.create_task(produce())

        async def ended() -> object:
            await task
            return None

        return ended

    async def finished(self, workers: list[Side]) -> tuple[int, float]:
        count = await self.engine.store.finished_count()
        return count, time.time()

    async def pickup(self, n: int) -> list[float]:
        async def one() -> float:
            snap = await self.engine.start("bench.stamp", {})
            final = await self.engine.wait(snap.id, timeout_ms=30_000)
            output: Any = final.output
            return float(output["started"])

        return await wire.pickup_latencies(n, 7, one)


# -- rounds ----------------------------------------------------------------------------------


@dataclass
class Drain:
    rate: float
    redis_drain_us: float
    redis_enqueue_us: float
    worker_us: float
    enqueue_rate: float


async def redis_cpu(bench: Bench) -> float:
    client = bench.redis()
    try:
        info = await client.info("cpu")
    finally:
        await client.aclose()
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


async def drain(runner: Runner, bench: Bench, n: int, workers: int, interleaved: bool) -> Drain:
    """One round; see the module's docstring for what is timed."""
    await bench.flush()
    enqueue_cpu, enqueue_rate = math.nan, math.nan
    if not interleaved:
        r0 = await redis_cpu(bench)
        enqueue_rate = await runner.enqueue(n)
        enqueue_cpu = await redis_cpu(bench) - r0
    gate = bench.workdir / f"gate-{time.monotonic_ns()}"
    sides: list[Side] = []
    try:
        for _ in range(workers):
            sides.append(await runner.start_worker(gate))
        producer = await runner.start_producer(n, gate) if interleaved else None
        for side in sides:
            await side.wait_loaded()
        await runner.wait_loaded()
        w0 = sum(s.cpu_seconds() for s in sides)
        r0 = await redis_cpu(bench)
        t0 = time.time()
        gate.touch()
        t1 = await _until_done(runner, sides, n, t0 + max(120, n / 50))
        r1 = await redis_cpu(bench)
        w1 = sum(s.cpu_seconds() for s in sides)
        if producer is not None:
            await producer()
    finally:
        for side in sides:
            await side.stop()
    return Drain(
        wire.rate(n, t0, t1),
        (r1 - r0) / n * 1e6,
        enqueue_cpu / n * 1e6,
        (w1 - w0) / n * 1e6,
        enqueue_rate,
    )


async def _until_done(runner: Runner, sides: list[Side], n: int, deadline: float) -> float:
    while True:
        count, last = await runner.finished(sides)
        if count >= n:
            return last
        if time.time() > deadline or not all(s.alive() for s in sides):
            logs = "\n".join(s.log() for s in sides)
            raise RuntimeError(f"{runner.label}: {count} of {n} finished:\n{logs}")
        await asyncio.sleep(DONE_POLL)


async def pickup(runner: Runner, bench: Bench, n: int) -> list[float]:
    await bench.flush()
    gate = bench.workdir / f"gate-{time.monotonic_ns()}"
    gate.touch()
    worker = await runner.start_worker(gate)
    try:
        await worker.wait_loaded()
        await asyncio.sleep(0.3 if bench.quick else 1.0)  # started, connected and idle
        return await runner.pickup(n)
    finally:
        await worker.stop()


async def measure(runner: Runner, bench: Bench) -> dict[str, float]:
    n = bench.size(20_000, 100)
    rounds = [(DRAIN_1, 1, False)]
    if not bench.quick:  # a quick run only shows that every side still runs
        rounds += [(DRAIN_2, 2, False), (MIXED_1, 1, True), (MIXED_2, 2, True)]
    found: dict[str, float] = {}
    for metric, workers, interleaved in rounds:
        print(f"   peers: {runner.label}, {metric.name} ...", flush=True)
        result = await drain(runner, bench, n, workers, interleaved)
        found[metric.name] = result.rate
        if metric is DRAIN_1:
            found[REDIS_DRAIN.name] = result.redis_drain_us
            found[REDIS_ALL.name] = result.redis_drain_us + result.redis_enqueue_us
            found[WORKER_CPU.name] = result.worker_us
            found[ENQUEUE_RATE.name] = result.enqueue_rate
    latencies = await pickup(runner, bench, bench.size(300, 5))
    found[PICKUP_50.name] = percentile(latencies, 50)
    found[PICKUP_99.name] = percentile(latencies, 99)
    return found


# -- the scenario ----------------------------------------------------------------------------


def _ready_peers(bench: Bench) -> list[Peer]:
    if bench.quick:
        absent = [p.name for p in PEERS if not installed(p)]
        if absent:
            bench.note(f"{NOT_RUN}: {', '.join(absent)}" if len(absent) < len(PEERS) else NOT_RUN)
        return [p for p in PEERS if installed(p)]
    ready = []
    for peer in PEERS:
        if not installed(peer):
            print(f"   peers: installing {' '.join(peer.pins)} into {peer.venv} ...", flush=True)
            log = bench.workdir / f"install-{peer.name}.log"
            try:
                install(peer, log)
            except (OSError, subprocess.CalledProcessError) as exc:
                tail = log.read_text(errors="replace")[-500:] if log.exists() else ""
                bench.note(f"peers: {peer.label} not installed ({exc}): {tail}")
                continue
        ready.append(peer)
    return ready


async def run(bench: Bench) -> list[Row]:
    peers = _ready_peers(bench)
    if not peers:
        return []
    server = EmbeddedRedis().start()
    own = dataclasses.replace(bench, redis_url=server.url)
    rounds = bench.size(PEER_ROUNDS, 1)
    found: dict[str, list[dict[str, float]]] = {}
    failed: set[str] = set()
    try:
        async with own.engine() as engine:
            runners: list[Runner] = [OursRunner(own, engine), *(PeerRunner(p, own) for p in peers)]
            for turn in range(rounds):
                for runner in rotated(runners, turn):
                    if runner.label in failed:
                        continue
                    try:
                        found.setdefault(runner.label, []).append(await measure(runner, own))
                    except RuntimeError as exc:
                        failed.add(runner.label)
                        found.pop(runner.label, None)
                        bench.note(f"peers: {runner.label} failed: {str(exc)[:800]}")
    finally:
        server.stop()
    figures = {label: medians(each) for label, each in found.items()}
    _note_figures(bench, figures, found, server.binary, rounds)
    return rows_of(figures)


PEER_ROUNDS = 3
"""Rounds of every side in a full run (a quick run makes one)."""


def rotated(runners: list[Runner], turn: int) -> list[Runner]:
    """The sides in the order of round `turn`: the first of the last round goes last."""
    k = turn % len(runners)
    return runners[k:] + runners[:k]


def medians(rounds: list[dict[str, float]]) -> dict[str, float]:
    """Each figure's median over the rounds that have it (a NaN, a figure a side could not
    give, is left out unless every round gave one)."""
    names = dict.fromkeys(name for found in rounds for name in found)
    out: dict[str, float] = {}
    for name in names:
        values = sorted(v for found in rounds if not math.isnan(v := found.get(name, math.nan)))
        out[name] = percentile(values, 50) if values else math.nan
    return out


def _note_figures(
    bench: Bench,
    figures: Figures,
    found: dict[str, list[dict[str, float]]],
    binary: str,
    rounds: int,
) -> None:
    for label, median in figures.items():
        shown = "; ".join(f"{k} {v:,.1f}" for k, v in median.items())
        bench.note(f"peers: {label}: {shown}.")
        if len(found[label]) > 1:
            each = "; ".join(
                f"{metric.name} "
                + " ".join(f"{r.get(metric.name, math.nan):,.1f}" for r in found[label])
                for metric in (DRAIN_1, REDIS_ALL, PICKUP_50)
            )
            bench.note(f"peers: {label}, round by round: {each}.")
    bench.note(
        f"peers: N = {bench.size(20_000, 100)} no-op jobs a round, {rounds} round(s) of every "
        f"side in turned order, medians shown; pick-up {bench.size(300, 5)} jobs a round; on "
        f"a {Path(binary).name} of the scenario's own; jobs/s = N / (workers' gate opening "
        ".. N-th job finished); CPU per job over that drain."
    )
