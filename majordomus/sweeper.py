"""The sweeper: fails what dead workers held, forgets long-dead workers, prunes retention.

Every worker and every API process runs a `Sweeper`, so sweeping does not depend on any
worker being alive; at most one of them acts at a time. They elect it through Redis: the
sweeper lock (`Keys.sweeper_lock`) is taken with SET NX PX by the first to try, renewed by
its holder at every pass (and between batches of a long one), and released when it stops.
A holder that dies without releasing it loses it `LOCK_SWEEPS` intervals after its last
renewal, and the next candidate to try takes over.

A pass of the holder reads the workers' set with each worker's lease and running count:
two round trips of 1 + 2 * workers commands, the same with 10 or 10,000 running executions
of live workers. A worker is dead when its lease key is gone. The lease expires on Redis's
clock, so no machine's clock decides it; the last beat in the workers' set is the worker's
own clock and only ages its presence out. A dead worker's executions, read from its running
set, are failed `unavailable` ("the worker running it stopped") through `Store.append`,
`FAIL_BATCH` at a time. The append refuses a move out of a final state, so an execution
that finished meanwhile, or that a sweeper before it failed, is not failed again. A dead
worker whose last beat is `PRESENCE_SECONDS` old is forgotten. About once a minute
(`PRUNE_EVERY_SECONDS`) the holder also prunes finished executions past retention.

A lost execution whose capability's retry policy retries `unavailable`
(`majordomus.retries`) counts as an attempt: when attempts remain, the sweeper starts the
chain's next attempt (from the unredacted input, read before the failure deletes it) and
then fails the lost one with a `retry.scheduled` diagnostic before its `execution.failed`,
the order the worker keeps, so the link is there before the failure is seen. An attempt
already linked (its worker died between starting the retry and failing) is not retried
again; the retry's idempotency key makes a second start answer the first anyway. A retry
made for an execution that then turns out not to be lost (its worker renewed its lease in
between: the failure is refused) is cancelled at once; it is due no sooner than
`LOST_RETRY_FLOOR_MS`, so no worker can have taken it by then.

This module decides nothing about a worker but by its lease, reruns nothing of the lost
attempt itself, and names no Redis command: it calls store methods (and, for a retry, the
engine's start and cancel) only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import msgspec

from majordomus import clock
from majordomus.attempts import start_next_attempt
from majordomus.clock import now_stamp
from majordomus.config import Settings
from majordomus.errors import MajordomusError
from majordomus.loops import Failures, stop_task, within
from majordomus.metrics import METRICS
from majordomus.model import ExecutionDiagnostic
from majordomus.registry import Registry
from majordomus.retries import attempts_left, exhausted
from majordomus.states import FINAL
from majordomus.store.executions import AppendResult, EventWrite, Store
from majordomus.store.failures import UNREACHABLE
from majordomus.store.workers import PRESENCE_SECONDS

if TYPE_CHECKING:
    from majordomus.engine import Engine

log = logging.getLogger("majordomus.sweeper")

WORKER_LOST = MajordomusError(
    "unavailable",
    "the worker running it stopped",
    "start it again; if this repeats, look at the worker's host for crashes or OOM kills",
)

SWEEPS_PER_LEASE = 10
"""A candidate tries for the lock, and its holder sweeps, every tenth of
`MAJORDOMUS_LEASE_SECONDS` (1.5 s at the default 15 s)..."""
SWEEP_MIN_SECONDS = 0.2
"""...but not more often than this."""

LOCK_SWEEPS = 5
"""The lock lapses this many sweep intervals after its holder's last renewal (half the
lease): a killed or stalled holder is replaced that soon, and a holder that misses four
renewals in a row (a slow Redis) keeps it. A killed worker's own lease lapses a lease
after its last beat, so its executions are failed within the lease plus one interval, even
when it was the sweeper (its lock lapses sooner than its lease)."""

FAIL_BATCH = 16
"""Executions a pass fails at once (concurrent appends): below the API's pool of 32
connections, so a big sweep never starves the requests the API serves meanwhile."""

PRUNE_EVERY_SECONDS = 60.0
"""How often the holder prunes finished executions past retention (`Store.prune`)."""

RELEASE_SECONDS = 2.0
"""How long a stopping sweeper tries to release the lock; past it the lock lapses."""

SHOWN_IDS = 5
"""Execution ids named in the one log line of a dead worker's sweep."""

