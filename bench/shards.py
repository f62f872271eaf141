"""Shards: the Redis CPU one no-op execution costs each master, on 1 shard and on 3.

For S in (1, 3), a Redis Cluster of S masters of the run's own
(`majordomus.local.cluster`) and a deployment of S partitions on it, one on each
master (`majordomus.store.keys`): N `bench.noop` executions are enqueued first (16
concurrent starters), then two workers (`max_jobs` 10 each) drain them. Every master's
own `used_cpu_user + used_cpu_sys` (`INFO cpu`, on a plain connection to that node) is
read before and after each phase; divided by N it is the Redis CPU per execution of that
shard. The figures: that CPU summed over the shards (the cluster's whole cost), on the
busiest shard (what bounds a deployment: the issue's "Redis CPU per execution per shard
falling with shards") and its spread over the shards, and the drain's throughput (N over
the span from the first execution started to the last finished, as their snapshots say).
Every execution must have succeeded, or the scenario raises: a figure of failed work
means nothing.

The baseline of each 3-shard figure is the same figure on 1 shard, in the same run. What
it does not measure: a cluster with replicas, a slot migration, or capacity on this
machine (see the note the scenario leaves: on 2 cores the shards share the CPUs with the
workers and the enqueuer, so throughput cannot scale here).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from datetime import datetime

import redis.asyncio as aioredis

from bench.harness import Bench, Child, Row, children, fan_out, majordomus_worker, wait_for_workers
from majordomus.local.cluster import LocalCluster, cluster_binaries

SHARDS = (1, 3)
WORKERS = 2
MAX_JOBS = 10
ENQUEUERS = 16
DRAIN_SECONDS = 600.0
"""How long the drain may take before the scenario gives up (a full run takes seconds)."""


class Shards:
    """One run's figures on S shards, in seconds of Redis CPU per execution."""

    def __init__(self, shards: int, n: int, enqueue: list[float], drain: list[float]) -> None:
        self.shards = shards
        self.n = n
        self.enqueue = enqueue
        """Each master's CPU over the enqueue, per execution."""
        self.drain = drain
        """Each master's CPU over the drain, per execution."""
        self.wall = 0.0
        """The drain's wall time: from the first execution started to the last finished, as
        their snapshots say (the first worker up may start some before the second is)."""
        self.placed: list[int] = []
        """Executions per partition."""

    @property
    def per_shard(self) -> list[float]:
        return [e + d for e, d in zip(self.enqueue, self.drain, strict=True)]

    @property
    def total(self) -> float:
        return sum(self.per_shard)

    @property
    def busiest(self) -> float:
        return max(self.per_shard)

    @property
    def rate(self) -> float:
        """Executions drained per second."""
        return self.n / max(self.wall, 1e-3)


async def run(bench: Bench) -> list[Row]:
    n = bench.size(6000, 600)
    server, cli = cluster_binaries()
    found: dict[int, Shards] = {}
    for shards in SHARDS:
        with LocalCluster(server, cli, size=shards) as cluster:
            own = Bench(cluster.url, bench.quick, bench.workdir, bench.prefix)
            found[shards] = await _measure(own, cluster, shards, n)
    for figures in found.values():
        bench.note(_described(figures))
    bench.note(
        f"shards: on this machine's {os.cpu_count()} cores the {max(SHARDS)} redis-servers, the "
        f"{WORKERS} workers and the enqueuer share the CPUs, so throughput cannot scale "
        "with shards here (more shards only add processes to the same cores); the Redis "
        "CPU per execution on the busiest shard is what shows that each added shard adds "
        "capacity: it is the share of one execution's cost that one master carries."
    )
    one, many = found[SHARDS[0]], found[SHARDS[-1]]
    name = f"{SHARDS[0]} shard"
    return [
        Row(
            "shards",
            f"Redis CPU per no-op execution, busiest of {many.shards} shards",
            many.busiest * 1e6,
            " us",
            baseline=one.busiest * 1e6,
            baseline_name=name,
            goal="below 1 shard's",
            met=many.busiest < one.busiest,
            higher_is_better=False,
        ),
        Row(
            "shards",
            f"Redis CPU per no-op execution, summed over {many.shards} shards",
            many.total * 1e6,
            " us",
            baseline=one.total * 1e6,
            baseline_name=name,
            higher_is_better=False,
        ),
        Row(
            "shards",
            f"no-op executions drained per second, {many.shards} shards, {WORKERS} workers",
            many.rate,
            "/s",
            baseline=one.rate,
            baseline_name=name,
        ),
    ]


