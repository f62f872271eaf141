"""The state of the cluster's queue for operators: the answers of `queue.show` and
`queue.workers` (`majordomus queue`, `majordomus workers`).

One `QueueReport` says what is queued (by capability, with the oldest wait), what runs on
which worker, which workers report themselves and how long ago they last beat, and which
executions failed or were cancelled lately, with which code. Each report is read from an
`Engine`'s store through its inspection reads, at one moment, and changes nothing; a
surface passes the engine and never reaches into its store itself. What the model already
types (an execution's state and progress, its error) is read as the model's types, not
again here. A worker is *silent* when its last beat is older than the lease or its lease
key is gone: its executions are about to be failed as `unavailable` by a sweeper.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import msgspec
from msgspec import UNSET, UnsetType

from majordomus.clock import now_stamp, stamp_of
from majordomus.errors import ExecutionError
from majordomus.model import ProgressView
from majordomus.states import ExecutionState

if TYPE_CHECKING:
    # Only named in annotations: the report types are declared without the engine.
    from majordomus.engine import Engine
    from majordomus.store.executions import Store

RECENT_FINISHED = 200
"""How many of the latest finished executions are looked through for failures."""
RECENT_FAILURES = 10
"""How many recent failures (cancellations among them) a report lists."""
UNSUCCESSFUL = frozenset({b"failed", b"cancelled"})
"""The final states a report lists among its failures: a cancellation carries the code
`cancelled` (people, or a stopping worker whose grace ran out)."""


class KeyWaiting(msgspec.Struct):
    """One key of a capability's limit per key, and how many of its executions wait."""

    key: str
    waiting: int


class QueuedCapability(msgspec.Struct):
    """The executions of one capability waiting for a worker."""

    capability: str
    count: int
    """How many are due (start_at past, or none): waiting for a worker now."""
    oldest: str | None
    """The id of the one waiting longest (None when none is due yet)."""
    oldest_wait_seconds: float
    """Since the oldest came due (0 when none is)."""
    held: int = 0
    """Of `count`, how many the capability's `max_concurrency` holds back: in its waiting
    list, holding no worker, moved back into the queue as a slot frees. What a worker could
    take now is `count - held - held_per_key - held_by_rate` (what an autoscaler scales
    on)."""
    held_per_key: int = 0
    """Of `count`, how many their key's limit holds back (`per_key`, `majordomus.flow`):
    in their key's waiting list, moved to the queue as a slot of their key frees."""
    keys_held: int = 0
    """Over how many keys those wait (the keys read: up to 1,000 a partition)."""
    busiest_keys: list[KeyWaiting] = []
    """The five keys with the most waiting, most first."""
    held_by_rate: int = 0
    """Of `count`, how many wait for their turn under the capability's rate limit
    (`majordomus.flow.RateLimit`): each has a `due_at`, and starts then."""
    delayed: int = 0
    """How many wait for their `start_at` (a delayed start, a retry's backoff)."""
    next_due_at: str | None = None
    """When the first of those is due, RFC 3339 UTC."""


class RunningExecution(msgspec.Struct, omit_defaults=True):
    """An execution a worker holds (running, or cancelling)."""

    id: str
    capability: str
    state: ExecutionState
    """Running or cancelling."""
    worker: str | UnsetType = UNSET
    started_at: str | UnsetType = UNSET
    running_seconds: float | UnsetType = UNSET
    progress: ProgressView | UnsetType = UNSET


class WorkerPresence(msgspec.Struct):
    """One worker as it last reported itself."""

    id: str
    host: str
    pid: int
    started_at: str
    running: int
    """Executions it holds (running or cancelling) as the index has them now."""
    last_beat: str
    seconds_since_beat: float
    accepting: bool
    """False once it was told to stop (SIGTERM) or its beat saw it drained: it finishes what
    it runs and takes nothing new."""
    silent: bool
    """Its last beat is older than the lease, or its lease is gone: presumed dead."""
    draining: bool = False
    """An operator drained it (`queue.drain`) and has not undrained it: it takes nothing new
    from its next beat on (`accepting` turns false then), and runs what it took."""
    drained_at: str | None = None
    """When it was drained."""


