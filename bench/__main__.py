"""`python -m bench`: every scenario against a real Redis, each beside its raw baseline.

    python -m bench                      # the full run (minutes), prints the table
    python -m bench --quick              # a smoke run of seconds (the test suite runs it)
    python -m bench --only pickup,events # some scenarios
    python -m bench --only client        # Client.start beside Engine.start, ~2 min
    python -m bench --only isolation     # handlers in child processes: cost, stop, leak, ~4 min
    python -m bench --only sealing       # what MAJORDOMUS_ENCRYPTION_KEYS costs, ~2 min
    python -m bench --markdown out.md    # also write the table as Markdown

Redis: `--redis-url`, else `MAJORDOMUS_BENCH_REDIS_URL`, else database 14 of the Redis on
127.0.0.1:6379 when one answers, else a redis-server the run starts itself. The run's
database is flushed before each scenario: give it one of its own. Keys and channels carry
the prefix `mdbench`, so a worker of real data on the same server never sees them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import json
import os
import platform
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import psutil
import redis as redis_sync

from bench.harness import Bench, Row, workdir
from majordomus.local.embedded import EmbeddedRedis

SCENARIOS = (
    "throughput", "pickup", "events", "history", "live", "memory", "cli", "redis_cost", "peers",
    "console", "over_time", "shards", "schedules", "mcp_tasks", "client", "isolation", "sealing",
    "audience", "rollup", "bulk", "flow",
)
"""Scenarios (modules of `bench/` but where `MODULES` names another), in the order they run."""
MODULES = {"cli": "cli_e2e", "schedules": "schedule_lateness"}
DEFAULT_URL = "redis://127.0.0.1:6379/14"


def _reachable(url: str) -> bool:
    try:
        return bool(redis_sync.Redis.from_url(url, socket_connect_timeout=1).ping())
    except Exception:
        return False


def machine() -> str:
    cores = psutil.cpu_count(logical=True)
    memory = psutil.virtual_memory().total / 2**30
    return (
        f"{platform.system()} {platform.machine()}, {cores} cores, {memory:.0f} GiB, "
        f"Python {platform.python_version()}"
    )


def redis_version(url: str) -> str:
    with contextlib.suppress(Exception):
        return str(redis_sync.Redis.from_url(url).info("server")["redis_version"])
    return "?"


def fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if value != value:  # NaN
        return "n/a"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def verdict(row: Row) -> str:
    if row.met is None:
        return ""
    return "met" if row.met else "MISSED"


def table_rows(rows: Sequence[Row]) -> list[list[str]]:
    out = []
    for r in rows:
        ratio = r.ratio
        out.append(
            [
                r.scenario,
                r.metric,
                f"{fmt(r.ours)} {r.unit}",
                f"{fmt(r.baseline)} {r.unit}" if r.baseline is not None else "-",
                r.baseline_name or "-",
                f"{ratio:.2f}x" if ratio is not None else "-",
                r.goal or "-",
                verdict(r),
            ]
        )
    return out


HEADERS = ["scenario", "metric", "majordomus", "baseline", "baseline is", "ratio", "goal", ""]


def markdown(rows: Sequence[Row], header: str) -> str:
    lines = [header, "", "| " + " | ".join(HEADERS[:-1] + ["verdict"]) + " |"]
    lines.append("|" + "---|" * len(HEADERS))
    for cells in table_rows(rows):
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def print_table(rows: Sequence[Row]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="majordomus benchmarks (ratio = majordomus / baseline)")
    for h in HEADERS:
        table.add_column(h)
    for cells in table_rows(rows):
        table.add_row(*cells)
    Console(width=200).print(table)


async def run(names: Sequence[str], bench: Bench) -> list[Row]:
    rows: list[Row] = []
    for name in names:
        module = importlib.import_module(f"bench.{MODULES.get(name, name)}")
        await bench.flush()
        t0 = time.monotonic()
        print(f"== {name} ...", flush=True)
        found = await module.run(bench)
        print(f"== {name}: {time.monotonic() - t0:.1f} s", flush=True)
        rows.extend(found)
    await bench.flush()
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    parser.add_argument("--only", default="", help="comma-separated scenarios: " + ",".join(SCENARIOS))
    parser.add_argument("--redis-url", default=os.environ.get("MAJORDOMUS_BENCH_REDIS_URL"))
    parser.add_argument("--markdown", type=Path, help="also write the table here as Markdown")
    parser.add_argument("--json", type=Path, help="also write the rows here as JSON")
    args = parser.parse_args(argv)

    names = [n.strip() for n in args.only.split(",") if n.strip()] or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario {', '.join(unknown)}; choose from {', '.join(SCENARIOS)}")

    embedded: EmbeddedRedis | None = None
    url = args.redis_url
    if not url:
        if _reachable(DEFAULT_URL):
            url = DEFAULT_URL
        else:
            embedded = EmbeddedRedis().start()
            url = embedded.url
            print(f"bench: no Redis configured; started {embedded.origin} at {url}")
    elif not _reachable(url):
        print(f"bench: Redis at {url} is unreachable", file=sys.stderr)
        return 2

    where = workdir()
    bench = Bench(redis_url=url, quick=args.quick, workdir=where)
    header = (
        f"Machine: {machine()}; Redis {redis_version(url)} at {url}; "
        f"{'quick (smoke) run' if args.quick else 'full run'} of {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}."
    )
    print(header, flush=True)
    try:
        rows = asyncio.run(run(names, bench))
    finally:
        if embedded is not None:
            embedded.stop()
    print_table(rows)
    for note in bench.notes:
        print(f"note: {note}")
    if args.markdown:
        text = markdown(rows, header)
        if bench.notes:
            text += "\n" + "\n".join(f"- {n}" for n in bench.notes) + "\n"
        args.markdown.write_text(text)
    if args.json:
        args.json.write_text(json.dumps([asdict(r) | {"ratio": r.ratio} for r in rows], indent=2))
    shutil.rmtree(where, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
