"""Isolation: what running a handler in a child process of its worker (`runs_in="process"`)
costs beside the loop and a thread, what it bounds when the worker stops, and what recycling
its children does to a leak.

Its workers alone load `bench.process_capabilities` beside `bench.capabilities`
(`MAJORDOMUS_CAPABILITIES`), so no other scenario's worker starts a child; each raises
`MAJORDOMUS_RETAIN_EXECUTIONS` so that the finished index, which rounds count, is never
pruned under them.

Cost (one worker, `max_jobs` 10, default child settings: forkserver, 1,000 executions a
child, no memory bound): two pairs, each measured side by side, interleaved.
`bench.noop_process` (async, in a child) against `bench.noop` (the loop), and
`bench.noop_def_process` (a plain `def`, in a child) against `bench.noop_thread` (the same
`def` in a thread). A warm-up burst of each first (its pool grows to as many children as
run at once; its rate is noted, it is not counted). Pick-up as `pickup` times it: one start at a
time into an idle worker after a random 20-50 ms gap (the four capabilities in turn), on the
client's clock from just before `Engine.start` to a blocking read of `execution.started`,
which the take writes before any handler runs (so a child is not on that path), and on to
the terminal event (`execution.completed`: where the child's round trip shows). Throughput
as `throughput` times it: N starts from 16 concurrent tasks, N over first start .. the
finished index grown by N; rounds alternate the four, each one's best round counts.

Stop: a worker with two stuck plain-`def` handlers (threads), two stuck process handlers
and two stuck async handlers (each 60 s, deaf to its cancel flag; `bench.stuck_*`) gets
SIGTERM once all six have logged that they are under way; timed from the signal to its
exit, at the default graces (`MAJORDOMUS_SHUTDOWN_GRACE` 10 s, `MAJORDOMUS_CANCEL_GRACE` 10 s;
a quick run 1 s each). Every process that was a child of the worker (the handlers' children,
the fork server, multiprocessing's resource tracker), sampled until it exited, is looked for
at its exit and until a second later (the fork server and the tracker exit once they see
the worker's end of their pipe close): alive and not a zombie then counts as left behind.

Leak: `bench.leak_process` keeps 100 KiB more per execution (every page written) in a
module-level list of its child; 10,000 executions (quick: 60) started by 16 concurrent
tasks on a fresh worker (`max_jobs` `LEAK_MAX_JOBS`, so two children) with recycling on
(`MAJORDOMUS_CHILD_MAX_MEMORY_MB` 200, `MAJORDOMUS_CHILD_MAX_EXECUTIONS` its default 1,000)
and off (both 0), then the same leak in the worker's own loop (`bench.leak_loop`), and last
recycling on again at `max_jobs` 10 (ten children, each allowed as much). RSS (psutil) of
the worker plus all its children (the fork server, the resource tracker and every warm child
too; pages the children share are counted once per child, as RSS does: the PSS at the end
is noted), taken once its warm children are up, sampled every 0.1 s for the peak, and once
more as the last execution is seen finished.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psutil

import bench.process_capabilities  # noqa: F401  the engine's registry must know them
from bench.harness import (
    Bench,
    Child,
    Row,
    children,
    fan_out,
    majordomus_worker,
    ms,
    percentile,
    wait_for_workers,
)
from majordomus.engine import Engine
from majordomus.model import TERMINAL_EVENT_TYPES, event_decoder, event_type_of
from majordomus.registry import REGISTRY

CAPABILITIES = "bench.capabilities,bench.process_capabilities"
MAX_JOBS = 10
ENQUEUERS = 16
"""Concurrent starting tasks of the one client process."""
POLL = 0.01
GAP = (0.020, 0.050)
RETAIN = "100000000"
DEFAULT_CHILD = {
    "MAJORDOMUS_CHILD_START": "forkserver",
    "MAJORDOMUS_CHILD_MAX_EXECUTIONS": "1000",
    "MAJORDOMUS_CHILD_MAX_MEMORY_MB": "0",
}
PAIRS = (
    ("bench.noop_process", "bench.noop", "async no-op", "in a process", "in the loop"),
    ("bench.noop_def_process", "bench.noop_thread", "plain def no-op", "in a process",
     "in a thread"),
)  # fmt: skip
STUCK = ("bench.stuck_thread", "bench.stuck_process", "bench.stuck_async")
STUCK_SECONDS = 60.0
LINGER_SECONDS = 1.0
"""How long after the worker's exit its children may take to notice it and exit (the fork
server and the resource tracker read their end of a pipe to it)."""
LEAK_KIB = 100
LEAK_MAX_JOBS = 2
"""The leak's worker runs this many at once (so as many children): a child's bounds hold per
child, so a pool of `max_jobs` children may hold `max_jobs` times them (the row at
`MAX_JOBS` shows it)."""
LEAK_MEMORY_MB = 200
SAMPLE_SECONDS = 0.1
MiB = 2**20


def isolation_worker(bench: Bench, max_jobs: int = MAX_JOBS, **env: str) -> Child:
    """A worker of this scenario: the process capabilities loaded, nothing pruned."""
    settings = {
        "MAJORDOMUS_CAPABILITIES": CAPABILITIES,
        "MAJORDOMUS_RETAIN_EXECUTIONS": RETAIN,
        **DEFAULT_CHILD,
        **env,
    }
    return majordomus_worker(bench, max_jobs, **settings)


async def run(bench: Bench) -> list[Row]:
    rows = await _cost(bench)
    await bench.flush()
    rows += await _stop(bench)
    await bench.flush()
    rows += await _leak(bench)
    return rows


# -- cost: pick-up and throughput, process beside loop and thread ---------------------------


async def _cost(bench: Bench) -> list[Row]:
    n_pickup = bench.size(150, 10)
    n_batch = bench.size(1000, 50)
    rounds = bench.size(5, 1)
    warm_n = bench.size(200, 20)
    caps = [cap for pair in PAIRS for cap in pair[:2]]
    rng = random.Random(11)
    with children() as kids:
        worker = isolation_worker(bench)
        kids.append(worker)
        await wait_for_workers(bench, 1)
        async with bench.engine() as engine:
            await asyncio.gather(*(engine.redis.ping() for _ in range(ENQUEUERS + 1)))
            warm: dict[str, float] = {}
            for cap in caps:  # each pool grows to as many children as run at once
                warm[cap] = await _batch(engine, cap, warm_n, {}, [worker])
            latencies: dict[str, list[tuple[float, float]]] = {cap: [] for cap in caps}
            for _ in range(n_pickup):
                for cap in caps:
                    await asyncio.sleep(rng.uniform(*GAP))
                    latencies[cap].append(await _one_start(engine, cap, worker))
            rates: dict[str, list[float]] = {cap: [] for cap in caps}
            for _ in range(rounds):
                for cap in caps:
                    rates[cap].append(await _batch(engine, cap, n_batch, {}, [worker]))
        tree = _tree(worker.ps)
    bench.note(
        "isolation, cost: warm-up burst of "
        f"{warm_n} each (not counted): "
        + ", ".join(f"{cap} {rate:.0f}/s" for cap, rate in warm.items())
        + f"; throughput rounds of {n_batch} from {ENQUEUERS} tasks, best of {rounds}: "
        + "; ".join(f"{cap} " + " ".join(f"{r:.0f}" for r in rates[cap]) for cap in caps)
        + f" /s; the worker had {len(tree) - 1} child processes after them "
        "(the fork server and resource tracker among them)."
    )
    rows: list[Row] = []
    for ours_cap, base_cap, what, ours_where, base_where in PAIRS:
        ours, base = latencies[ours_cap], latencies[base_cap]
        name = f"{base_cap} ({what} {base_where})"
        label = f"{what} {ours_where}"
        for index, leg in ((0, "start -> started"), (1, "start -> completed")):
            for p in (50, 99):
                rows.append(
                    Row("isolation", f"{label}: {leg}, p{p}",
                        percentile([s[index] for s in ours], p), "ms",
                        percentile([s[index] for s in base], p), name,
                        higher_is_better=False)
                )  # fmt: skip
        rows.append(
            Row("isolation", f"{label}: executions/s, {n_batch} at once", max(rates[ours_cap]),
                "/s", max(rates[base_cap]), name)
        )  # fmt: skip
    bench.note(
        f"isolation, cost: pick-up over {n_pickup} starts of each, one at a time after a "
        f"random {GAP[0] * 1000:.0f}-{GAP[1] * 1000:.0f} ms gap, client-timed to a blocking "
        "read of each event; `started` is written by the take, before any handler runs."
    )
    return rows


async def _one_start(engine: Engine, cap: str, worker: Child) -> tuple[float, float]:
    """(start -> execution.started, start -> its terminal event) in ms, client-timed."""
    t0 = time.perf_counter()
    snap = await engine.start(cap, {})
    started: float | None = None
    after = 2  # created, queued: the next is started
    while True:
        raws = await engine.store.read_stream_after(snap.id, after, 5000)
        elapsed = time.perf_counter() - t0
        if not raws:
            if not worker.alive() or elapsed > 30:
                raise RuntimeError(f"{cap} {snap.id} did not end:\n{worker.log()[-2000:]}")
            continue
        for raw in raws:
            event = event_decoder.decode(raw)
            after = max(after, event.sequence)
            kind = event_type_of(event)
            if kind == "execution.started" and started is None:
                started = elapsed
            elif kind in TERMINAL_EVENT_TYPES:
                if kind != "execution.completed":
                    raise RuntimeError(f"{cap} {snap.id} ended {kind}:\n{worker.log()[-2000:]}")
                return ms(started if started is not None else elapsed), ms(elapsed)


async def _batch(
    engine: Engine,
    cap: str,
    n: int,
    value: dict[str, Any],
    kids: list[Child],
    during: Callable[[], Awaitable[None]] | None = None,
) -> float:
    """N starts of `cap` from concurrent tasks; N over first start .. N more finished."""
    before = await engine.store.finished_count()

    async def start() -> None:
        await engine.start(cap, value)

    t0 = time.perf_counter()
    await fan_out(n, start, ENQUEUERS)
    deadline = t0 + 600
    while (done := await engine.store.finished_count() - before) < n:
        if time.perf_counter() > deadline or not all(k.alive() for k in kids):
            logs = "\n".join(k.log()[-2000:] for k in kids)
            raise RuntimeError(f"{cap}: only {done} of {n} finished:\n{logs}")
        await asyncio.sleep(POLL)
    rate = n / (time.perf_counter() - t0)
    if during is not None:
        await during()
    return rate


# -- stop: a worker with stuck handlers of every kind, told to stop -------------------------


async def _stop(bench: Bench) -> list[Row]:
    grace = 1.0 if bench.quick else 10.0
    graces = {
        "MAJORDOMUS_SHUTDOWN_GRACE": f"{grace:g}",
        "MAJORDOMUS_CANCEL_GRACE": f"{grace:g}",
    }
    with children() as kids:
        worker = isolation_worker(bench, **graces)
        kids.append(worker)
        await wait_for_workers(bench, 1)
        async with bench.engine() as engine:
            ids = [
                (await engine.start(cap, {"seconds": STUCK_SECONDS})).id
                for cap in STUCK
                for _ in range(2)
            ]
            under_way = time.perf_counter()
            for execution_id in ids:
                await _until_logged(engine, execution_id, worker)
            under_way = time.perf_counter() - under_way
            seen: Seen = {}
            _see(worker.ps, seen)
            before = _roles(list(seen), seen)
            n_before = len(seen)
            t0 = time.perf_counter()
            worker.process.send_signal(signal.SIGTERM)
            while worker.process.poll() is None:
                _see(worker.ps, seen)
                if time.perf_counter() - t0 > 120:
                    raise RuntimeError(f"the worker did not stop in 120 s:\n{worker.log()[-3000:]}")
                await asyncio.sleep(0.005)
            took = time.perf_counter() - t0
            left_at_exit = _alive(seen)
            all_gone: float | None = None
            while time.perf_counter() - t0 < took + LINGER_SECONDS:
                if not _alive(seen):
                    all_gone = time.perf_counter() - t0 - took
                    break
                await asyncio.sleep(0.005)
            left_later = _alive(seen)
            ends = [(await engine.get(i)).state for i in ids]
        log = worker.log()
    for pid in left_later:  # nothing of the run stays behind, whatever the figures say
        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).kill()
    bound = 2 * grace
    states = ", ".join(f"{cap.split('.')[1]}: {ends[2 * i]}/{ends[2 * i + 1]}" for i, cap in enumerate(STUCK))
    problems = _problems(log)
    bench.note(
        f"isolation, stop: 2 stuck handlers each of thread, process and async (sleeping "
        f"{STUCK_SECONDS:g} s, deaf to cancel; all six under way {under_way:.2f} s after their "
        f"starts), SIGTERM at MAJORDOMUS_SHUTDOWN_GRACE = MAJORDOMUS_CANCEL_GRACE = {grace:g} s; "
        f"the worker's child processes before the signal: {before} ({len(seen)} seen in all); "
        f"alive as it exited: {_roles(left_at_exit, seen)}; "
        + (
            f"all gone {ms(all_gone):.0f} ms after its exit; "
            if all_gone is not None
            else f"{LINGER_SECONDS:g} s after its exit still alive: {_roles(left_later, seen)}; "
        )
        + f"the executions ended {states}; worker log: {problems}."
    )
    return [
        Row("isolation", "stop after SIGTERM, 6 stuck handlers (2 thread, 2 process, 2 async)",
            took, "s", bound, f"shutdown + cancel grace ({grace:g} + {grace:g} s)",
            "< graces + 2 s", took < bound + 2, higher_is_better=False),
        Row("isolation", f"worker's child processes alive {LINGER_SECONDS:g} s after its exit",
            float(len(left_later)), "processes", float(n_before),
            "its child processes before SIGTERM", "0", not left_later, higher_is_better=False),
    ]  # fmt: skip


async def _until_logged(engine: Engine, execution_id: str, worker: Child) -> None:
    """Until the execution's handler has logged (it is under way, in its child if any)."""
    after = 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if not worker.alive():
            raise RuntimeError(f"the worker exited:\n{worker.log()[-3000:]}")
        for raw in await engine.store.read_stream_after(execution_id, after, 1000):
            event = event_decoder.decode(raw)
            after = max(after, event.sequence)
            if event_type_of(event) == "execution.log":
                return
            if event_type_of(event) in TERMINAL_EVENT_TYPES:
                raise RuntimeError(f"{execution_id} ended early:\n{worker.log()[-3000:]}")
    raise RuntimeError(f"{execution_id} did not start within 60 s:\n{worker.log()[-3000:]}")


