"""Sealing: what `MAJORDOMUS_ENCRYPTION_KEYS` costs, each figure beside the same without keys.

With keys, an execution's worker-only input is sealed (AES-SIV, `majordomus.store.sealing`)
by the start before it is written, and opened by the worker that takes it. Three figures,
each side by side with its baseline in the same run:

Seal and open: microseconds per `Sealer.seal` and per `Sealer.open` of the worker-only
input of `bench.noop_secret` (`{"token": <Secret>}`, ~190 bytes of JSON, the size of a
typical input), beside `msgspec.json.encode` of the same input (what a start does to it
anyway). Each is timed with `time.perf_counter` over a block of many calls; the three
blocks alternate, and each figure is the median of the rounds.

Start throughput: `Engine.start("bench.noop_secret", ...)` answered a second in this
process, no worker running (the queue fills), by two engines on the same Redis: one whose
settings carry a key, one without. As `client` measures it: a round is N sequential starts
a side, then N from 16 concurrent tasks, each side's N in blocks interleaved with the
other's in an order turned every block, on a database emptied before each mode; a side's
rate is its N over the sum of its blocks' times; the figure is the median of the rounds.
CPU per start is this process's (user + system, over the sequential blocks).

Drain: N `bench.noop_secret` executions started first (sealed, or not), then one fresh
`majordomus worker` process (max_jobs 10; given the key through its environment for the
sealed side) runs them all; the rate is N - 1 over the time from the first execution
finished to the last, as the finished index's scores (ms) say, so the worker's start-up is
not counted. Rounds alternate the two sides, in a turned order; the figure is the median.
The worker's CPU per execution is from its first finished execution seen to its last
(psutil, 10 ms ticks).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from bench.harness import (
    Bench,
    Child,
    Row,
    children,
    fan_out,
    majordomus_worker,
    median,
    percentile,
)
from majordomus.engine import Engine
from majordomus.store.sealing import MAGIC, Sealer, new_key

CAPABILITY = "bench.noop_secret"
TOKEN = "tok-" + "5e" * 88
"""The secret: its input is ~190 bytes of JSON."""
INPUT = {"token": TOKEN}
STARTERS = 16
SIDES = ("keys", "none")
BASELINE = "the same without encryption keys"
MAX_JOBS = 10
POLL = 0.005


async def run(bench: Bench) -> list[Row]:
    key = new_key()
    rows = _micro(bench, key)
    rows += await _starts(bench, key)
    rows += await _drain(bench, key)
    return rows


# -- seal and open ------------------------------------------------------------------------


def _micro(bench: Bench, key: str) -> list[Row]:
    rounds = bench.size(41, 3)
    calls = bench.size(10_000, 2_000)
    sealer = Sealer([key])
    plain = msgspec.json.encode(INPUT)
    sealed = sealer.seal(plain)
    assert sealer.open(sealed) == plain
    encode, seal, open_ = msgspec.json.encode, sealer.seal, sealer.open

    def per_call(one: Callable[[], Any]) -> float:
        t0 = time.perf_counter()
        for _ in range(calls):
            one()
        return (time.perf_counter() - t0) / calls * 1e6

    jobs: dict[str, Callable[[], Any]] = {
        "encode": lambda: encode(INPUT),
        "seal": lambda: seal(plain),
        "open": lambda: open_(sealed),
        "decode": lambda: msgspec.json.decode(plain),
    }
    us: dict[str, list[float]] = {name: [] for name in jobs}
    for one in jobs.values():  # warm-up, not counted
        one()
    for r in range(rounds):
        names = list(jobs)
        k = r % len(names)
        for name in names[k:] + names[:k]:
            us[name].append(per_call(jobs[name]))
    base = median(us["encode"])
    rows = [
        Row("sealing", f"us per seal of a {len(plain)} B worker input", median(us["seal"]),
            "us", base, "msgspec.json.encode of the same input", higher_is_better=False),
        Row("sealing", f"us per open of it ({len(sealed)} B sealed)", median(us["open"]),
            "us", base, "msgspec.json.encode of the same input", higher_is_better=False),
    ]  # fmt: skip
    bench.note(
        f"sealing: seal/open, median of {rounds} rounds of {calls} calls each, blocks turned; "
        "rounds (us): "
        + "; ".join(f"{name} {_figures(v, 2)}" for name, v in us.items())
        + f". msgspec.json.decode of the same input, for reference: {median(us['decode']):.2f} us. "
        "Best rounds (the machine's noise only slows a round): "
        + ", ".join(f"{name} {min(v):.2f}" for name, v in us.items())
        + " us."
    )
    return rows


# -- start throughput ---------------------------------------------------------------------

Start = Callable[[], Awaitable[Any]]


@dataclass
class Side:
    name: str
    engine: Engine
    sequential: list[float] = field(default_factory=list)
    concurrent: list[float] = field(default_factory=list)
    cpu_us: list[float] = field(default_factory=list)

    async def start(self) -> Any:
        return await self.engine.start(CAPABILITY, INPUT)


async def _starts(bench: Bench, key: str) -> list[Row]:
    rounds = bench.size(9, 1)
    blocks = bench.size(10, 2)
    n_sequential = bench.size(1500, 40)
    n_concurrent = bench.size(3000, 80)
    async with bench.engine(encryption_keys=[key]) as keyed, bench.engine() as plain:
        sides = {"keys": Side("keys", keyed), "none": Side("none", plain)}
        await _check_sealed(bench, sides)
        for r in range(rounds):
            await _round(bench, sides, r, blocks, n_sequential, n_concurrent)
        in_place = await _seal_in_place(sides["keys"], n_sequential)
    await bench.flush()
    ours, base = sides["keys"], sides["none"]
    rows = [
        Row("sealing", "starts/s, sequential, Engine.start with keys", median(ours.sequential),
            "/s", median(base.sequential), BASELINE),
        Row("sealing", f"starts/s, {STARTERS} concurrent, Engine.start with keys",
            median(ours.concurrent), "/s", median(base.concurrent), BASELINE),
        Row("sealing", "CPU per start (this process), with keys", median(ours.cpu_us), "us",
            median(base.cpu_us), BASELINE, higher_is_better=False),
    ]  # fmt: skip
    bench.note(
        f"sealing: start throughput of {CAPABILITY}, median of {rounds} round(s), no worker; "
        f"a round: {n_sequential} sequential starts a side, then {n_concurrent} from "
        f"{STARTERS} concurrent tasks, each side's in {blocks} blocks interleaved in a turned "
        "order. Rounds (/s), sequential: "
        + "; ".join(f"{s.name} {_figures(s.sequential)}" for s in sides.values())
        + "; concurrent: "
        + "; ".join(f"{s.name} {_figures(s.concurrent)}" for s in sides.values())
        + "; CPU per sequential start (us): "
        + "; ".join(f"{s.name} {_figures(s.cpu_us)}" for s in sides.values())
        + ". Round by round, the median ratio keys / none, sequential / concurrent / CPU: "
        + f"{_paired(ours.sequential, base.sequential):.3f} / "
        + f"{_paired(ours.concurrent, base.concurrent):.3f} / "
        + f"{_paired(ours.cpu_us, base.cpu_us):.3f}. Sealer.seal timed inside those starts "
        f"(one more block of {n_sequential} sequential, a timer around the call), median / p90: "
        f"{median(in_place):.2f} / {percentile(in_place, 90):.2f} us a call, against the "
        "tight loop's figure above (cold caches between starts)."
    )
    return rows


async def _seal_in_place(side: Side, n: int) -> list[float]:
    """How long `Sealer.seal` takes inside `Engine.start` (us per call), n sequential
    starts with a timer around it (its instance, shared by every store on these keys,
    wrapped for these starts only)."""
    sealer = side.engine.store.sealer
    seal = sealer.seal
    taken: list[float] = []

    def timed(data: bytes, **kwargs: Any) -> bytes:
        t0 = time.perf_counter()
        try:
            return seal(data, **kwargs)
        finally:
            taken.append((time.perf_counter() - t0) * 1e6)

    sealer.seal = timed  # type: ignore[method-assign]
    try:
        for _ in range(n):
            await side.start()
    finally:
        del sealer.seal
    return taken


async def _check_sealed(bench: Bench, sides: dict[str, Side]) -> None:
    """Each side writes what it should: sealed with keys, plain JSON without (and says
    whether an input without a `Secret`, `bench.noop`'s, is written and sealed too)."""
    await bench.flush()
    for side in sides.values():
        snap = await side.start()
        raw = await side.engine.redis.get(side.engine.store.keys.secret_input(snap.id))
        sealed = raw is not None and raw.startswith(MAGIC)
        if sealed != (side.name == "keys") or TOKEN.encode() in raw and side.name == "keys":
            raise RuntimeError(f"sealing: the {side.name} side wrote {raw!r}")
    keyed = sides["keys"].engine
    snap = await keyed.start("bench.noop", {})
    raw = await keyed.redis.get(keyed.store.keys.secret_input(snap.id))
    if raw is not None and raw.startswith(MAGIC):
        raise RuntimeError("sealing: a bench.noop start (no Secret in its input) was sealed")
    bench.note(
        "sealing: a bench.noop start (no Secret in its input) with keys writes its worker-only "
        "input plain: only an input that holds a secret pays the seal and the open."
    )
    await bench.flush()


async def _round(
    bench: Bench, sides: dict[str, Side], r: int, blocks: int, n_sequential: int, n_concurrent: int
) -> None:
    for concurrent, n in ((False, n_sequential), (True, n_concurrent)):
        await bench.flush()
        for side in sides.values():  # connections open, the first start not timed
            await asyncio.gather(*(side.engine.redis.ping() for _ in range(STARTERS + 1)))
            await side.start()
        wall = dict.fromkeys(sides, 0.0)
        cpu = dict.fromkeys(sides, 0.0)
        for b in range(blocks):
            k = (r * blocks + b) % len(SIDES)
            for name in SIDES[k:] + SIDES[:k]:
                side = sides[name]
                cpu0 = time.process_time()
                t0 = time.perf_counter()
                await _block(side.start, n // blocks, STARTERS if concurrent else 1)
                wall[name] += time.perf_counter() - t0
                cpu[name] += time.process_time() - cpu0
        done = n // blocks * blocks
        for name, side in sides.items():
            if concurrent:
                side.concurrent.append(done / wall[name])
            else:
                side.sequential.append(done / wall[name])
                side.cpu_us.append(cpu[name] / done * 1e6)


async def _block(start: Start, n: int, tasks: int) -> None:
    if tasks == 1:
        for _ in range(n):
            await start()
        return
    await fan_out(n, start, tasks)


# -- drain --------------------------------------------------------------------------------


async def _drain(bench: Bench, key: str) -> list[Row]:
    rounds = bench.size(6, 1)
    n = bench.size(3000, 60)
    rates: dict[str, list[float]] = {name: [] for name in SIDES}
    cpu: dict[str, list[float]] = {name: [] for name in SIDES}
    for r in range(rounds):
        k = r % len(SIDES)
        for name in SIDES[k:] + SIDES[:k]:
            keys = [key] if name == "keys" else []
            rate, cpu_us = await _drain_round(bench, keys, n)
            rates[name].append(rate)
            cpu[name].append(cpu_us)
    rows = [
        Row("sealing", "executions/s drained by 1 worker, with keys", median(rates["keys"]),
            "/s", median(rates["none"]), BASELINE),
        Row("sealing", "worker CPU per execution, with keys", median(cpu["keys"]), "us",
            median(cpu["none"]), BASELINE, higher_is_better=False),
    ]  # fmt: skip
    bench.note(
        f"sealing: drain of {n} pre-queued {CAPABILITY} by one fresh `majordomus worker` "
        f"(max_jobs {MAX_JOBS}) a round, median of {rounds} round(s) a side, sides turned; "
        "rate = (N - 1) / (first .. last finished, the finished index's ms). Rounds (/s): "
        + "; ".join(f"{name} {_figures(v)}" for name, v in rates.items())
        + "; worker CPU per execution (us): "
        + "; ".join(f"{name} {_figures(v)}" for name, v in cpu.items())
        + f". Median paired ratio keys / none: {_paired(rates['keys'], rates['none']):.3f}."
    )
    return rows


async def _drain_round(bench: Bench, keys: list[str], n: int) -> tuple[float, float]:
    """N started, then one worker runs them: (executions/s, worker CPU us per execution)."""
    await bench.flush()
    async with bench.engine(encryption_keys=keys) as engine:
        await asyncio.gather(*(engine.redis.ping() for _ in range(STARTERS + 1)))

        async def one() -> None:
            await engine.start(CAPABILITY, INPUT)

        await fan_out(n, one, STARTERS)
        env = {"MAJORDOMUS_ENCRYPTION_KEYS": ",".join(keys)} if keys else {}
        with children() as kids:
            worker = majordomus_worker(bench, MAX_JOBS, **env)
            kids.append(worker)
            seen, cpu0 = await _until_finished(engine, worker, 1, n)
            done, cpu1 = await _until_finished(engine, worker, n, n)
            del done
        return await _rate_and_states(engine, n), (cpu1 - cpu0) / max(n - seen, 1) * 1e6


async def _until_finished(engine: Engine, worker: Child, count: int, n: int) -> tuple[int, float]:
    """Until at least `count` have finished: (how many, the worker's CPU seconds then)."""
    deadline = time.monotonic() + 120
    while True:
        finished = await engine.store.finished_count()
        if finished >= count:
            return finished, worker.cpu_seconds()
        if time.monotonic() > deadline or not worker.alive():
            raise RuntimeError(f"sealing: {finished} of {n} finished:\n{worker.log()[-2000:]}")
        await asyncio.sleep(POLL)


async def _rate_and_states(engine: Engine, n: int) -> float:
    """(N - 1) / (first .. last finished); every one must have succeeded."""
    scores: list[float] = []
    ids: list[str] = []
    for part in engine.store.keys.partitions:
        for member, score in await engine.redis.zrange(part.finished, 0, -1, withscores=True):
            ids.append(member.decode() if isinstance(member, bytes) else member)
            scores.append(float(score))
    async with engine.redis.pipeline(transaction=False) as pipe:
        for execution_id in ids:
            pipe.hget(engine.store.keys.snapshot(execution_id), "state")
        states = await pipe.execute()
    bad = [s for s in states if s not in (b"succeeded", "succeeded")]
    if len(ids) != n or bad:
        raise RuntimeError(
            f"sealing: {len(ids)} of {n} finished, {len(bad)} not succeeded: {bad[:3]}"
        )
    span = (max(scores) - min(scores)) / 1000
    return (n - 1) / span if span > 0 else float("nan")


# -- figures ------------------------------------------------------------------------------


def _paired(ours: list[float], base: list[float]) -> float:
    return median([a / b for a, b in zip(ours, base, strict=True)])


def _figures(values: list[float], digits: int = 0) -> str:
    return " ".join(f"{v:.{digits}f}" for v in values)