LOST_RETRY_FLOOR_MS = 1000
"""The shortest delay of a lost attempt's retry, whatever its policy's backoff: time enough
to cancel it before any worker can take it, should the lost one's worker renew its lease
between the sweeper's look and its failure (which is then refused)."""


def sweep_interval(settings: Settings) -> float:
    """Seconds between two tries (and two passes of the holder)."""
    return max(SWEEP_MIN_SECONDS, settings.lease_seconds / SWEEPS_PER_LEASE)


def concurrency_of(registry: Registry) -> dict[str, int]:
    """Each capability's `max_concurrency`, for those that have one."""
    return {c.id: c.max_concurrency for c in registry if c.max_concurrency}


def per_key_of(registry: Registry) -> dict[str, int]:
    """Each capability's limit per key (`majordomus.flow`), for those that declare one."""
    return {c.id: c.per_key.limit for c in registry if c.per_key is not None}


def failed_data(error: MajordomusError, execution_id: str) -> bytes:
    """The data of an `execution.failed` ending an execution with `error` (the worker's
    own ends and the sweeper's alike)."""
    return b'{"error":' + msgspec.json.encode(error.for_execution(execution_id)) + b"}"


def lost_event(execution_id: str) -> bytes:
    """The data of the `execution.failed` that ends an execution whose worker died."""
    return failed_data(WORKER_LOST, execution_id)


@dataclass(frozen=True)
class _LostEnd:
    """How the sweeper ends one lost attempt: the events before its failure, and the
    retry it started for it (None: not retried)."""

    before: list[EventWrite]
    retry: str | None = None


def retries_lost(registry: Registry) -> frozenset[str]:
    """The capabilities whose retry policy retries an attempt lost with its worker."""
    return frozenset(c.id for c in registry if c.retry and c.retry.retries_code("unavailable"))


def _diagnostic_event(diag: ExecutionDiagnostic) -> EventWrite:
    return ("execution.diagnostic", msgspec.json.encode(diag))