Seen = dict[int, tuple[float, str]]
"""A pid, its creation time (so a reused pid is not taken for it) and what it is."""


def _see(ps: psutil.Process, seen: Seen) -> None:
    """Every process now under the worker."""
    with contextlib.suppress(psutil.Error):
        for kid in ps.children(recursive=True):
            if kid.pid in seen:
                continue
            with contextlib.suppress(psutil.Error):
                seen[kid.pid] = (kid.create_time(), _what(kid, ps.pid))


def _what(p: psutil.Process, worker_pid: int) -> str:
    """A child of a worker by its role: a handler's child (forked by the fork server, whose
    command line it keeps, or spawned), the fork server, multiprocessing's resource tracker."""
    if p.ppid() != worker_pid:
        return "handler's child"
    line = " ".join(p.cmdline())
    if "resource_tracker" in line:
        return "resource tracker"
    if "forkserver" in line:
        return "fork server"
    return "handler's child" if "spawn_main" in line else line[:60]


def _alive(seen: Seen) -> list[int]:
    alive = []
    for pid, (created, _) in seen.items():
        with contextlib.suppress(psutil.Error):
            p = psutil.Process(pid)
            if p.create_time() == created and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
    return alive


def _roles(pids: list[int], seen: Seen) -> str:
    counted: dict[str, int] = {}
    for pid in pids:
        counted[seen[pid][1]] = counted.get(seen[pid][1], 0) + 1
    return ", ".join(f"{n} {role}" for role, n in sorted(counted.items())) or "none"