class RecentFailure(msgspec.Struct, omit_defaults=True):
    """An execution that ended failed or cancelled, with its error's code."""

    id: str
    capability: str
    code: str
    message: str
    finished_at: str | UnsetType = UNSET
    suggestion: str | UnsetType = UNSET


class QueueReport(msgspec.Struct):
    """The answer of `queue.show` (`majordomus queue --format json`)."""

    taken_at: str
    queued: int
    """Every `queued` execution, delayed ones included."""
    running: int
    queued_by_capability: list[QueuedCapability]
    running_executions: list[RunningExecution]
    workers: list[WorkerPresence]
    recent_failures: list[RecentFailure]
    lease_seconds: float


class WorkerReport(msgspec.Struct):
    """The answer of `queue.workers` (`majordomus workers --format json`)."""

    taken_at: str
    workers: list[WorkerPresence]
    lease_seconds: float


def _text(value: bytes | None) -> str | None:
    return value.decode() if value is not None else None


def _seconds_since(ms: int, now_ms: int) -> float:
    return round(max(0, now_ms - ms) / 1000, 1)


async def worker_presence(engine: Engine, held: Counter[str] | None = None) -> list[WorkerPresence]:
    """Every worker that reported itself, the silent ones marked, oldest-started first.

    `held` counts the running executions of each worker as the index has them now; without
    it a worker's own count, as of its last beat, is shown.
    """
    store = engine.store
    lease_ms = store.settings.lease_seconds * 1000
    _, now_ms = now_stamp()
    found: list[WorkerPresence] = []
    for worker_id, raw, lease_held in await store.workers_present():
        if not raw:
            continue  # its presence expired: long gone
        last_ms = int(raw.get(b"last_beat_ms", b"0"))
        found.append(
            WorkerPresence(
                id=worker_id,
                host=raw.get(b"host", b"?").decode(),
                pid=int(raw.get(b"pid", b"0")),
                started_at=raw.get(b"started_at", b"").decode(),
                running=held[worker_id] if held is not None else int(raw.get(b"running", b"0")),
                last_beat=raw.get(b"last_beat", b"").decode(),
                seconds_since_beat=_seconds_since(last_ms, now_ms),
                accepting=raw.get(b"accepting", b"1") == b"1",
                silent=not lease_held or now_ms - last_ms > lease_ms,
                # `store.workers.DRAIN_FIELD`, named as the other fields are read here
                draining=b"drain" in raw,
                drained_at=_text(raw.get(b"drain")),
            )
        )
    found.sort(key=lambda w: (w.started_at, w.id))
    return found


async def drained_workers(engine: Engine, worker_ids: list[str]) -> list[str]:
    """Those of `worker_ids` an operator drained (`queue.drain`): for the readiness probe."""
    return await engine.store.drained_of(worker_ids)


async def _queued(store: Store, now_ms: int) -> tuple[int, list[QueuedCapability]]:
    entries = await store.queued_ids()  # scored by when each is (or was) due
    ids = [i for i, _ in entries]
    capabilities = await store.snapshot_fields(ids, ["capability", "rate_due"])
    counts: Counter[str] = Counter()
    rated: Counter[str] = Counter()
    later: Counter[str] = Counter()
    oldest: dict[str, tuple[int, str]] = {}
    first_due: dict[str, int] = {}
    for (execution_id, due_ms), (cap, turn) in zip(entries, capabilities, strict=False):
        name = _text(cap) or "?"
        if due_ms <= now_ms and turn is not None and int(turn) > now_ms:
            rated[name] += 1
        if due_ms > now_ms:
            later[name] += 1
            first_due[name] = min(due_ms, first_due.get(name, due_ms))
            continue
        counts[name] += 1
        if name not in oldest or due_ms < oldest[name][0]:
            oldest[name] = (due_ms, execution_id)
    groups = [
        QueuedCapability(
            capability=name,
            count=counts[name],
            oldest=oldest[name][1] if name in oldest else None,
            oldest_wait_seconds=_seconds_since(oldest[name][0], now_ms) if name in oldest else 0.0,
            delayed=later[name],
            held_by_rate=rated[name],
            next_due_at=stamp_of(first_due[name]) if name in first_due else None,
        )
        for name in sorted({*counts, *later})
    ]
    held = await store.waiting_counts([g.capability for g in groups])
    for group, waiting in zip(groups, held, strict=True):
        group.held = min(waiting, group.count)
    per_key = await store.key_waiting_counts([g.capability for g in groups])
    for group, (waiting, keys, busiest) in zip(groups, per_key, strict=True):
        group.held_per_key = min(waiting, group.count - group.held)
        group.keys_held = keys
        group.busiest_keys = [KeyWaiting(key, n) for key, n in busiest]
    groups.sort(key=lambda g: (-g.oldest_wait_seconds, g.capability))
    return len(entries), groups


