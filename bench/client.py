"""Client: what `majordomus.Client` adds to a start, straight to Redis and through the API.

Three ways to start the same execution, side by side in one run: `Engine.start` in this
process (the baseline: what the API's route and `RedisTransport` both end in),
`Client(redis_url).start` (`RedisTransport`: the client's checks of the start's options,
then the same engine) and `Client(api_url).start` (`HttpTransport`: a POST to a real
`majordomus serve` process, which validates and starts it). The claim checked: on Redis the
client adds nothing measurable to the engine's hot path; through the API it adds one HTTP
hop, and this says how much.

Pick-up: one `bench.stamp` at a time into one idle `majordomus worker` process (the worker
`pickup` uses, max_jobs 10), a random 20-50 ms gap before each; the latency runs from just
before the start is called to the wall-clock time the handler's first line records (its
output, read afterwards by the engine's own `wait`, the same for all three, so nothing
about how the client follows is timed). Samples interleave one by one, the three sides in
an order turned every sample, so that the machine's noise lands on all three alike; a few
warm-up starts of each are not counted.

Start throughput: starts answered a second, with the worker stopped (the queue fills; only
the start is timed), N `bench.noop` starts one after the other (sequential) and N from 16
concurrent tasks of this one process (as `throughput` enqueues). Within a round each side's
N are made in blocks, the three sides' blocks interleaved in an order turned every block,
so that a slow stretch of the machine falls on all three; a side's rate in a round is its N
over the sum of its blocks' times, on a database emptied before each mode, connections
opened before the clock starts. The figure is the median of the rounds (not the best, as
`throughput` takes: the difference looked for is a few percent, less than the machine's
swing from one round to the next, and the best of each side may come from different
stretches). The CPU per start is this process's (user + system over the sequential
blocks); through the API, the API process's is added (psutil's 10 ms ticks, summed).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from bench.harness import (
    Bench,
    Child,
    Row,
    api_server,
    children,
    fan_out,
    majordomus_worker,
    median,
    ms,
    percentile,
    wait_for_api,
    wait_for_workers,
)
from majordomus.client import Client
from majordomus.engine import Engine

GAP = (0.020, 0.050)
WARM = 3
"""Pick-up starts of each side not counted (connections, code paths)."""
STARTERS = 16
"""Concurrent starting tasks of the one process, as `throughput` enqueues."""
SIDES = ("engine", "redis", "http")
NAMES = {
    "engine": "Engine.start (this process)",
    "redis": "Client(redis_url).start",
    "http": "Client(api_url).start, through the API",
}
BASELINE = "Engine.start, same process and worker"

Start = Callable[[str], Awaitable[str]]
"""Starts the capability with the empty input; answers the execution's id."""


@dataclass
class Side:
    name: str
    start: Start
    warm: Callable[[int], Awaitable[None]]
    """Opens this many connections before a timed round."""
    api: Child | None = None
    """The API process whose CPU is part of this side's cost."""
    pickup_ms: list[float] = field(default_factory=list)
    call_ms: list[float] = field(default_factory=list)
    """How long the start call itself took, in the pick-up samples."""
    sequential: list[float] = field(default_factory=list)
    concurrent: list[float] = field(default_factory=list)
    cpu_us: list[float] = field(default_factory=list)
    api_cpu_us: list[float] = field(default_factory=list)
    """The API process's share of `cpu_us`."""


async def run(bench: Bench) -> list[Row]:
    n_pickup = bench.size(300, 10)
    rounds = bench.size(5, 1)
    blocks = bench.size(10, 2)
    n_sequential = bench.size(1500, 40)
    n_concurrent = bench.size(3000, 80)
    with children() as kids:
        api, base_url = api_server(bench)
        worker = majordomus_worker(bench)
        kids.extend([api, worker])
        await wait_for_workers(bench, 1)
        await wait_for_api(base_url, api)
        async with bench.engine() as engine:
            on_redis = Client(bench.redis_url, settings=bench.settings())
            via_api = Client(base_url, settings=bench.settings())
            try:
                sides = _sides(engine, on_redis, via_api, api)
                await _pickup(engine, worker, sides, n_pickup)
                worker.stop()
                for r in range(rounds):
                    await _throughput_round(bench, sides, r, blocks, n_sequential, n_concurrent)
            finally:
                await on_redis.aclose()
                await via_api.aclose()
        if "Traceback" in api.log():
            bench.note(f"client: the API logged an error:\n{api.log()[-1500:]}")
    return _rows(bench, sides, n_pickup, rounds, blocks, n_sequential, n_concurrent)


