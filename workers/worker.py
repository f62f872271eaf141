"""The arq worker, with a wake-up signal in place of arq's fixed 0.5 s poll.

arq finds work by polling its queue every `poll_delay`. `MajordomusWorker` keeps arq's poll
loop, its counters, health record and signal handling, and replaces the wait between
polls: it sleeps until a wake-up signal (published by every start, and set when a slot
frees), the next deferred job is due, or the long-poll fallback passes. So a start is
picked up within milliseconds and an idle worker makes one small query a second. SIGTERM
stops taking work, lets running executions finish for `MAJORDOMUS_SHUTDOWN_GRACE`, then
cancels them (`by: "server"`).

It also runs the jobs itself (`_run_execution`, in place of arq's `run_job`,
`finish_job` and `finish_failed_job`): arq's build every key from its module constants
(`arq:job:<id>`, `arq:retry:<id>`, `arq:abort`, ...), one set for the whole process,
which would put every deployment's jobs under the same names whatever its
`MAJORDOMUS_KEY_PREFIX`. Ours go through the store and its `Keys`, so a worker touches
only its own prefix's keys, and several prefixes can run in one process. Majordomus has
one job, `run_execution`, and needs none of what arq's runner adds around it (retries,
results, aborts, its timeout, per-job hooks), so this is a handful of lines, not a copy.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from typing import Any

from arq.connections import create_pool
from arq.worker import Worker

from majordomus.loops import Failures, within
from majordomus.store.queue import RUN_EXECUTION, Taken
from workers.runtime import WorkerRuntime
from workers.settings import MAJORDOMUS_WORKER

log = logging.getLogger("majordomus.worker")


class MajordomusWorker(Worker):
    runtime: WorkerRuntime | None = None

    async def main(self) -> None:
        if self._pool is None:
            self._pool = await create_pool(
                self.redis_settings,
                job_deserializer=self.job_deserializer,
                job_serializer=self.job_serializer,
                default_queue_name=self.queue_name,
                expires_extra_ms=self.expires_extra_ms,
            )
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
        while True:
            runtime.wake.clear()
            try:
                if runtime.lease_in_doubt:  # back from an outage: renew before taking work
                    await runtime.beat()
                await self._poll_iteration()
                if (
                    self.burst
                    and not self.tasks
                    and not await runtime.store.queue_length(self.queue_name)
                ):
                    return
                timeout = await self._next_wait(runtime, runtime.settings.poll_seconds)
            except Exception as exc:  # noqa: BLE001
                failures.failed(exc)
                timeout = failures.backoff()
            else:
                failures.recovered()
            await within(timeout, runtime.wake.wait())

    async def _next_wait(self, runtime: WorkerRuntime, fallback: float) -> float:
        """Until the next deferred job is due, or the fallback; never a busy loop."""
        head_ms = await runtime.store.queue_head_ms(self.queue_name)
        if head_ms is None:
            return fallback
        due_in = (head_ms - time.time() * 1000) / 1000
        # A due job that was not started is running elsewhere, or we are full: a finishing
        # job or a new start wakes us.
        return fallback if due_in <= 0 else min(due_in, fallback)

    async def start_jobs(self, job_ids: list[bytes]) -> None:
        """arq's own loop over the polled job ids, but cheaper per job, which is what bounds
        a busy worker's rate: taking a job is one atomic script (`take_job`) instead of a
        WATCH/MULTI transaction of four round trips, and it takes the job off the queue, so
        the queue holds only work that can run: no poll reads a running job again, and a
        job held back by `max_concurrency` waits in its capability's list, not here."""
        runtime = self._runtime()
        in_progress_ms = int(self.in_progress_timeout_s * 1000)
        for raw_id in job_ids:
            job_id = raw_id.decode()
            mine = self.tasks.get(job_id)
            if mine is not None and not mine.done():
                continue
            await self.sem.acquire()
            if self.job_counter >= self.max_jobs:
                self.sem.release()
                return
            self.job_counter += 1
            try:
                taken = await runtime.store.take_job(self.queue_name, job_id, in_progress_ms)
            except BaseException:  # Redis away: give the slot back, the poll loop retries
                self.job_counter -= 1
                self.sem.release()
                raise
            if not isinstance(taken, Taken):  # taken elsewhere, stale, or waiting for a slot
                self.job_counter -= 1
                self.sem.release()
                continue
            task = self.loop.create_task(self._run_execution(job_id, taken))
            task.add_done_callback(lambda _: self._release_sem_dec_counter_on_complete())
            self.tasks[job_id] = task

    async def _run_execution(self, job_id: str, taken: Taken) -> None:
        """Run one taken job, what arq's `run_job` and `finish_job` do for it, with one round
        trip, after the run (arq's spend two: one reads the job back and counts a try, one
        finishes it). The job is `run_execution(id, capability)`, its id the execution's,
        and the take answered the capability: nothing is read back. The runtime ends the
        execution with exactly one terminal event, which clears the job's keys; the finish
        clears what a run that did not end it leaves (a worker torn down mid-run: the
        sweeper fails the execution, or puts it back in the queue if it was never claimed).
        Like arq, a failure is counted and logged here, not raised, unless the finish
        itself fails (Redis away), which reaches the poll loop."""
        runtime = self._runtime()
        function = self.functions[RUN_EXECUTION]
        ctx = {**self.ctx, "job_id": job_id, "score": taken.score}
        try:
            await function.coroutine(ctx, job_id, taken.capability)
        except asyncio.CancelledError:  # the worker torn down: arq's "will be run again"
            self.jobs_retried += 1
        except Exception:
            self.jobs_failed += 1
            log.exception("execution_id=%s: its job failed", job_id)
        else:
            self.jobs_complete += 1
        await asyncio.shield(runtime.store.finish_job(job_id))

    def _runtime(self) -> WorkerRuntime:
        if self.runtime is None:
            raise RuntimeError("MajordomusWorker takes jobs only once its startup has run")
        return self.runtime

    # arq's own job runner and abort handling name arq's process-wide keys: never used here
    # (`_run_execution` runs jobs; cancels go through the execution's `cancelling`).

    async def run_job(self, job_id: str, score: int) -> None:
        raise NotImplementedError("MajordomusWorker runs jobs with _run_execution")

    async def finish_job(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError("MajordomusWorker finishes jobs in _run_execution")

    async def finish_failed_job(self, job_id: str, result_data: bytes | None) -> None:
        raise NotImplementedError("MajordomusWorker finishes jobs in _run_execution")

    async def _cancel_aborted_jobs(self) -> None:
        raise NotImplementedError("no allow_abort_jobs: majordomus cancels executions")

    def _release_sem_dec_counter_on_complete(self) -> None:
        super()._release_sem_dec_counter_on_complete()
        if self.runtime is not None:
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
        await within(grace, self.all_done())
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
