"""The arq worker, with a wake-up signal in place of arq's fixed 0.5 s poll.

arq finds work by polling its queue every `poll_delay`. `MajordomusWorker` keeps arq's poll
loop, its counters, health record and signal handling, and replaces the wait between
polls: it sleeps until a wake-up signal (published by every start, and set when a slot
frees), the next deferred job is due, or the long-poll fallback passes. So a start is
picked up within milliseconds and an idle worker makes one small query a second.
On one Redis with one partition a worker with room (a free slot) waits in Redis instead: a
blocking pop of the wake-up list with its take behind it in the same write
(`QueueStore.take_blocking`), so a start reaches it already taken, in one message rather
than a signal and then a take; there the wake-up list is the only signal it heeds. SIGTERM
stops taking work, lets running executions finish for `MAJORDOMUS_SHUTDOWN_GRACE`, then
cancels them (`by: "server"`). A drained worker (`queue.drain`, read with its beat) takes
nothing either, and runs what it took; undrained, it takes again.

It also takes and runs the executions itself (`_poll_once` and `_run_execution`, where arq's
`main` calls its `_poll_iteration`, `start_jobs`, `run_job` and `finish_job`): arq's build
every key from its module constants (`arq:job:<id>`, `arq:retry:<id>`, `arq:abort`, ...),
one set for the whole process, which would put every deployment's jobs under the same
names whatever its `MAJORDOMUS_KEY_PREFIX`, and spend five round trips a job where
majordomus needs a fraction of one. Ours go through the store and its `Keys`, so a worker
touches only its own prefix's keys, and several prefixes can run in one process. An
execution needs none of what arq's runner adds around a job (retries, results, aborts,
its timeout, per-job hooks), so this is a handful of lines, not a copy.

Only arq's public API is used: the worker overrides `main` and `handle_sig` alone, and
reads arq's public attributes (`pool`, `tasks`, `job_counter`, `allow_pick_jobs`, ...); the
methods of arq's own runner are reached only from arq's `main`, so they never run here.
`tests/workers/test_arq_overrides.py` fails when an arq release changes what this relies on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Coroutine
from typing import Any, TypeVar

from arq.worker import Worker

from majordomus import clock
from majordomus.config import Settings
from majordomus.loops import Failures, within
from majordomus.metrics import METRICS
from majordomus.registry import Registry
from majordomus.store.connect import connect
from majordomus.store.queue import BLOCK_MAX_SECONDS, Take, Taken
from majordomus.workers.runtime import WorkerRuntime
from majordomus.workers.settings import MAJORDOMUS_WORKER, worker_options

log = logging.getLogger("majordomus.worker")

REDIS_TIMEOUT_SLACK_SECONDS = 0.12
"""How late Redis may end a blocking command whose timeout ran out: it checks them on its
clock tick (`hz` 10: every 100 ms), so a `BLMOVE` of 0.25 s returns after about 0.30 s."""

EAGER = sys.version_info >= (3, 12)
"""Whether asyncio can start a task eagerly (`started_now`)."""
T = TypeVar("T")

MIN_BLOCK_SECONDS = 0.05
"""A shorter wait in Redis than this is not worth a blocking take: the worker waits here."""


def started_now(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    """A task that runs `coro` up to its first wait before this returns (an eager task,
    Python 3.12 and later), rather than from the loop's next turn: a taken execution's
    handler starts as the take's answer is read, not after everything else the loop had
    scheduled meanwhile (the poll loop's own step, the wake-up signal). Before 3.12, a
    plain task."""
    if EAGER:
        return asyncio.Task(coro, loop=loop, eager_start=True)  # type: ignore[call-arg]
    return loop.create_task(coro)


class MajordomusWorker(Worker):
    runtime: WorkerRuntime | None = None
    _take_token: str | None = None
    """The token of a take not yet answered (sent again by the next poll)."""
    _take_first: str | None = None
    """Where that take started (`runtime.take_hint()`): a take sent again starts there too,
    so it visits the partitions the first send may have taken from, in the same order."""
    _next_due_ms: float | None = None
    """When the queue's first entry is due, as the last take saw it."""
    _room_made = False
    """A slot freed while the poll loop waited here (this worker was full), with no due
    work left behind: the loop goes on to wait in Redis (a start meanwhile left a wake-up
    there, so none is missed)."""
    _block: float | None = None
    """How long this poll's take may wait in Redis (`_block_for`), None for a plain take."""
    _not_blocking: asyncio.Event | None = None
    """Set while no blocking take is waiting (`_stop_gracefully` waits for it)."""

    async def main(self) -> None:
        if self.pool is None:
            raise RuntimeError("MajordomusWorker is given its Redis client: build_worker(...)")
        self.ctx["redis"] = self.pool
        self.ctx[MAJORDOMUS_WORKER] = True
        if self.on_startup:
            await self.on_startup(self.ctx)
        runtime: WorkerRuntime = self.ctx["majordomus"]
        self.runtime = runtime
        log.info("worker %s ready on queue %s", runtime.worker_id, self.queue_name)
        # A failed poll (Redis away, or a job that ended with a failure arq re-raises here)
        # never ends the process: it is said once, and polling resumes, backing off, as
        # soon as Redis answers; the listener's resubscription wakes it at once.
        failures = Failures(log, "the worker's poll loop")
        self._not_blocking = asyncio.Event()
        self._not_blocking.set()
        block: float | None = None
        while True:
            runtime.wake.clear()
            try:
                if runtime.lease_in_doubt:  # back from an outage: renew before taking work
                    await runtime.beat()
                self._block = block
                await self._poll_once()
                if self.burst and not self.tasks and not await runtime.store.ready_count():
                    return
                timeout = self._next_wait(runtime.settings.poll_seconds)
                block = self._block_for(timeout)
            except Exception as exc:  # noqa: BLE001
                failures.failed(exc)
                timeout, block = failures.backoff(), None
            else:
                failures.recovered()
            if block is None:  # else the next poll's take waits, in Redis
                await within(timeout, runtime.wake.wait())
                if self._room_made:  # a slot freed: wait in Redis from now
                    self._room_made = False
                    block = self._block_for(self._next_wait(runtime.settings.poll_seconds))

    def _block_for(self, timeout: float) -> float | None:
        """How long the next poll's take may wait in Redis for a start (`take_blocking`),
        or None for a plain take after waiting here: a worker with room (a free slot,
        nothing unanswered, its lease sure, not stopping, not in burst mode) waits there,
        so a start reaches it with no round trip between the wake-up and the take, and the
        wake-up list alone tells it of starts (it hears no wake-up channel, `_listen`)."""
        runtime = self._runtime()
        if (
            timeout <= 0
            or self.job_counter >= self.max_jobs
            or not self._taking
            or self.burst
            or self._take_token is not None
            or runtime.lease_in_doubt
            or not runtime.store.can_block
        ):
            return None
        head_ms = self._next_due_ms
        if head_ms is not None:
            due_in = (head_ms - clock.now() * 1000) / 1000
            if due_in <= timeout + REDIS_TIMEOUT_SLACK_SECONDS:
                # Delayed work comes due within the wait: Redis ends a blocking wait on its
                # own clock tick, up to 100 ms late, so the wait there ends before the due
                # time by that much, and the rest is waited here (to the millisecond).
                early = due_in - REDIS_TIMEOUT_SLACK_SECONDS
                return early if early >= MIN_BLOCK_SECONDS else None
        return timeout

    def _next_wait(self, fallback: float) -> float:
        """Until the queue's next entry is due (as the take saw it), or the fallback; none
        when due work is left and this worker has room; never a busy loop."""
        head_ms = self._next_due_ms
        if head_ms is None:
            return fallback
        due_in = (head_ms - clock.now() * 1000) / 1000
        if due_in > 0:
            return min(due_in, fallback)
        # Due work left after a take: more than it could take, so take again now while
        # there is room; when full, a finishing execution wakes us.
        return 0.0 if self.job_counter < self.max_jobs and self._taking else fallback

    @property
    def _taking(self) -> bool:
        """Neither stopping (SIGTERM) nor drained by an operator: it takes work."""
        return self.allow_pick_jobs and not (self.runtime is not None and self.runtime.draining)

    async def _poll_once(self) -> None:
        """arq's poll, as one script (`take.lua`) that polls, takes and starts up to as many
        executions as this worker has free slots: one round trip per batch of starts
        (arq's read the queue, then spend four round trips a job to mark it in progress,
        and ours then claimed it in another). The token is kept until a take answers: a
        take whose answer was lost (Redis away in between) is sent again with its token by
        the next poll, which answers the executions it started, so none is stranded
        `running` with nobody running it. A worker whose lease lapsed takes nothing and
        beats first. With `_block` (`_block_for`), the take waits in Redis for that long for a
        start and takes it (`take_blocking`). Then arq's own bookkeeping: finished tasks are
        dropped, and its health record is written when due."""
        runtime = self._runtime()
        # Woken while full: work may be waiting, so the next slot freed polls again.
        self._next_due_ms = 0.0
        if self._taking and self.job_counter < self.max_jobs:
            free = self.max_jobs - self.job_counter
            block = self._block
            blocking = block is not None and self._take_token is None
            if self._take_token is None:
                self._take_token = runtime.store.next_token()
                self._take_first = runtime.take_hint()
            if blocking and block is not None:
                take = await self._take_blocking(self._take_token, block)
            else:
                take = await runtime.store.take(
                    runtime.worker_id,
                    free,
                    self._take_token,
                    first=self._take_first,
                    skip=runtime.doubtful_partitions(),
                )
            self._take_token = None
            if take.lapsed:  # beat (the lease is in doubt), then take again at once
                runtime.forget_beats()
                self._next_due_ms = 0.0
            else:
                self._next_due_ms = take.next_due_ms
            for taken in take.taken:
                self._start(taken)
            if take.taken:
                if not EAGER:
                    # Before 3.12 the tasks start at the loop's next turn: let them, before
                    # the rest of this poll (its bookkeeping, the next wait's set-up).
                    await asyncio.sleep(0)
                # Their execution.started, written by the take: counted once the handlers
                # are under way, not between the take and them.
                METRICS.events_appended(len(take.taken))
        for job_id, t in list(self.tasks.items()):
            if t.done():
                del self.tasks[job_id]
                t.result()
        await self.heart_beat()

    async def _take_blocking(self, token: str, seconds: float) -> Take:
        runtime = self._runtime()
        assert self._not_blocking is not None
        self._not_blocking.clear()
        try:
            take = await runtime.store.take_blocking(runtime.worker_id, token, seconds)
        finally:
            self._not_blocking.set()
        return take

    def _start(self, taken: Taken) -> None:
        """Run a taken execution in a task of its own, holding one of the worker's slots:
        started at once, where Python can (`started_now`)."""
        self.job_counter += 1  # arq's semaphore is not used: the take counts the free slots
        task = started_now(self.loop, self._run_execution(taken))
        task.add_done_callback(lambda _: self._slot_freed())
        self.tasks[taken.execution_id] = task

    async def _run_execution(self, taken: Taken) -> None:
        """Run one taken execution, which the runtime ends with exactly one terminal event
        (that event clears everything the queue held of it): nothing is read back before,
        nothing is cleared after. Like arq, a failure is counted and logged here, not
        raised."""
        runtime = self._runtime()
        said = log.isEnabledFor(logging.DEBUG)  # a line per execution: at DEBUG only
        if said:
            fields = {"execution_id": taken.execution_id, "capability": taken.capability}
            log.debug(
                "execution_id=%s: running %s", taken.execution_id, taken.capability, extra=fields
            )
        try:
            ended = await runtime.run_taken(taken)
        except asyncio.CancelledError:  # the worker torn down: the sweeper ends it
            self.jobs_retried += 1
        except Exception:
            self.jobs_failed += 1
            log.exception(
                "execution_id=%s: its run failed",
                taken.execution_id,
                extra={"execution_id": taken.execution_id},
            )
        else:
            self.jobs_complete += 1
            if said:
                log.debug("execution_id=%s: ended %s", taken.execution_id, ended, extra=fields)

    def _runtime(self) -> WorkerRuntime:
        if self.runtime is None:
            raise RuntimeError("MajordomusWorker takes jobs only once its startup has run")
        return self.runtime

    @property
    def _waiting_in_redis(self) -> bool:
        """A blocking take of this worker's is out (`_take_blocking`)."""
        return self._not_blocking is not None and not self._not_blocking.is_set()

    def _slot_freed(self) -> None:
        """A slot freed (arq's semaphore is not used: only arq's `start_jobs` takes it).
        The poll loop is woken to fill it at once when the last take left due work behind
        (this worker was full); otherwise, where a worker with room waits in Redis, a
        loop waiting here (it was full) goes on to wait there, where the wake-ups of the
        starts made meanwhile are; elsewhere the next start's wake-up signal is enough.
        A loop already waiting in Redis is left to it: an idle queue costs no empty take
        per finished execution."""
        self.job_counter -= 1
        due = self._next_due_ms
        if self.runtime is None:
            return
        if due is not None and due <= clock.now() * 1000:
            self.runtime.wake.set()
        elif self.runtime.store.can_block and not self._waiting_in_redis:
            self._room_made = True
            self.runtime.wake.set()

    def handle_sig(self, signum: Any) -> None:
        sig = signal.Signals(signum)
        if not self.allow_pick_jobs:
            # A second signal: stop now.
            super().handle_sig(signum)
            return
        log.info("%s: taking no more work; %d running", sig.name, len(self.tasks))
        self.allow_pick_jobs = False
        if self.runtime is not None:
            self.runtime.accepting = False
        self.loop.create_task(self._stop_gracefully(sig))

    async def _stop_gracefully(self, sig: signal.Signals) -> None:
        runtime = self.runtime
        grace = runtime.settings.shutdown_grace if runtime else 0.0
        ends = self.loop.time() + grace
        if runtime is not None and self._not_blocking is not None and self._waiting_in_redis:
            # A take waiting in Redis takes nothing once marked; what it took before, this
            # worker runs as any other (cancelling it mid-answer would strand it `running`).
            # The running executions' grace runs meanwhile: the wait ends on its own time.
            with contextlib.suppress(Exception):
                await runtime.store.stop_blocking(runtime.worker_id)
            await within(grace, self.all_done())
            await within(BLOCK_MAX_SECONDS + 2, self._not_blocking.wait())
        await within(max(0.0, ends - self.loop.time()), self.all_done())
        if runtime is not None and runtime.running:
            log.info("grace over: cancelling %d executions", len(runtime.running))
            await runtime.cancel_all(by="server")
            await within(runtime.settings.cancel_grace + 1, self.all_done())
        for task in self.tasks.values():
            if not task.done():
                task.cancel()
        if self.main_task is not None:
            self.main_task.cancel()

    async def all_done(self) -> None:
        """Until every job this worker started has ended, those started meanwhile too."""
        while pending := [t for t in self.tasks.values() if not t.done()]:
            await asyncio.wait(pending)


def build_worker(cfg: Settings, redis: Any = None, **overrides: Any) -> Any:
    """A `MajordomusWorker` on `redis` (an ArqRedis, or None to connect from the settings),
    with arq's options `overrides`; `registry=` runs that registry's capabilities (the
    testing kit's) rather than the modules the settings name."""
    registry: Registry | None = overrides.pop("registry", None)
    # arq logs each job's start and end at INFO; its warnings and errors still show.
    logging.getLogger("arq.worker").setLevel(logging.WARNING)
    options = worker_options(cfg)
    options.update(overrides)
    if redis is None:
        redis = connect(cfg.redis_url, arq=True)
    ctx: dict[str, Any] = {"settings": cfg}
    if registry is not None:
        ctx["majordomus_registry"] = registry
    return MajordomusWorker(redis_pool=redis, ctx=ctx, **options)
