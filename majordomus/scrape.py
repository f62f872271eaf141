"""The figures a scrape of the API reads from Redis (`cluster_families`): the queue depth
and the oldest wait by capability, the executions running by capability and the workers
alive, through the queue report that `queue.show` answers (`majordomus.reports`), bounded
by `SCRAPE_REDIS_SECONDS`, and the live listeners of the API process asking. What each
process counts itself, and the decisions behind both, are `majordomus.metrics`'s.
"""

from __future__ import annotations

import logging
import time
from collections import Counter as Tally
from typing import TYPE_CHECKING

from majordomus.engine import Engine
from majordomus.loops import within
from majordomus.reports import QueueReport, queue_report

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

log = logging.getLogger("majordomus.metrics")

SCRAPE_REDIS_SECONDS = 2.0
"""How long a scrape waits for the cluster's figures from Redis before it answers without
them (`majordomus_redis_up 0`): well within Prometheus' default 10 s scrape timeout."""

SCRAPE_FAILURE_LOG_EVERY_SECONDS = 60.0
"""How often a scrape that cannot read Redis says so in the log, at most."""

_said_at = 0.0
"""When a failed scrape read was last said in the log (`time.monotonic()`)."""


async def cluster_families(engine: Engine, listeners: int | None = None) -> list[Metric]:
    """The figures read at scrape time: the queue, the running executions and the workers
    from Redis (within `SCRAPE_REDIS_SECONDS`), `majordomus_redis_up` saying whether that
    read worked, and, for an API process, its live listeners."""
    from prometheus_client.metrics_core import GaugeMetricFamily

    families: list[Metric] = []
    if listeners is not None:
        families.append(
            GaugeMetricFamily(
                "majordomus_live_listeners",
                "Live-channel listeners and long polls this API process (and its live delivery process) is feeding now.",
                value=listeners,
            )
        )
    read: list[QueueReport] = []

    async def read_report() -> None:
        read.append(await queue_report(engine))

    failure: BaseException | None = None
    try:
        if not await within(SCRAPE_REDIS_SECONDS, read_report()):
            failure = TimeoutError(f"no answer within {SCRAPE_REDIS_SECONDS:g}s")
    except Exception as exc:  # noqa: BLE001  a scrape answers what it has, whatever Redis does
        failure = exc
    up = GaugeMetricFamily(
        "majordomus_redis_up",
        "1 when this scrape read the queue and the workers from Redis, else 0.",
        value=0 if failure is not None or not read else 1,
    )
    families.append(up)
    if failure is not None or not read:
        _say_unread(failure)
        return families
    return families + _report_families(read[0])


def _say_unread(failure: BaseException | None) -> None:
    global _said_at
    now = time.monotonic()
    if _said_at and now - _said_at < SCRAPE_FAILURE_LOG_EVERY_SECONDS:
        return
    _said_at = now
    log.warning("a metrics scrape could not read the queue from Redis: %s", failure)


def _report_families(report: QueueReport) -> list[Metric]:
    from prometheus_client.metrics_core import GaugeMetricFamily

    depth = GaugeMetricFamily(
        "majordomus_queue_depth",
        "Executions queued (waiting for a worker), by capability.",
        labels=["capability"],
    )
    oldest = GaugeMetricFamily(
        "majordomus_queue_oldest_wait_seconds",
        "How long the oldest queued execution of each capability has waited.",
        labels=["capability"],
    )
    held = GaugeMetricFamily(
        "majordomus_queue_held",
        "Of the executions queued and due, those a limit holds back (no worker could take "
        "them now), by capability and limit.",
        labels=["capability", "limit"],
    )
    delayed = GaugeMetricFamily(
        "majordomus_queue_delayed",
        "Executions queued for a later start (a delayed start, a retry's backoff), by capability.",
        labels=["capability"],
    )
    for group in report.queued_by_capability:
        depth.add_metric([group.capability], group.count)
        oldest.add_metric([group.capability], group.oldest_wait_seconds)
        held.add_metric([group.capability, "concurrency"], group.held)
        held.add_metric([group.capability, "per_key"], group.held_per_key)
        held.add_metric([group.capability, "rate"], group.held_by_rate)
        delayed.add_metric([group.capability], group.delayed)
    running = GaugeMetricFamily(
        "majordomus_executions_running",
        "Executions held by a worker now (running or cancelling), by capability.",
        labels=["capability"],
    )
    for capability, count in sorted(Tally(r.capability for r in report.running_executions).items()):
        running.add_metric([capability], count)
    alive = GaugeMetricFamily(
        "majordomus_workers_alive",
        "Workers that beat within the lease (silent ones are not counted).",
        value=sum(1 for w in report.workers if not w.silent),
    )
    return [depth, oldest, held, delayed, running, alive]