def _problems(log: str) -> str:
    """What a worker's log says went wrong: its tracebacks and ERROR lines, counted."""
    tracebacks = log.count("Traceback")
    errors = len(re.findall(r"\bERROR\b", log))
    warnings = len(re.findall(r"\bWARNING\b", log))
    return f"{tracebacks} tracebacks, {errors} ERROR and {warnings} WARNING lines"


# -- leak: a leaking handler's worker, with and without recycling ---------------------------


async def _leak(bench: Bench) -> list[Row]:
    n = bench.size(10_000, 60)
    on = {
        "MAJORDOMUS_CHILD_MAX_MEMORY_MB": str(LEAK_MEMORY_MB),
        "MAJORDOMUS_CHILD_MAX_EXECUTIONS": "1000",
    }
    off = {"MAJORDOMUS_CHILD_MAX_MEMORY_MB": "0", "MAJORDOMUS_CHILD_MAX_EXECUTIONS": "0"}
    recycled = await _leak_run(bench, "bench.leak_process", n, LEAK_MAX_JOBS, on)
    kept = await _leak_run(bench, "bench.leak_process", n, LEAK_MAX_JOBS, off)
    loop = await _leak_run(bench, "bench.leak_loop", n, LEAK_MAX_JOBS, {})
    wide = await _leak_run(bench, "bench.leak_process", n, MAX_JOBS, on)
    runs = (
        (f"recycling on, max_jobs {LEAK_MAX_JOBS}", recycled),
        (f"recycling off, max_jobs {LEAK_MAX_JOBS}", kept),
        (f"in the loop, max_jobs {LEAK_MAX_JOBS}", loop),
        (f"recycling on, max_jobs {MAX_JOBS}", wide),
    )
    bench.note(
        f"isolation, leak: {n:,} executions keeping {LEAK_KIB} KiB each "
        f"({n * LEAK_KIB / 1024:,.0f} MiB in all), started by {ENQUEUERS} tasks; recycling on = "
        f"MAJORDOMUS_CHILD_MAX_MEMORY_MB {LEAK_MEMORY_MB} and MAJORDOMUS_CHILD_MAX_EXECUTIONS "
        "1000, off = both 0. Every worker loads all of bench.process_capabilities, so it keeps "
        "a warm child for each of its four process capabilities. "
        + "; ".join(
            f"{name}: {r['rate']:.0f}/s, RSS before {r['start'] / MiB:.0f} MiB, "
            f"peak {r['peak'] / MiB:.0f}, end {r['end'] / MiB:.0f} (PSS {r['pss'] / MiB:.0f}) "
            f"MiB over {r['processes']} processes, {r['recycles']} children recycled "
            f"({r['by_count']} at their count), log: {r['problems']}"
            for name, r in runs
        )
        + "."
    )
    on_name = f"process, recycled ({LEAK_MEMORY_MB} MiB / 1000 executions)"
    off_name = "process, never recycled"
    what = f"leak x{n:,}, max_jobs {LEAK_MAX_JOBS}"
    return [
        Row("isolation", f"{what}, process, recycled: RSS at the end (worker + children)",
            recycled["end"] / MiB, "MiB", kept["end"] / MiB, off_name, higher_is_better=False),
        Row("isolation", f"{what}, process, recycled: peak RSS (worker + children)",
            recycled["peak"] / MiB, "MiB", kept["peak"] / MiB, off_name, higher_is_better=False),
        Row("isolation", f"{what}, in the loop (no isolation): RSS at the end",
            loop["end"] / MiB, "MiB", recycled["end"] / MiB, on_name, higher_is_better=False),
        Row("isolation", f"{what}, in the loop (no isolation): peak RSS",
            loop["peak"] / MiB, "MiB", recycled["peak"] / MiB, on_name, higher_is_better=False),
        Row("isolation", f"leak x{n:,}, max_jobs {MAX_JOBS}, process, recycled: peak RSS",
            wide["peak"] / MiB, "MiB", recycled["peak"] / MiB, f"the same at max_jobs {LEAK_MAX_JOBS}",
            higher_is_better=False),
    ]  # fmt: skip


