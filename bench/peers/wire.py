"""The line protocol between the peers' scenario and its side scripts, standard library only.

A side script (`arq_side.py`, `saq_side.py`, ...) runs in its peer's own virtual
environment, so it cannot import majordomus nor anything of this repo but this module, which
sits beside it (a script's own folder is first on `sys.path`). It speaks one JSON object a
line on stdout: `{"loaded": true}` once imported and connected, then, as a worker,
`{"done": count, "last": epoch}` every 10 ms while its count of finished no-op jobs grows,
or, as a producer, one closing line with its figures. Anything else on stdout (a peer's own
output) is not JSON and is skipped. A process waits for the gate file (`PEER_GATE`) before
it works, so every worker of a round starts at the one moment the scenario chose. The
scenario imports this module too, as `bench.peers.wire`, for the same parsing and the pure
figures; nothing here measures CPU or speaks Redis.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

GATE_ENV = "PEER_GATE"
URL_ENV = "PEER_REDIS_URL"
QUEUE_ENV = "PEER_QUEUE"
ENQUEUERS = 16
"""Concurrent enqueueing tasks of one producer, as in `bench.throughput`."""
REPORT_EVERY = 0.01
PICKUP_GAP = (0.020, 0.050)
"""Seconds before each pick-up job, drawn at random so that it lands at a random phase of
a polling worker's cycle (as in `bench.pickup`)."""
PICKUP_WARM = 3


def say(**fields: Any) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def parse(line: str | bytes) -> dict[str, Any] | None:
    """The object a side printed on this line, or None for any other output."""
    text = line.decode(errors="replace") if isinstance(line, bytes) else line
    text = text.strip()
    if not text.startswith("{"):
        return None
    try:
        found = json.loads(text)
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def wait_gate(poll: float = 0.001) -> None:
    """Until the scenario creates the gate file (at once when there is none to wait for)."""
    gate = os.environ.get(GATE_ENV)
    while gate and not os.path.exists(gate):
        time.sleep(poll)


async def wait_gate_async(poll: float = 0.001) -> None:
    gate = os.environ.get(GATE_ENV)
    while gate and not os.path.exists(gate):
        await asyncio.sleep(poll)


class Tally:
    """No-op jobs a worker process finished, and when the last one did (epoch seconds)."""

    def __init__(self) -> None:
        self.done = 0
        self.last = 0.0

    def finish(self) -> None:
        self.done += 1
        self.last = time.time()


def start_reporting(tally: Tally, every: float = REPORT_EVERY) -> threading.Thread:
    """A daemon thread that prints the tally whenever it grew, every `every` seconds: apart
    from the worker's event loop, so it works the same under every peer's runner."""

    def report() -> None:
        seen = -1
        while True:
            done, last = tally.done, tally.last
            if done != seen:
                say(done=done, last=last)
                seen = done
            time.sleep(every)

    thread = threading.Thread(target=report, name="tally", daemon=True)
    thread.start()
    return thread


async def produce(n: int, enqueue: Callable[[], Awaitable[Any]], tasks: int = ENQUEUERS) -> None:
    """Enqueue n jobs from `tasks` concurrent tasks once the gate opens; says when it began
    and ended (epoch seconds)."""
    say(loaded=True)
    await wait_gate_async()
    left = n

    async def enqueuer() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await enqueue()

    t0 = time.time()
    await asyncio.gather(*(enqueuer() for _ in range(tasks)))
    say(enqueued=n, t0=t0, t1=time.time())


async def pickups(n: int, seed: int, started_of_one: Callable[[], Awaitable[float]]) -> None:
    """Says the latencies of `pickup_latencies`."""
    say(pickup_ms=await pickup_latencies(n, seed, started_of_one))


async def pickup_latencies(
    n: int, seed: int, started_of_one: Callable[[], Awaitable[float]]
) -> list[float]:
    """n jobs one at a time into an idle worker, each after a random gap; `started_of_one`
    enqueues one stamp job and answers the epoch time the job recorded as it started.
    Answers the n latencies (ms) from just before each enqueue to that start."""
    rng = random.Random(seed)
    out: list[float] = []
    for i in range(n + PICKUP_WARM):
        await asyncio.sleep(rng.uniform(*PICKUP_GAP))
        t0 = time.time()
        started = await started_of_one()
        if i >= PICKUP_WARM:  # the first ones warm connections and code paths
            out.append((started - t0) * 1000)
    return out


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """`worker`, `enqueue --n N` or `pickup --n N --seed S`; Redis and queue from the
    environment (`PEER_REDIS_URL`, `PEER_QUEUE`)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=("worker", "enqueue", "pickup"))
    parser.add_argument("--n", type=int, default=0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--concurrency", type=int, default=10)
    args = parser.parse_args(argv)
    args.url = os.environ.get(URL_ENV, "redis://127.0.0.1:6379/0")
    args.queue = os.environ.get(QUEUE_ENV, "peer")
    return args


# -- figures (used by the scenario) -----------------------------------------------------


def rate(n: int, t0: float, t1: float) -> float:
    """n over the seconds from t0 to t1; NaN when the span is not positive."""
    span = t1 - t0
    return n / span if span > 0 else float("nan")


def best(values: dict[str, float], higher_is_better: bool) -> str | None:
    """The name of the best finite value, or None when there is none."""
    finite = {k: v for k, v in values.items() if v == v}
    if not finite:
        return None
    pick = max if higher_is_better else min
    return pick(finite, key=lambda k: finite[k])