_RUNNING_FIELDS = ["capability", "state", "worker", "started_at", "started_ms", "progress"]
_progress_decoder = msgspec.json.Decoder(ProgressView)


async def _running(store: Store, now_ms: int) -> list[RunningExecution]:
    ids = await store.running_ids()
    rows = await store.snapshot_fields(ids, _RUNNING_FIELDS)
    found: list[RunningExecution] = []
    for execution_id, (cap, state, worker, started_at, started_ms, progress) in zip(
        ids, rows, strict=False
    ):
        if state is None:
            continue  # gone between the two reads
        found.append(
            RunningExecution(
                id=execution_id,
                capability=_text(cap) or "?",
                state=state.decode(),  # type: ignore[arg-type]
                worker=_text(worker) or UNSET,
                started_at=_text(started_at) or UNSET,
                running_seconds=(
                    _seconds_since(int(started_ms), now_ms) if started_ms is not None else UNSET
                ),
                progress=_progress_decoder.decode(progress) if progress else UNSET,
            )
        )
    found.sort(key=lambda r: (str(r.worker or ""), str(r.started_at or ""), r.id))
    return found


_error_decoder = msgspec.json.Decoder(ExecutionError)


async def _failures(store: Store) -> list[RecentFailure]:
    ids = await store.recently_finished_ids(RECENT_FINISHED)
    rows = await store.snapshot_fields(ids, ["capability", "state", "error", "finished_at"])
    found: list[RecentFailure] = []
    for execution_id, (cap, state, error, finished_at) in zip(ids, rows, strict=False):
        if state not in UNSUCCESSFUL or not error:
            continue
        err = _error_decoder.decode(error)
        found.append(
            RecentFailure(
                id=execution_id,
                capability=_text(cap) or "?",
                code=err.code,
                message=err.message,
                finished_at=_text(finished_at) or UNSET,
                suggestion=err.suggestion if err.suggestion else UNSET,
            )
        )
        if len(found) >= RECENT_FAILURES:
            break
    return found


async def queue_report(engine: Engine) -> QueueReport:
    """The queue, the running executions, the workers and the recent failures (cancellations
    among them), now."""
    store = engine.store
    taken_at, now_ms = now_stamp()
    queued, groups = await _queued(store, now_ms)
    running = await _running(store, now_ms)
    return QueueReport(
        taken_at=taken_at,
        queued=queued,
        running=len(running),
        queued_by_capability=groups,
        running_executions=running,
        workers=await worker_presence(engine, _held(running)),
        recent_failures=await _failures(store),
        lease_seconds=engine.settings.lease_seconds,
    )


async def worker_report(engine: Engine) -> WorkerReport:
    """The workers alone, each with the executions the index says it holds now."""
    taken_at, now_ms = now_stamp()
    running = await _running(engine.store, now_ms)
    workers = await worker_presence(engine, _held(running))
    return WorkerReport(taken_at, workers, engine.settings.lease_seconds)


def _held(running: list[RunningExecution]) -> Counter[str]:
    return Counter(str(r.worker) for r in running if r.worker)