async def _leak_run(
    bench: Bench, cap: str, n: int, max_jobs: int, env: dict[str, str]
) -> dict[str, Any]:
    await bench.flush()
    with children() as kids:
        worker = isolation_worker(bench, max_jobs, **env)
        kids.append(worker)
        await wait_for_workers(bench, 1)
        await _warm_children(worker)
        start = _tree_rss(worker.ps)
        peak = start
        end = pss = 0
        processes = 0

        async def sample() -> None:
            nonlocal peak
            while True:
                peak = max(peak, _tree_rss(worker.ps))
                await asyncio.sleep(SAMPLE_SECONDS)

        async def last() -> None:
            nonlocal end, processes, peak, pss
            end = _tree_rss(worker.ps)
            peak = max(peak, end)
            processes = len(_tree(worker.ps))
            pss = _tree_pss(worker.ps)

        sampler = asyncio.create_task(sample())
        try:
            async with bench.engine() as engine:
                await asyncio.gather(*(engine.redis.ping() for _ in range(ENQUEUERS + 1)))
                rate = await _batch(engine, cap, n, {"kib": LEAK_KIB}, [worker], during=last)
        finally:
            sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sampler
        log = worker.log()
    recycles = re.findall(r"recycling its child \d+ after (\d+) executions", log)
    return {
        "rate": rate,
        "start": start,
        "peak": peak,
        "end": end,
        "pss": pss,
        "processes": processes,
        "recycles": len(recycles),
        "by_count": sum(1 for r in recycles if int(r) >= 1000),
        "problems": _problems(log),
    }