async def _measure(bench: Bench, cluster: LocalCluster, shards: int, n: int) -> Shards:
    nodes = [aioredis.Redis(port=port) for port in cluster.ports]
    try:
        async with bench.engine(partitions=shards) as engine:
            ids: list[str] = []

            async def start() -> None:
                ids.append((await engine.start("bench.noop", {})).id)

            before = await _cpu(nodes)
            await fan_out(n, start, ENQUEUERS)
            enqueued = await _cpu(nodes)
            with children() as kids:
                for _ in range(WORKERS):
                    kids.append(
                        majordomus_worker(bench, MAX_JOBS, MAJORDOMUS_PARTITIONS=str(shards))
                    )
                await wait_for_workers(bench, WORKERS)
                t0 = time.monotonic()
                while await engine.store.finished_count() < n:
                    _check(kids, t0)
                    await asyncio.sleep(0.01)
                drained = await _cpu(nodes)
            rows = await engine.store.snapshot_fields(ids, ["state", "started_at", "finished_at"])
            keys = engine.store.keys
            placed = Counter(keys.partition_of(i).index for i in ids)
    finally:
        for node in nodes:
            await node.aclose()
    states = Counter((state or b"?").decode() for state, _, _ in rows)
    if states != Counter({"succeeded": n}):
        raise RuntimeError(f"shards: of {n} executions on {shards} shards: {dict(states)}")
    figures = Shards(
        shards,
        n,
        [(e - b) / n for b, e in zip(before, enqueued, strict=True)],
        [(d - e) / n for e, d in zip(enqueued, drained, strict=True)],
    )
    first = min(_seconds(started) for _, started, _ in rows)
    last = max(_seconds(finished) for _, _, finished in rows)
    figures.wall = last - first
    figures.placed = [placed[i] for i in range(shards)]
    return figures


async def _cpu(nodes: list[aioredis.Redis]) -> list[float]:
    """Each master's own CPU so far (user + system seconds)."""
    found = []
    for node in nodes:
        info = await node.info("cpu")
        found.append(float(info["used_cpu_user"]) + float(info["used_cpu_sys"]))
    return found


def _check(kids: list[Child], t0: float) -> None:
    for kid in kids:
        if not kid.alive():
            raise RuntimeError(f"shards: a worker died:\n{kid.log()[-1500:]}")
    if time.monotonic() - t0 > DRAIN_SECONDS:
        raise RuntimeError(f"shards: the drain took over {DRAIN_SECONDS:.0f}s")


def _seconds(stamp: bytes | None) -> float:
    if stamp is None:
        raise RuntimeError("shards: a succeeded execution without its start or end time")
    return datetime.fromisoformat(stamp.decode()).timestamp()


def _described(f: Shards) -> str:
    us = [c * 1e6 for c in f.per_shard]
    return (
        f"shards: {f.shards} shard{'s' if f.shards > 1 else ''}: Redis CPU per execution "
        f"{f.total * 1e6:.0f} us summed ({sum(f.enqueue) * 1e6:.0f} to enqueue, "
        f"{sum(f.drain) * 1e6:.0f} to drain), {f.busiest * 1e6:.0f} us on the busiest shard "
        f"(shards from {min(us):.0f} to {max(us):.0f} us; executions per partition "
        f"{'/'.join(map(str, f.placed))}); {f.rate:.0f} drained per second "
        f"({f.n} by {WORKERS} workers of max_jobs {MAX_JOBS} in {f.wall:.2f} s, first "
        "started to last finished)."
    )
