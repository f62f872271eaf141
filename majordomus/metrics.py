"""What a process tells Prometheus: the metric objects, and how one scrape is answered.

Two kinds of figures, kept apart because they come from different places:

- **Counted in this process** (`METRICS`, one `Metrics` for the whole process): executions
  started (where `Engine.start` creates one), executions finished and their durations
  (where this process wrote the terminal event: the worker that ran it, or the engine that
  cancelled it while queued), executions failed by this process's sweeper, events appended,
  and each background loop's Redis failures and recoveries (`majordomus.loops.Failures`).
  Each process counts its own; Prometheus adds them up across processes, so every API and
  every worker is a target of its own (`GET /metrics` on the API, `MAJORDOMUS_METRICS_PORT`
  on a worker, `majordomus.cli.processes`).
- **Read at scrape time** (`majordomus.scrape.cluster_families`): the queue depth and the oldest wait by
  capability, the executions running by capability and the workers alive, read from Redis
  through the queue report that `queue.show` answers (`majordomus.reports`), bounded by
  `majordomus.scrape.SCRAPE_REDIS_SECONDS`, and the live listeners of the API process asking. These are the
  cluster's, not the process's: every API process reports the same values (take `max`, or
  scrape one API). Workers do not report them.

Decisions:

- The metrics live in a `CollectorRegistry` of majordomus's own, not prometheus_client's
  global default: nothing another library registers there shows up as ours, and the documentation
  can list every name a scrape answers (`tests/api/test_metrics.py` checks it). It is one
  registry per process rather than one per engine because the figures are the process's:
  `majordomus dev` (an API and a worker in one process) answers both sides' counters on one
  `/metrics`, and several engines in one process (the tests) count into the same metrics
  without clashing over names. Tests compare differences, never absolute values.
- No `_created` series: they would double the exposition and say only when the process
  started.
- Counting is plain Python (`Count`, `Durations`): prometheus_client is imported by the
  first scrape, not by counting, so a process that only starts executions (an
  application's `majordomus.Client`) never loads it.
- An execution is counted finished by the process that wrote its terminal event, so no
  two processes count one. The sweeper's are apart (`majordomus_executions_swept_total`,
  no capability label: its one append reads nothing back), and so is an execution whose
  capability no worker has (it never ran).
- A scrape of the API costs what `queue.show` costs (the queue's ids and their
  capabilities, the running set, the workers, the recent failures): one report per scrape
  interval is noise beside a worker's own traffic, and it keeps one definition of "queued"
  and "silent" for the console, the CLI and Prometheus alike.
- A scrape never fails because Redis does: the cluster read that failed or ran out of time
  is left out, `majordomus_redis_up` says 0, and the in-process figures are answered as
  always. Nothing of the failure reaches the client but that 0 (the log has it, at most
  once per `majordomus.scrape.SCRAPE_FAILURE_LOG_EVERY_SECONDS`).
- Labels are bounded: `capability` is a declared capability id (or `?` for a queue entry
  whose snapshot is gone), `state` a final state, `loop` the name of a background loop.

This module names no Redis command and reads nothing: it is below the engine, which
counts into it (`majordomus.scrape` reads the cluster's figures, through the engine). The
API answers
`GET /metrics` with `exposition` (`api/app.py`); a worker's port is prometheus_client's own
small threaded server (`serve_metrics`), started by `majordomus worker` before the worker
runs, so a scrape is answered even while the worker's event loop is busy.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from functools import cached_property
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from prometheus_client.metrics_core import Metric


log = logging.getLogger("majordomus.metrics")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The exposition format answered: Prometheus' text format 0.0.4, exactly as
prometheus_client names it (`exposition.CONTENT_TYPE_PLAIN_0_0_4`; a test checks): one
`charset` parameter, which a strict media-type parser insists on."""

DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
"""Seconds: an execution lasts from milliseconds (a quick handler) to hours."""


class Count:
    """A counter, by label values, kept as plain numbers: counting imports nothing (a
    producer's process counts its starts without loading prometheus_client, which only a
    scrape needs), and a scrape reads a copy (`family`), so the thread that serves a
    worker's port never sees a count half made."""

    def __init__(self, name: str, documentation: str, labels: tuple[str, ...] = ()) -> None:
        self.name = name
        self.documentation = documentation
        self.label_names = labels
        self.values: dict[tuple[str, ...], float] = {}

    def labels(self, *values: str) -> Labelled:
        return Labelled(self, values)

    def inc(self, amount: float = 1.0) -> None:
        self.add((), amount)

    def add(self, key: tuple[str, ...], amount: float) -> None:
        self.values[key] = self.values.get(key, 0.0) + amount

    def family(self) -> Metric:
        from prometheus_client.metrics_core import CounterMetricFamily

        family = CounterMetricFamily(self.name, self.documentation, labels=self.label_names)
        values = dict(self.values)
        if not self.label_names and not values:
            values[()] = 0.0  # an unlabelled counter is exposed from 0, as prometheus_client's
        for key, value in sorted(values.items()):
            family.add_metric(list(key), value)
        return family


class Labelled:
    """One labelled series of a `Count`."""

    __slots__ = ("count", "key")

    def __init__(self, count: Count, key: tuple[str, ...]) -> None:
        self.count = count
        self.key = key

    def inc(self, amount: float = 1.0) -> None:
        self.count.add(self.key, amount)


