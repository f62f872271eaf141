"""The raw baseline: a plain arq worker running a no-op job, nothing of majordomus in it.

`python -m bench.arq_baseline --queue Q --max-jobs N --poll-delay S` runs arq's own
`Worker` with its defaults (pickle serializer, results kept) but for the queue name, the
job concurrency and the poll delay a scenario compares at. It prints `ready` once it polls.
Beside `noop` it has `stamp`, a no-op that first writes the wall-clock time it started at
into a Redis key (for pick-up latency: enqueue time to start time, on the one machine).
With `--cron` it also runs `tick`, arq's own `cron` job of every second, which records how
late each run started after its tick (ms, on the one machine) in the list `<queue>:lateness`
(for schedule lateness, `bench.schedule_lateness`).
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from arq.connections import RedisSettings
from arq.cron import cron
from arq.worker import Worker


async def noop(ctx: dict[str, Any]) -> bool:
    return True


async def stamp(ctx: dict[str, Any], key: str) -> bool:
    """A no-op that first records when it started (epoch seconds) under `key`."""
    await ctx["redis"].set(key, repr(time.time()), ex=600)
    return True


async def tick(ctx: dict[str, Any]) -> None:
    """A cron run: how late it started, from its tick (arq's cron job id ends in it, epoch ms)."""
    due_ms = int(str(ctx["job_id"]).rsplit(":", 1)[1])
    await ctx["redis"].rpush(f"{ctx['queue']}:lateness", f"{time.time() * 1000 - due_ms:.3f}")


async def announce(ctx: dict[str, Any]) -> None:
    print("ready", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--queue", required=True)
    parser.add_argument("--max-jobs", type=int, default=10)
    parser.add_argument("--poll-delay", type=float, default=0.5)
    parser.add_argument("--cron", action="store_true", help="also run `tick` every second")
    args = parser.parse_args()
    url = os.environ.get("MAJORDOMUS_REDIS_URL", "redis://127.0.0.1:6379/0")
    worker = Worker(
        functions=[noop, stamp],
        queue_name=args.queue,
        max_jobs=args.max_jobs,
        poll_delay=args.poll_delay,
        redis_settings=RedisSettings.from_dsn(url),
        on_startup=announce,
        cron_jobs=[cron(tick, second=set(range(60)), microsecond=0)] if args.cron else None,
        ctx={"queue": args.queue},
        handle_signals=True,
    )
    worker.run()


if __name__ == "__main__":
    main()
