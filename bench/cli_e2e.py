"""CLI end to end: the wall time of one `majordomus run` from a shell, beside arq's nearest,
and of `majordomus --help`, beside the interpreter's own start-up.

majordomus: the subprocess `python -m majordomus.cli run executions.demonstrate --input
'{"steps":1}'` (one step, no delay; it goes straight to Redis, not through the API) with a
majordomus worker already waiting, timed from spawn to exit: interpreter start-up, imports,
the start, following the execution's events live to its end, and printing them. arq has no
CLI that runs a job and waits for it, so its nearest equivalent is a Python subprocess that
does `create_pool`, `enqueue_job("noop")` and `await job.result()` (its default
`poll_delay` of 0.5 s) against a plain arq worker at its default poll delay, timed the
same way: both include an interpreter's start-up, so like is compared with like.

`majordomus --help` (the built-in capabilities only: a user's module, which may import
what it likes, is not the CLI's cost) is timed the same way beside `python -c pass`, the
floor any Python command line stands on.

Every child is timed with a bytecode cache of its own (`PYTHONPYCACHEPREFIX` in the run's
folder, filled by one untimed run of each command first), as an installed majordomus has
its modules compiled: an environment with `PYTHONDONTWRITEBYTECODE` set (this one's) would
otherwise have every run compile majordomus from its source, which no user's machine does
twice. The figures are medians over the runs, which alternate between the sides; the goals
(`run` < 300 ms, `--help` < 400 ms) are judged on the full run only.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

from bench.harness import (
    ROOT,
    Bench,
    Row,
    arq_worker,
    children,
    majordomus_worker,
    median,
    ms,
    wait_for_arq_worker,
    wait_for_workers,
)

ARQ_CLIENT = """
import asyncio, os, sys
from arq.connections import RedisSettings, create_pool

async def main():
    pool = await create_pool(RedisSettings.from_dsn(os.environ["MAJORDOMUS_REDIS_URL"]),
                             default_queue_name=sys.argv[1])
    job = await pool.enqueue_job("noop")
    print(await job.result(timeout=30))
    await pool.aclose()

asyncio.run(main())
"""
"""The arq side: enqueue a no-op, wait for its result with arq's default polling, print it."""

RUN_GOAL_MS = 300.0
HELP_GOAL_MS = 400.0


async def run(bench: Bench) -> list[Row]:
    runs = bench.size(10, 2)
    queue = f"{bench.prefix}:arq-cli"
    cli = [sys.executable, "-m", "majordomus.cli"]
    ours_argv = [*cli, "run", "executions.demonstrate", "--input", '{"steps":1}']
    arq_argv = [sys.executable, "-c", ARQ_CLIENT, queue]
    help_argv = [*cli, "--help"]
    pass_argv = [sys.executable, "-c", "pass"]
    env = _compiled_env(bench)
    help_env = {k: v for k, v in env.items() if k != "MAJORDOMUS_CAPABILITIES"}
    ours: list[float] = []
    theirs: list[float] = []
    helps: list[float] = []
    passes: list[float] = []
    with children() as kids:
        kids.append(majordomus_worker(bench))
        kids.append(arq_worker(bench, queue))
        await wait_for_workers(bench, 1)
        await wait_for_arq_worker(bench, kids[1])
        for argv, child_env in (
            (ours_argv, env),
            (arq_argv, env),
            (help_argv, help_env),
            (pass_argv, help_env),
        ):
            await _timed(argv, child_env)  # untimed: fills the bytecode cache
        for _ in range(runs):
            ours.append(await _timed(ours_argv, env))
            theirs.append(await _timed(arq_argv, env))
            for _ in range(2):
                helps.append(await _timed(help_argv, help_env))
                passes.append(await _timed(pass_argv, help_env))
    bench.note(
        f"cli: medians of {runs} alternating runs each; majordomus `run` of "
        "executions.demonstrate {steps: 1} straight to Redis, arq a script enqueueing a "
        "no-op and awaiting job.result() (poll 0.5 s) against a worker at poll_delay 0.5 s; "
        f"all runs (ms): majordomus {_list(ours)}, arq {_list(theirs)}. "
        f"`majordomus --help` (built-ins only) beside `python -c pass`, {len(helps)} runs "
        f"each (ms): --help {_list(helps)}, python -c pass {_list(passes)}. Every child with "
        "its bytecode cached (PYTHONPYCACHEPREFIX, warmed by one untimed run), as installed."
    )
    judged = not bench.quick
    return [
        Row(
            "cli",
            "run one execution to its end, wall time",
            median(ours),
            "ms",
            baseline=median(theirs),
            baseline_name="python script: arq enqueue_job + job.result()",
            goal=f"< {RUN_GOAL_MS:g} ms" if judged else "",
            met=median(ours) < RUN_GOAL_MS if judged else None,
            higher_is_better=False,
        ),
        Row(
            "cli",
            "majordomus --help, wall time",
            median(helps),
            "ms",
            baseline=median(passes),
            baseline_name="python -c pass (the interpreter's start-up)",
            goal=f"< {HELP_GOAL_MS:g} ms" if judged else "",
            met=median(helps) < HELP_GOAL_MS if judged else None,
            higher_is_better=False,
        ),
    ]


def _compiled_env(bench: Bench) -> dict[str, str]:
    """The children's environment, with a bytecode cache of the run's own."""
    env = bench.env(PYTHONPYCACHEPREFIX=str(bench.workdir / "pycache"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _list(values: list[float]) -> str:
    return " ".join(f"{v:.0f}" for v in values)


async def _timed(argv: list[str], env: dict[str, str]) -> float:
    """The subprocess's wall time in ms, from spawn to exit; it must succeed."""
    t0 = time.perf_counter()
    process = await asyncio.create_subprocess_exec(
        *argv,
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    elapsed = time.perf_counter() - t0
    if process.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv[:5])} exited {process.returncode}:\n"
            f"{out.decode(errors='replace')[-1500:]}\n{err.decode(errors='replace')[-1500:]}"
        )
    return ms(elapsed)