def _raise_if_cancelled() -> None:
    """Honour a cancellation the Redis client lost. A cancel that lands while redis-py
    reads a reply under its socket timeout can be dropped (seen with redis-py 5.3 on
    Python 3.11: the command returns normally); the task still counts it as asked
    (`Task.cancelling()`), so the loop stops at its next step instead of running on."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


class Sweeper:
    """One process's candidacy for the cluster's one sweeper, and its passes when elected.

    `run()` loops until cancelled (releasing the lock on the way out); `start()` and
    `stop()` hold it as a task; `tick()` is one try and, if elected, one pass.
    """

    def __init__(
        self,
        store: Store,
        settings: Settings,
        holder: str,
        concurrency: Mapping[str, int] | None = None,
        engine: Engine | None = None,
        per_key: Mapping[str, int] | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.concurrency = dict(concurrency or {})
        """The `max_concurrency` of each capability that has one: the queue's upkeep
        promotes their waiting executions when a slot ran out without a terminal event."""
        self.per_key = dict(per_key or {})
        """The limit per key of each capability that declares one (`majordomus.flow`): the
        upkeep promotes their keys' waiting executions in the same way."""
        self.engine = engine
        """The engine retries start through (on this store), with the registry whose
        policies say which lost attempts are retried; None: none is."""
        self.retrying = retries_lost(engine.registry) if engine is not None else frozenset()
        self.holder = f"{holder}:{secrets.token_hex(4)}"
        """Who this candidate is in the lock's value: the process, and one token more,
        so two candidates of one process never take each other's lock for their own."""
        self.interval = sweep_interval(settings)
        self.lock_ms = int(self.interval * LOCK_SWEEPS * 1000)
        self.holding = False
        self.failures = Failures(log, "the sweeper")
        self._renewed_at = 0.0
        self._pruned_at: float | None = None
        self._task: asyncio.Task[None] | None = None

    # -- life -------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self.run(), name="majordomus-sweeper")

    async def stop(self) -> None:
        """Stop sweeping and release the lock (the caller's cancellation goes on up)."""
        task, self._task = self._task, None
        await stop_task(task, log)

    async def run(self) -> None:
        """Try, and sweep when elected, every interval until cancelled. A failure is said
        once with its traceback and counted after (`Failures`); the next try waits at
        least the interval, longer while the failures go on."""
        try:
            while True:
                try:
                    await self.tick()
                except Exception as exc:  # noqa: BLE001  try again, backing off
                    _raise_if_cancelled()
                    self.failures.failed(exc)
                    await clock.sleep(max(self.interval, self.failures.backoff()))
                    continue
                _raise_if_cancelled()
                self.failures.recovered()
                await clock.sleep(self.interval)  # wakes early when a test skips time
        finally:
            await self._release()

    async def _release(self) -> None:
        # Tried even when not holding: a take cut short by the cancel may have succeeded.
        # Not releasing only delays the next holder by the lock's time: never worth a raise.
        self.holding = False
        with contextlib.suppress(Exception):
            await within(RELEASE_SECONDS, self.store.release_sweeper_lock(self.holder))

    # -- one try ----------------------------------------------------------------------

    async def tick(self) -> int | None:
        """Take or renew the lock; holding it, sweep once (and prune when due). Answers
        how many executions were failed, or None when another process is the sweeper."""
        if self.engine is not None:  # every candidate, elected or not (`majordomus.epochs`)
            if lost := await self.engine.epochs.check():
                METRICS.redis_data_lost.add((), float(len(lost)))
        held = self.holding
        self.holding = await self.store.hold_sweeper_lock(
            self.holder, self.lock_ms, renew=held
        )
        if self.holding != held:
            self._say_turn(held)
        if not self.holding:
            return None
        self._renewed_at = time.monotonic()
        failed = await self.sweep()
        if not self.holding:
            return failed
        await self.upkeep()
        now = time.monotonic()
        if self._pruned_at is None or now - self._pruned_at >= PRUNE_EVERY_SECONDS:
            self._pruned_at = now
            pruned = await self.store.prune()
            if pruned:
                log.info("pruned %d finished executions past retention", pruned)
        return failed

    async def sweep(self) -> int:
        """One pass: fail what dead workers held, forget the long dead. Answers how many
        executions it failed."""
        workers = await self.store.worker_leases()
        dead = [w for w in workers if not w.lease_held]
        if not dead:
            return 0
        holding = [w.id for w in dead if w.holds]
        failed = 0
        for worker_id, ids in zip(holding, await self.store.held_by(holding), strict=True):
            failed += await self._fail_held(worker_id, ids)
            if not self.holding:
                return failed
        cutoff_ms = now_stamp()[1] - PRESENCE_SECONDS * 1000
        await self.store.forget_workers(
            [w.id for w in dead if not w.holds and w.last_beat_ms < cutoff_ms]
        )
        return failed

    async def upkeep(self) -> None:
        """The queue's own repair, one script per capability however long the queue: a
        capability whose slot ran out without a terminal event (a holder's lease lapsed)
        moves its oldest waiting executions into the queue. (A take is a claim, so no
        execution is ever taken and not started: a worker that dies after a take has its
        executions failed like any it was running.)"""
        for capability, limit in self.concurrency.items():
            await self.store.release_slot(capability, "", limit)
        for capability, limit in self.per_key.items():
            await self.store.key_upkeep(capability, limit)

    async def _fail_held(self, worker_id: str, execution_ids: list[str]) -> int:
        failed: list[str] = []
        for start in range(0, len(execution_ids), FAIL_BATCH):
            if not await self._still_holding():
                break
            batch = execution_ids[start : start + FAIL_BATCH]
            results = await asyncio.gather(*(self._fail_lost(worker_id, x) for x in batch))
            swept = [x for x, result in zip(batch, results, strict=True) if result.complete]
            METRICS.swept.inc(len(swept))
            METRICS.events_appended(sum(r.applied for r in results))
            failed += swept
            # The terminal event took the failed ones out of the set; this takes out those
            # that had ended already, or that Redis no longer knows. One refused while still
            # running means the worker renewed its lease meanwhile: it keeps the rest.
            gone = [
                x
                for x, result in zip(batch, results, strict=True)
                if not result.complete and (not result.found or result.state in FINAL)
            ]
            await self.store.let_go(worker_id, gone)
            if any(not r.complete and r.found and r.state not in FINAL for r in results):
                log.info("worker %s renewed its lease while being swept: it keeps the rest", worker_id)
                break
        if failed:
            shown = ", ".join(failed[:SHOWN_IDS])
            more = f" and {len(failed) - SHOWN_IDS} more" if len(failed) > SHOWN_IDS else ""
            log.warning(
                "worker %s stopped renewing its lease: failed the %d executions it ran as "
                "unavailable: %s%s",
                worker_id,
                len(failed),
                shown,
                more,
                # Every one, as a field (a worker runs at most its MAX_JOBS at once).
                extra={"execution_ids": failed, "worker_id": worker_id},
            )
        return len(failed)

    async def _still_holding(self) -> bool:
        """Renew the lock in a long pass, once an interval: a holder that lost it stops."""
        if time.monotonic() - self._renewed_at < self.interval:
            return self.holding
        self.holding = await self.store.hold_sweeper_lock(self.holder, self.lock_ms, renew=True)
        self._renewed_at = time.monotonic()
        if not self.holding:
            self._say_turn(True)
        return self.holding

    def _say_turn(self, was_holding: bool) -> None:
        """One line when this process becomes the sweeper, or stops being it (an operator
        reading a late sweep wants to know who held the lock, and since when)."""
        if was_holding:
            log.info("%s is no longer the sweeper (its lock lapsed or was taken)", self.holder)
        else:
            log.info("%s is the sweeper now", self.holder)

    # -- one lost attempt -------------------------------------------------------------

    async def _fail_lost(self, worker_id: str, execution_id: str) -> AppendResult:
        """Fail one execution of a lost worker (only while that worker's lease is lapsed,
        checked in the same atomic step), retrying it first when its policy says so."""
        end = _LostEnd([])
        if self.retrying:
            end = await self._retry_lost(execution_id)
        events = [*end.before, ("execution.failed", lost_event(execution_id))]
        result = await self.store.append(execution_id, events, if_lapsed=worker_id)
        if end.retry is not None and not result.complete and result.state != "failed":
            # Not lost after all (its worker renewed its lease, so it runs on), or ended
            # otherwise meanwhile: the retry made for it is no attempt of its chain.
            log.warning(
                "execution_id=%s was not lost after all: cancelling the retry %s made for it",
                execution_id,
                end.retry,
                extra={"execution_id": execution_id},
            )
            await self._withdraw(end.retry)
        return result

    async def _retry_lost(self, execution_id: str) -> _LostEnd:
        """Start the next attempt of a lost one whose policy retries `unavailable`, and say
        so in its history; or say that no attempt is left. Redis away raises (the next pass
        tries again, and finds the link if this one got as far as making it); any other
        failure to start it leaves the lost one failed, unretried, as without a policy."""
        engine = self.engine
        assert engine is not None
        raw = await self.store.snapshot(execution_id)
        if raw is None or raw.get(b"capability", b"").decode() not in self.retrying:
            return _LostEnd([])
        snap = engine.snapshot_from(raw)
        cap = engine.registry.get(snap.capability)
        if cap is None or cap.retry is None or snap.state != "running":
            return _LostEnd([])  # a cancel was asked of it: never retried
        if not attempts_left(snap, cap.retry):
            return _LostEnd([_diagnostic_event(exhausted(snap, cap.retry))])
        try:
            worker_input = await self.store.worker_input(execution_id)
            following = await start_next_attempt(
                engine,
                cap,
                snap,
                worker_input,
                floor_ms=LOST_RETRY_FLOOR_MS,
                timeout_ms=int(raw[b"timeout_ms"]) if raw.get(b"timeout_ms") else None,
            )
            # As the worker does: a cancel that landed meanwhile (it read no link yet)
            # is seen here, and the retry is cancelled with the chain.
            if (await self.store.states([execution_id]))[0] == "cancelling":
                await self._withdraw(following.execution_id)
                return _LostEnd([])
        except UNREACHABLE:
            raise
        except Exception as exc:  # noqa: BLE001  failed unretried, as without a policy
            log.warning(
                "execution_id=%s: its retry could not be started: %s",
                execution_id,
                exc,
                extra={"execution_id": execution_id},
            )
            return _LostEnd([])
        # Only a retry this pass made is withdrawn should the failure be refused; one found
        # linked already is its worker's, which may yet fail the attempt itself.
        made = following.execution_id if following.delay_ms is not None else None
        return _LostEnd([_diagnostic_event(following.diagnostic())], made)

    async def _withdraw(self, retry_id: str) -> None:
        """Cancel a retry that must not run (it is due later: still queued)."""
        assert self.engine is not None
        try:
            await self.engine.cancel(retry_id, by="sweeper")
        except Exception as exc:  # noqa: BLE001  said; a cancel of it by hand ends it too
            log.warning(
                "could not cancel the retry %s: %s", retry_id, exc, extra={"execution_id": retry_id}
            )