async def _warm_children(worker: Child, timeout: float = 60) -> None:
    """Until the worker's pools have their warm child each (one per process capability it
    loaded), so that the RSS before a run counts them every time."""
    want = sum(
        1
        for cap in REGISTRY
        if cap.runs_in == "process" and cap.handler.__module__ in CAPABILITIES.split(",")
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen: Seen = {}
        _see(worker.ps, seen)
        if sum(1 for _, role in seen.values() if role == "handler's child") >= want:
            await asyncio.sleep(0.2)  # their imports' pages touched
            return
        await asyncio.sleep(0.05)
    raise RuntimeError(f"the worker's {want} warm children did not start:\n{worker.log()[-2000:]}")


def _tree(ps: psutil.Process) -> list[psutil.Process]:
    with contextlib.suppress(psutil.Error):
        return [ps, *ps.children(recursive=True)]
    return []


def _tree_rss(ps: psutil.Process) -> int:
    """The RSS of a process and all its children, in bytes."""
    total = 0
    for p in _tree(ps):
        with contextlib.suppress(psutil.Error):
            total += int(p.memory_info().rss)
    return total


def _tree_pss(ps: psutil.Process) -> int:
    """The proportional set size of a process and all its children (shared pages split
    between them), in bytes; 0 where the platform has none."""
    total = 0
    for p in _tree(ps):
        with contextlib.suppress(psutil.Error, AttributeError):
            total += int(p.memory_full_info().pss)
    return total
