"""Every Redis key majordomus writes, built in this one module, arq's included.

Every key starts with the prefix (`MAJORDOMUS_KEY_PREFIX`), so deployments with different
prefixes share a database without sharing a key. Of arq's keys only two remain, named
here: the queue and the worker's health record. arq's job, in-progress, retry, result and
abort keys are never written: an execution's snapshot is its job, `take.lua` takes and
starts it in one step (so there is no in-progress mark to keep), majordomus keeps no
result beside the snapshot and cancels through its own `cancelling`. Keys of one
execution share the hash tag `{<execution id>}`, so a Redis Cluster keeps them in one slot. The indexes (all
executions, by state, finished) and the global feed are process-wide keys; the scripts that
touch both an execution and an index are therefore single-node (or Sentinel) operations,
which is what majordomus is deployed on today.
"""

from __future__ import annotations


class Keys:
    def __init__(self, prefix: str = "md") -> None:
        self.prefix = prefix
        # The ready queue (arq's name for it): what can run now, scored by its place in line
        # (when it became ready, less its priority's head start, `majordomus.priorities`).
        self.queue = f"{prefix}:queue"
        # Executions due later, scored by when (epoch ms); the take moves each into the ready
        # queue when it is due, so waiting costs no worker and no traffic.
        self.delayed = f"{prefix}:queue:delayed"
        # arq's worker health record (what `arq --check` reads), named as arq names it.
        self.health_check = f"{prefix}:queue:health-check"
        self.all = f"{prefix}:idx:all"
        self.created_counter = f"{prefix}:idx:all:counter"
        self.queued = f"{prefix}:idx:queued"
        self.running = f"{prefix}:idx:running"
        self.finished = f"{prefix}:idx:finished"
        self.feed = f"{prefix}:feed"
        self.workers = f"{prefix}:workers"
        self.wake_channel = f"{prefix}:wake"
        self.cancel_channel = f"{prefix}:cancel"
        # The one sweeper at a time, across every worker and API process.
        self.sweeper_lock = f"{prefix}:sweeper"
        # Open and detached episodes by external id, scored by when the reaper may close
        # each (epoch ms); closed records by their key, scored by when they closed.
        self.episodes = f"{prefix}:episodes"
        self.episodes_closed = f"{prefix}:episodes:closed"

    def snapshot(self, execution_id: str) -> str:
        return f"{self.prefix}:x:{{{execution_id}}}"

    def events(self, execution_id: str) -> str:
        return f"{self.prefix}:x:{{{execution_id}}}:events"

    def secret_input(self, execution_id: str) -> str:
        return f"{self.prefix}:x:{{{execution_id}}}:input"

    def execution_keys(self, execution_id: str) -> list[str]:
        return [
            self.snapshot(execution_id),
            self.events(execution_id),
            self.secret_input(execution_id),
        ]

    def idempotency(self, key: str) -> str:
        """An idempotency key's holder ("<execution id> <fingerprint>"), kept the retention."""
        return f"{self.prefix}:idem:{key}"

    def worker(self, worker_id: str) -> str:
        return f"{self.prefix}:worker:{worker_id}"

    def worker_running(self, worker_id: str) -> str:
        """The executions a worker holds (running or cancelling): added by the claim and
        removed by the terminal event, in `append.lua`, so finding a dead worker's
        executions reads this set, never every execution."""
        return f"{self.prefix}:worker:{worker_id}:running"

    def worker_take(self, worker_id: str) -> str:
        """A worker's last take (its token and the ids it started), so that the take sent
        again after a lost answer answers the same executions (`take.lua`)."""
        return f"{self.prefix}:worker:{worker_id}:take"

    def lease(self, worker_id: str) -> str:
        return f"{self.prefix}:lease:{worker_id}"

    def concurrency(self, capability: str) -> str:
        return f"{self.prefix}:conc:{capability}"

    def waiting(self, capability: str) -> str:
        """Executions held back by the capability's `max_concurrency`, scored by when they
        were queued: out of the queue, so waiting costs no worker and no traffic; the
        terminal event of a slot holder moves the oldest back into the queue."""
        return f"{self.prefix}:conc:{capability}:waiting"

    def episode(self, external_id: str) -> str:
        return f"{self.prefix}:ep:{{{external_id}}}"

    def episode_lease(self, external_id: str) -> str:
        return f"{self.prefix}:ep:{{{external_id}}}:lease"

    def episode_closed(self, external_id: str, closed_ms: int) -> str:
        """The record an episode becomes when it closes, kept for the retention time."""
        return f"{self.prefix}:ep:{{{external_id}}}:closed:{closed_ms}"

    # -- schedules (`majordomus.store.schedules`) ---------------------------------------------

    @property
    def schedules(self) -> str:
        """Every schedule's id, scored by when it was first stored (epoch ms)."""
        return f"{self.prefix}:schedules"

    @property
    def schedules_version(self) -> str:
        """A counter every change of a schedule (not its ticks) increments: a ticker reads it
        at each wake and reloads the schedules when it moved."""
        return f"{self.prefix}:schedules:version"

    def schedule(self, schedule_id: str) -> str:
        """One schedule: its definition, origin, pause and last tick (`store/schedules.py`)."""
        return f"{self.prefix}:sched:{{{schedule_id}}}"

    # -- MCP tasks (`majordomus.store.tasks`) -------------------------------------------------

    def task(self, execution_id: str) -> str:
        """The MCP task an execution backs: its id secret's hash, its owner and its tool. It
        shares the execution's hash tag, so a task and its execution are read in one round
        trip on one node, and on a Redis Cluster in one slot."""
        return f"{self.prefix}:task:{{{execution_id}}}"

    def owner_tasks(self, owner: str) -> str:
        """The tasks one owner (an episode, a bearer token's hash) created, newest last,
        scored by creation (epoch ms): what `majordomus://tasks` lists."""
        return f"{self.prefix}:tasks:{{{owner}}}"