def _sides(engine: Engine, on_redis: Client, via_api: Client, api: Child) -> dict[str, Side]:
    async def by_engine(cap: str) -> str:
        return (await engine.start(cap, {})).id

    async def by_client(cap: str) -> str:
        return (await on_redis.start(cap, {})).id

    async def by_api(cap: str) -> str:
        return (await via_api.start(cap, {})).id

    async def ping(redis: Any, n: int) -> None:
        await asyncio.gather(*(redis.ping() for _ in range(n)))

    async def warm_engine(n: int) -> None:
        await ping(engine.redis, n)

    async def warm_client(n: int) -> None:
        await ping(on_redis.transport.engine.redis, n)  # type: ignore[attr-defined]

    async def warm_api(n: int) -> None:
        http = via_api.transport.http  # type: ignore[attr-defined]
        await asyncio.gather(*(http.get("/api/v1/live") for _ in range(n)))

    return {
        "engine": Side("engine", by_engine, warm_engine),
        "redis": Side("redis", by_client, warm_client),
        "http": Side("http", by_api, warm_api, api),
    }


def _turned(i: int) -> list[str]:
    """The sides in the order of turn `i` (each first, second and third alike often)."""
    k = i % len(SIDES)
    return list(SIDES[k:] + SIDES[:k])


# -- pick-up ----------------------------------------------------------------------------


async def _pickup(engine: Engine, worker: Child, sides: dict[str, Side], n: int) -> None:
    rng = random.Random(7)
    for i in range(n + WARM):
        for name in _turned(i):
            side = sides[name]
            await asyncio.sleep(rng.uniform(*GAP))
            wall0 = time.time()
            t0 = time.perf_counter()
            execution_id = await side.start("bench.stamp")
            called = time.perf_counter() - t0
            final = await engine.wait(execution_id, timeout_ms=30_000)
            if final.state != "succeeded":
                raise RuntimeError(
                    f"{execution_id} ({name}) ended {final.state}:\n{worker.log()[-2000:]}"
                )
            output: Any = final.output
            if i >= WARM:
                side.pickup_ms.append(ms(float(output["started"]) - wall0))
                side.call_ms.append(ms(called))


# -- start throughput ---------------------------------------------------------------------


