"""The arq worker, with a wake-up signal in place of arq's fixed 0.5 s poll.

arq finds work by polling its queue every `poll_delay`. `MajordomusWorker` keeps arq's job
handling as it is and replaces only the wait between polls: it sleeps until a wake-up
signal (published by every start, and set when a slot frees), the next deferred job is
due, or the long-poll fallback passes. So a start is picked up within milliseconds and an
idle worker makes one small query a second. SIGTERM stops taking work, lets running
executions finish for `MAJORDOMUS_SHUTDOWN_GRACE`, then cancels them (`by: "server"`).
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
from workers.runtime import WorkerRuntime

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
        runtime = self.runtime
        if runtime is None:
            await super().start_jobs(job_ids)
            return
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
                score = await runtime.store.take_job(self.queue_name, job_id, in_progress_ms)
            except BaseException:  # Redis away: give the slot back, the poll loop retries
                self.job_counter -= 1
                self.sem.release()
                raise
            if not isinstance(score, int):  # taken elsewhere, stale, or waiting for a slot
                self.job_counter -= 1
                self.sem.release()
                continue
            task = self.loop.create_task(self.run_job(job_id, score))
            task.add_done_callback(lambda _: self._release_sem_dec_counter_on_complete())
            self.tasks[job_id] = task

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
