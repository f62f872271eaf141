"""Flow control (`majordomus.flow`): what a limit per key costs Redis, and how fair it is.

**Cost.** On a redis-server of the run's own, `redis_cost`'s measure (N executions enqueued,
then drained by one worker of `max_jobs` 10; the server's own CPU over both phases divided
by N, and the drain's rate): `bench.any_tenant` (no control: the path every other
capability takes, which the controls' code must leave as it was; the same input as the
others, a tenant of 1,000), and with each control on:
`bench.per_tenant` (at most 2 at once per tenant) over 1,000 tenants (10 each: admitted, a
few waiting) and over 10 tenants (1,000 each: nearly all wait in their key's list and each
end moves the next in); `bench.rated` (a rate limit never reached: the check and the
bucket's move); `bench.throttled` and `bench.debounced` with a tenant a start (each opens
its own window: the window's record; a debounced one is a delayed start, 1 ms on). Rounds
alternate the kinds, the median shown and every round noted.

**Fairness.** One worker of `max_jobs` 4, executions of 5 ms: noisy tenants start N
executions (one tenant N; then ten tenants N/10 each, which keeps every slot busy), then a
quiet tenant starts one. Its wait (created to started, the server's stamps) and how many
noisy ones started before it, with the limit per key (`bench.per_tenant`) and without it
(`bench.any_tenant`, the same handler: the baseline, first come first served).
"""

from __future__ import annotations

import asyncio
import statistics
from datetime import datetime
from typing import Any

from bench.harness import Bench, Row, children, majordomus_worker, wait_for_workers
from bench.redis_cost import cpu_per_execution
from majordomus.engine import Engine

ROUNDS = 3
NOISY_SECONDS = 0.005
FAIR_JOBS = 4


def _ms(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000


async def run(bench: Bench) -> list[Row]:
    from majordomus.local.embedded import EmbeddedRedis

    n = bench.size(10_000, 300)
    kinds: dict[str, tuple[str, Any]] = {
        "none": ("bench.any_tenant", lambda i: {"tenant": f"t{i % 1000}"}),
        "1000 keys": ("bench.per_tenant", lambda i: {"tenant": f"t{i % 1000}"}),
        "10 keys": ("bench.per_tenant", lambda i: {"tenant": f"t{i % 10}"}),
        "rate": ("bench.rated", lambda i: {"tenant": "t"}),
        "throttle": ("bench.throttled", lambda i: {"tenant": f"t{i}"}),
        "debounce": ("bench.debounced", lambda i: {"tenant": f"t{i}"}),
    }
    cost: dict[str, list[tuple[float, float]]] = {name: [] for name in kinds}
    with EmbeddedRedis() as server:
        own = Bench(server.url, bench.quick, bench.workdir, bench.prefix)
        for i in range(bench.size(ROUNDS, 1)):
            order = list(kinds)
            for name in order[i % 3 :] + order[: i % 3]:  # each round begun by another
                capability, input_of = kinds[name]
                timing: list[float] = []
                us = await cpu_per_execution(own, n, capability, input_of, timing=timing)
                cost[name].append((sum(us), n / timing[0]))
        fair = {
            (kind, tenants): await _quiet_wait(own, n, kind, tenants)
            for kind in ("bench.per_tenant", "bench.any_tenant")
            for tenants in (1, 10)
        }
    med = {name: (statistics.median(c for c, _ in rows), statistics.median(r for _, r in rows))
           for name, rows in cost.items()}  # fmt: skip
    bench.note(
        f"flow: Redis CPU per execution, start to final, and drain rate ({n} a round, one "
        f"worker of max_jobs 10), medians: "
        + "; ".join(
            f"{name} {c:.1f} us ({c / med['none'][0]:.2f}x), {r:,.0f}/s ({r / med['none'][1]:.2f}x)"
            for name, (c, r) in med.items()
        )
        + "; round by round: "
        + "; ".join(
            f"{name} " + ", ".join(f"{c:.1f} us {r:,.0f}/s" for c, r in rows)
            for name, rows in cost.items()
        )
        + "."
    )
    for tenants in (1, 10):
        (kw, ka), (bw, ba) = fair["bench.per_tenant", tenants], fair["bench.any_tenant", tenants]
        bench.note(
            f"flow: a quiet tenant's one execution behind {n:,} of {tenants} noisy tenant(s) "
            f"(one worker of {FAIR_JOBS} slots, {NOISY_SECONDS * 1000:.0f} ms each): waited "
            f"{kw:.0f} ms with {ka} noisy started meanwhile, per key (at most 2 a tenant); "
            f"{bw:.0f} ms with {ba} started meanwhile without the limit (first come, first served)."
        )
    shown = {
        "1000 keys": ("a limit per key (1,000 keys)", 1.15),
        "10 keys": ("a limit per key (10 keys, most waiting)", 1.30),
        "rate": ("a rate limit (never reached)", 1.15),
        "throttle": ("a throttle (a window a start)", 1.30),
        "debounce": ("a debounce (a window a start)", 1.30),
    }
    rows = [
        Row(
            "flow",
            f"Redis CPU per execution with {what}",
            med[name][0],
            " us",
            baseline=med["none"][0],
            baseline_name="the same life with no control",
            goal=f"<= {bound:.2f}x",
            met=med[name][0] <= bound * med["none"][0],
            higher_is_better=False,
        )
        for name, (what, bound) in shown.items()
    ]
    for tenants in (1, 10):
        (kw, _), (bw, _) = fair["bench.per_tenant", tenants], fair["bench.any_tenant", tenants]
        rows.append(
            Row(
                "flow",
                f"a quiet tenant's wait behind {n:,} of {tenants} noisy tenant(s), per key",
                kw,
                " ms",
                baseline=bw,
                baseline_name="first come, first served (no limit per key)",
                goal="<= 0.05x",
                met=kw <= 0.05 * bw,
                higher_is_better=False,
            )
        )
    return rows


async def _quiet_wait(bench: Bench, n: int, capability: str, tenants: int) -> tuple[float, int]:
    """(ms the quiet tenant's execution waited, how many noisy ones started before it)."""
    await bench.flush()
    async with bench.engine() as engine:
        with children() as kids:
            kids.append(majordomus_worker(bench, FAIR_JOBS))
            await wait_for_workers(bench, 1)
            noisy = [
                (await engine.start(capability, {"tenant": f"noisy-{i % tenants}", "seconds": NOISY_SECONDS})).id
                for i in range(n)
            ]  # fmt: skip
            quiet = await engine.start(capability, {"tenant": "quiet"})
            done = await engine.wait(quiet.id, 600_000)
            if done.state != "succeeded":
                raise RuntimeError(f"the quiet execution ended {done.state}: {done}")
            before = await _started_between(
                engine, noisy, _ms(quiet.created_at), _ms(done.started_at)
            )
            await _drained(engine, n + 1, kids[0])
    return _ms(done.started_at) - _ms(quiet.created_at), before


async def _started_between(engine: Engine, ids: list[str], since: float, until: float) -> int:
    """How many of `ids` started from `since` to before `until` (epoch ms)."""
    started = 0
    for start in range(0, len(ids), 500):
        snaps = await asyncio.gather(*(engine.get(i) for i in ids[start : start + 500]))
        started += sum(1 for s in snaps if s.started_at and since <= _ms(s.started_at) < until)
    return started


async def _drained(engine: Engine, count: int, worker: Any) -> None:
    while await engine.store.finished_count() < count:
        if not worker.alive():
            raise RuntimeError(f"the worker died:\n{worker.log()[-1500:]}")
        await asyncio.sleep(0.05)
