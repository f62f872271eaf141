"""arq's `WorkerSettings` for majordomus.

Run a worker with `majordomus worker`; `arq workers.settings.WorkerSettings --check` reads
its health record. arq's own command cannot run one: it builds arq's `Worker`, whose job
keys are arq's (`arq:job:<id>`), not the prefix's, so the startup refuses it. arq jobs are
never written (an execution's snapshot is its job and its result; the worker takes it with
one script); arq's own retries are off because an execution never runs twice.
arq's per-job log lines are off too: an execution's events already say when it started and
how it ended, and writing two lines a job cost a tenth of a busy worker's time. Every key
the worker names (its queue, its health record, and the executions' keys, which
`MajordomusWorker` reaches through the store) is under `MAJORDOMUS_KEY_PREFIX`.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
from arq.connections import RedisSettings
from arq.worker import func

from majordomus.config import Settings, settings
from majordomus.loading import load_capabilities
from majordomus.registry import Registry
from majordomus.store.connect import DEFAULT_URL
from majordomus.store.keys import Keys
from majordomus.store.queue import RUN_EXECUTION
from majordomus.store.urls import is_cluster_url, is_sentinel_url
from majordomus.ticker import Ticker
from majordomus.workers.runtime import WorkerRuntime

MAJORDOMUS_WORKER = "majordomus_worker"
"""The mark `MajordomusWorker` sets in arq's ctx before the startup, which checks it."""

JOB_TIMEOUT_SECONDS = 7 * 24 * 3600
"""arq's job timeout, out of the way: no run is bounded by it (cancellation and leases bound
executions); arq derives from it how long a job's in-progress mark lasts (10 s more)."""


async def run_execution(ctx: dict[str, Any], *args: Any) -> str:
    """arq wants one function; no arq job ever names it: `MajordomusWorker` takes and runs
    executions itself (`take.lua`, `WorkerRuntime.run_taken`), and nothing enqueues arq
    jobs on majordomus' queue."""
    raise RuntimeError("majordomus executions are taken by MajordomusWorker, not as arq jobs")


async def startup(ctx: dict[str, Any]) -> None:
    if not ctx.get(MAJORDOMUS_WORKER):
        raise RuntimeError(
            "majordomus jobs run on MajordomusWorker (`majordomus worker`), not on arq's own "
            "Worker, which names their keys arq:job:<id>, not MAJORDOMUS_KEY_PREFIX's"
        )
    cfg: Settings = ctx.get("settings") or settings()
    # A registry handed over (the testing kit's, `build_worker(registry=...)`) or the modules
    # the settings name.
    registry: Registry | None = ctx.get("majordomus_registry")
    if registry is None:
        registry = load_capabilities(cfg.capabilities)
    redis = ctx.get("majordomus_redis") or ctx["redis"]
    runtime = WorkerRuntime(redis, registry, cfg)
    await runtime.start()
    ctx["majordomus"] = runtime
    # The schedules' ticks, stopped with the worker's main task however it ends (a test or
    # `dev` cancels it and stops the runtime without arq's shutdown).
    ctx["majordomus_ticker"] = ticker = Ticker(runtime.engine)
    ticker.start(with_task=asyncio.current_task())


async def shutdown(ctx: dict[str, Any]) -> None:
    ticker: Ticker | None = ctx.get("majordomus_ticker")
    if ticker is not None:
        await ticker.stop()
    runtime: WorkerRuntime | None = ctx.get("majordomus")
    if runtime is not None:
        await runtime.stop()


def worker_options(cfg: Settings) -> dict[str, Any]:
    """The arq Worker's keyword arguments for these settings."""
    keys = Keys(cfg.key_prefix)
    return {
        "functions": [
            func(run_execution, name=RUN_EXECUTION, timeout=JOB_TIMEOUT_SECONDS, max_tries=10**9)
        ],
        "queue_name": keys.queue_name,
        "health_check_key": keys.health_check,
        "on_startup": startup,
        "on_shutdown": shutdown,
        "max_jobs": cfg.max_jobs,
        "keep_result": 0,
        "poll_delay": cfg.poll_seconds,
        "job_serializer": msgspec.msgpack.encode,
        "job_deserializer": msgspec.msgpack.decode,
        "health_check_interval": 60,
        "log_results": False,
    }


class WorkerSettings:
    """For `arq workers.settings.WorkerSettings`; `majordomus worker` uses the same options."""

    _cfg = settings()
    functions = worker_options(_cfg)["functions"]
    queue_name = Keys(_cfg.key_prefix).queue_name
    health_check_key = Keys(_cfg.key_prefix).health_check
    on_startup = startup
    on_shutdown = shutdown
    max_jobs = _cfg.max_jobs
    keep_result = 0
    job_serializer = msgspec.msgpack.encode
    job_deserializer = msgspec.msgpack.decode
    # arq's own `RedisSettings` names one node: a cluster's or Sentinel's workers are
    # `majordomus worker`'s (`build_worker` hands arq the client), never arq's command line.
    redis_settings = (
        None
        if is_cluster_url(_cfg.redis_url) or is_sentinel_url(_cfg.redis_url)
        else RedisSettings.from_dsn(_cfg.redis_url or DEFAULT_URL)
    )