class Durations:
    """A histogram of seconds by capability, kept as plain numbers (as `Count` is)."""

    def __init__(self, name: str, documentation: str, buckets: tuple[float, ...]) -> None:
        self.name = name
        self.documentation = documentation
        self.buckets = buckets
        self.series: dict[str, tuple[list[int], float, int]] = {}
        """capability -> (count per bucket, not cumulative; sum; count)."""

    def observe(self, capability: str, seconds: float) -> None:
        counts, total, n = self.series.get(capability) or ([0] * len(self.buckets), 0.0, 0)
        for i, bound in enumerate(self.buckets):
            if seconds <= bound:
                counts[i] += 1
                break
        self.series[capability] = (counts, total + seconds, n + 1)

    def family(self) -> Metric:
        from prometheus_client.metrics_core import HistogramMetricFamily

        family = HistogramMetricFamily(self.name, self.documentation, labels=["capability"])
        for capability, (counts, total, n) in sorted(dict(self.series).items()):
            cumulative, below = [], 0
            for bound, count in zip(self.buckets, list(counts), strict=True):
                below += count
                cumulative.append((_le(bound), float(below)))
            cumulative.append(("+Inf", float(n)))
            family.add_metric([capability], cumulative, sum_value=total)
        return family


def _le(bound: float) -> str:
    """A bucket's bound as prometheus_client writes it (`0.01`, `1.0`, `3600.0`)."""
    return repr(float(bound))


class Metrics:
    """The metrics counted in one process; a registry of their own when scraped."""

    def __init__(self) -> None:
        self.started = Count(
            "majordomus_executions_started",
            "Executions created by this process, by capability.",
            ("capability",),
        )
        self.finished = Count(
            "majordomus_executions_finished",
            "Executions whose terminal event this process wrote, by capability and final state.",
            ("capability", "state"),
        )
        self.duration = Durations(
            "majordomus_execution_duration_seconds",
            "How long executions run on this worker, from its claim to its terminal event.",
            DURATION_BUCKETS,
        )
        self.timed_out = Count(
            "majordomus_executions_timed_out",
            "Executions this process's worker stopped at their timeout, by capability.",
            ("capability",),
        )
        self.children_started = Count(
            "majordomus_child_processes_started",
            "Child processes this worker started for a capability that runs in one.",
            ("capability",),
        )
        self.children_ended = Count(
            "majordomus_child_processes_ended",
            "Child processes of this worker that ended, by how: recycled, killed (stopped "
            "past its grace), died (on its own), stopped (with the worker).",
            ("capability", "how"),
        )
        self.swept = Count(
            "majordomus_executions_swept",
            "Executions this process's sweeper failed because their worker stopped.",
        )
        self.events = Count(
            "majordomus_events_appended",
            "Execution events this process appended (reports, state moves, terminal events).",
        )
        self.redis_data_lost = Count(
            "majordomus_redis_data_lost",
            "Partitions this process found had lost their data (their epoch changed: Redis "
            "restarted empty, was replaced or flushed).",
        )
        self.redis_errors = Count(
            "majordomus_redis_errors",
            "Failed attempts of a background loop because Redis was unreachable or refused.",
            ("loop",),
        )
        self.redis_reconnects = Count(
            "majordomus_redis_reconnects",
            "Times a background loop worked again after failures.",
            ("loop",),
        )

    @cached_property
    def registry(self) -> CollectorRegistry:
        """A prometheus_client registry of these metrics alone (made at the first scrape)."""
        from prometheus_client import CollectorRegistry
        from prometheus_client.registry import Collector

        metrics = self

        class Counted(Collector):
            def collect(self) -> Iterable[Metric]:
                for one in (
                    metrics.started, metrics.finished, metrics.duration, metrics.timed_out,
                    metrics.children_started, metrics.children_ended, metrics.swept,
                    metrics.events, metrics.redis_data_lost, metrics.redis_errors,
                    metrics.redis_reconnects,
                ):  # fmt: skip
                    yield one.family()

        registry = CollectorRegistry(auto_describe=True)
        registry.register(Counted())
        return registry

    def execution_started(self, capability: str) -> None:
        self.started.add((capability,), 1.0)

    def execution_finished(self, capability: str, state: str, seconds: float | None = None) -> None:
        """A terminal event this process wrote; `seconds`: how long it ran here (a worker's
        run; None for one that never ran, cancelled while queued)."""
        self.finished.add((capability, state), 1.0)
        if seconds is not None:
            self.duration.observe(capability, max(0.0, seconds))

    def events_appended(self, count: int) -> None:
        if count > 0:
            self.events.add((), float(count))


METRICS = Metrics()
"""The process's metrics."""


# -- one scrape --------------------------------------------------------------------------------


def serve_metrics(host: str, port: int) -> Any:
    """Serve this process's metrics on `host:port` (any path; a thread of its own) until
    the process ends; the server, or `OSError` when the port cannot be bound."""
    from prometheus_client import start_http_server

    server, _ = start_http_server(port, addr=host, registry=METRICS.registry)
    return server


def exposition(families: Iterable[Metric] = ()) -> bytes:
    """The process's metrics and `families`, in the text format (`CONTENT_TYPE`)."""
    from prometheus_client import generate_latest
    from prometheus_client.registry import Collector

    gathered = list(families)

    class Families(Collector):
        """Metric families gathered for one scrape, then exposed with the process's."""

        def collect(self) -> Iterable[Metric]:
            yield from METRICS.registry.collect()
            yield from gathered

    return generate_latest(Families())  # type: ignore[arg-type]