async def _throughput_round(
    bench: Bench, sides: dict[str, Side], r: int, blocks: int, n_sequential: int, n_concurrent: int
) -> None:
    """One round: each side's N sequential starts in `blocks` blocks, the sides' blocks
    interleaved in a turned order; then the same for N from concurrent tasks. A side's rate
    in the round is its N over the sum of its blocks' times."""
    for concurrent, n in ((False, n_sequential), (True, n_concurrent)):
        await bench.flush()
        for side in sides.values():  # connections open, this round's first start not timed
            await side.warm(STARTERS + 1)
            await side.start("bench.noop")
        wall = dict.fromkeys(sides, 0.0)
        cpu = dict.fromkeys(sides, 0.0)
        api = dict.fromkeys(sides, 0.0)
        for b in range(blocks):
            for name in _turned(r * blocks + b):
                side = sides[name]
                cpu0, api0 = time.process_time(), _cpu(side.api)
                t0 = time.perf_counter()
                await _block(side.start, n // blocks, STARTERS if concurrent else 1)
                wall[name] += time.perf_counter() - t0
                api[name] += _cpu(side.api) - api0
                cpu[name] += time.process_time() - cpu0 + _cpu(side.api) - api0
        done = n // blocks * blocks
        for name, side in sides.items():
            if concurrent:
                side.concurrent.append(done / wall[name])
            else:
                side.sequential.append(done / wall[name])
                side.cpu_us.append(cpu[name] / done * 1e6)
                side.api_cpu_us.append(api[name] / done * 1e6)
    await bench.flush()


async def _block(start: Start, n: int, tasks: int) -> None:
    if tasks == 1:
        for _ in range(n):
            await start("bench.noop")
        return

    async def one() -> None:
        await start("bench.noop")

    await fan_out(n, one, tasks)


def _cpu(child: Child | None) -> float:
    return child.cpu_seconds() if child is not None else 0.0


# -- figures ------------------------------------------------------------------------------


def _rows(
    bench: Bench,
    sides: dict[str, Side],
    n_pickup: int,
    rounds: int,
    blocks: int,
    n_sequential: int,
    n_concurrent: int,
) -> list[Row]:
    base = sides["engine"]
    rows: list[Row] = []

    def row(metric: str, ours: float, unit: str, baseline: float, lower: bool) -> None:
        rows.append(
            Row("client", metric, ours, unit, baseline, BASELINE, higher_is_better=not lower)
        )

    for name in ("redis", "http"):
        side = sides[name]
        for p in (50, 99):
            row(f"start -> handler, p{p}, {NAMES[name]}", percentile(side.pickup_ms, p), "ms",
                percentile(base.pickup_ms, p), lower=True)  # fmt: skip
    for name in ("redis", "http"):
        side = sides[name]
        row(f"starts/s, sequential, {NAMES[name]}", median(side.sequential), "/s",
            median(base.sequential), lower=False)  # fmt: skip
        row(f"starts/s, {STARTERS} concurrent, {NAMES[name]}", median(side.concurrent), "/s",
            median(base.concurrent), lower=False)  # fmt: skip
    for name, where in (("redis", "this process"), ("http", "this process + the API's")):
        row(f"CPU per start ({where}), {NAMES[name]}", median(sides[name].cpu_us), "us",
            median(base.cpu_us), lower=True)  # fmt: skip
    api_cpu = " ".join(f"{v:.0f}" for v in sides["http"].api_cpu_us)
    bench.note(
        f"client: pick-up of {n_pickup} bench.stamp starts per side (after {WARM} warm-up), "
        f"interleaved one by one in a turned order, a random {GAP[0] * 1000:.0f}-"
        f"{GAP[1] * 1000:.0f} ms gap before each, into one idle `majordomus worker`; latency "
        "= the handler's own time.time() minus the time just before the start call. The "
        "start call alone, p50 / p99: "
        + ", ".join(
            f"{name} {percentile(s.call_ms, 50):.2f} / {percentile(s.call_ms, 99):.2f} ms"
            for name, s in sides.items()
        )
        + "."
    )
    bench.note(
        f"client: start throughput, median of {rounds} round(s), the worker stopped; a "
        f"round: {n_sequential} sequential starts a side, then {n_concurrent} from {STARTERS} "
        f"concurrent tasks of one process, each side's in {blocks} blocks interleaved with "
        "the others' in a turned order, on a database emptied before each; rounds (/s), "
        "sequential: "
        + "; ".join(f"{name} {_rates(s.sequential)}" for name, s in sides.items())
        + "; concurrent: "
        + "; ".join(f"{name} {_rates(s.concurrent)}" for name, s in sides.items())
        + "; CPU per sequential start (us): "
        + "; ".join(f"{name} {_rates(s.cpu_us)}" for name, s in sides.items())
        + f" (of which the API process: {api_cpu}). Round by round, the median ratio to "
        "Engine.start, sequential / concurrent: "
        + ", ".join(
            f"{name} {_paired(s.sequential, base.sequential):.3f} / "
            f"{_paired(s.concurrent, base.concurrent):.3f}"
            for name, s in sides.items()
            if s is not base
        )
        + "."
    )
    return rows


def _paired(ours: list[float], base: list[float]) -> float:
    """The median of the rounds' ratios (each round's sides ran back to back)."""
    return median([a / b for a, b in zip(ours, base, strict=True)])


def _rates(values: list[float]) -> str:
    return " ".join(f"{v:.0f}" for v in values)
