"""The queue as majordomus uses it: taking work, and the concurrency slots.

The queue is one sorted set of execution ids, scored by when each is due (epoch ms), which
the start (`create.lua`) adds to and a worker takes from. Taking is one atomic script
(`take.lua`) that polls, takes and starts a batch of executions at once, answering what
the worker needs to run each (its capability and worker-only input), so nothing is read
back and no job record is kept beside the execution: the snapshot is the job. This module
also answers the reads of a worker's poll loop and keeps the cluster-wide concurrency
slots of capabilities with a `max_concurrency`. It does not run executions; `workers/`
does.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Collection, Sequence
from typing import Any, NamedTuple

from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

from majordomus import clock
from majordomus.clock import now_stamp
from majordomus.config import Settings
from majordomus.store.base import StoreBase
from majordomus.store.cluster import is_cluster
from majordomus.store.connect import RedisClient, is_in_process
from majordomus.store.failures import UNREACHABLE
from majordomus.store.keys import SCRIPT_KEY_NAMES, Partition
from majordomus.store.policy import blocking_reads

log = logging.getLogger("majordomus.store")

RUN_EXECUTION = "run_execution"
"""The name of the one arq function a majordomus worker registers (arq wants one)."""

BLOCK_MAX_SECONDS = 5.0
"""The longest a blocking take waits (below the client's socket timeout, so a wait is never
taken for a dead connection)."""

STOPPING_KEPT_MS = 600_000
"""How long a stopping worker's mark is kept (longer than any shutdown grace)."""

SILENT_PARTITION_SECONDS = 3.0
"""How long takes pass by a partition whose Redis did not answer one (then it is asked
again, with the token of its unanswered take)."""
TAKE_KEPT_SECONDS = 24 * 3600
"""How long a worker's last take is kept for answering it again (`take.lua`): longer than
any outage a worker waits through. The worker sends a take whose answer was lost again as
soon as Redis answers, however long that took, and the sweeper may meanwhile have failed
what it started (its lease lapsed), which the answer then leaves out; a key kept only a
lease or two would, after a longer outage, leave them `running` on a worker that renewed
its lease and knows nothing of them. One key per worker, replaced by each take that
started something, deleted when the worker is forgotten."""


class Taken(NamedTuple):
    """An execution a worker took and started: what it needs to run it."""

    execution_id: str
    capability: str
    secret: bytes | None
    """Its worker-only input (the input with secrets), None if it had none; sealed when
    keys are configured (the worker opens it: `Store.sealer`)."""
    sequence: int
    """The sequence of its `execution.started`."""
    timeout_ms: int | None = None
    """Its start's own timeout, shorter than its capability's (None: the capability's)."""


class Take(NamedTuple):
    """What one take answered."""

    taken: list[Taken]
    next_due_ms: float | None
    """When the queue's first entry is due (epoch ms), after the take; None when empty."""
    lapsed: bool = False
    """The worker's lease had lapsed: nothing was taken (beat, then take again)."""


class QueueStore(StoreBase):
    def __init__(self, redis: RedisClient, settings: Settings) -> None:
        super().__init__(redis, settings)
        self._release = self.script("release_slot.lua", SCRIPT_KEY_NAMES)
        # One text per partition, its keys and settings as constants (`scripts`).
        self._takes = [self._take_script(part) for part in self.keys.partitions]
        self._key_upkeeps = [
            self.partition_script("key_upkeep.lua", part, {}) for part in self.keys.partitions
        ]
        self._turn = 0
        self._unanswered: dict[int, str] = {}
        """Per partition, the token of a take whose Redis did not answer (`take`)."""
        self._silent: dict[int, float] = {}
        """Per partition that did not answer a take, until when takes pass it by."""

    def _take_script(self, part: Partition) -> AsyncScript:
        return self.partition_script("take.lua", part, {
            "TAKE_TTL": str(TAKE_KEPT_SECONDS * 1000),
        })  # fmt: skip

    async def take(
        self,
        worker: str,
        count: int,
        token: str,
        first: str | None = None,
        skip: Collection[int] = (),
    ) -> Take:
        """Take up to `count` due executions off the queue and start them on `worker`
        (`take.lua`): one trip per partition visited, starting from the next partition in
        turn and going on while there is room, so every partition is served alike.
        `token` (from `next_token`) makes the call safe to send again: a take whose answer
        was lost, sent with the same token, answers the executions its first send started
        (each partition keeps its last take), so pass the same token until a take answers;
        the turn moves on only when one did.

        `first`, an execution a wake-up named, has the take visit its partition alone
        (where work is known to be), so an idle worker of N partitions starts new work
        after one trip, not N; its answer says work is due now (`next_due_ms`) when there
        was room left, so the worker takes again at once, from every partition. The
        partitions of `skip` (their lease in doubt) are passed by, and so is one whose Redis
        did not answer a take lately."""
        parts = self.keys.partitions
        start, visits = self._turn % len(parts), len(parts)
        if first is not None and len(parts) > 1:
            with contextlib.suppress(ValueError):  # not an id (a wake of an older release)
                start, visits = parts.index(self.keys.partition_of(first)), 1
        taken: list[Taken] = []
        heads: list[float] = []
        now = time.monotonic()
        for step in range(visits):
            part = parts[(start + step) % len(parts)]
            if len(parts) > 1 and (self._silent.get(part.index, 0.0) > now or part.index in skip):
                continue  # not answering lately, or its lease in doubt: the others go on
            mine = self._unanswered.get(part.index, token)
            try:
                one = await self._take_from(part, worker, count - len(taken), mine)
            except UNREACHABLE:
                if len(parts) == 1 or not is_cluster(self.redis):
                    raise  # one Redis: every partition shares its fate, the take failed
                # Its partition's Redis did not answer: what the take may have started there
                # is answered to the same token, sent when it answers again; until then the
                # other partitions are taken from (a stalled shard costs its own partition).
                self._unanswered[part.index] = mine
                self._silent[part.index] = time.monotonic() + SILENT_PARTITION_SECONDS
                log.warning(
                    "partition %d of Redis did not answer a take: taking from the others "
                    "for %g s", part.index, SILENT_PARTITION_SECONDS,
                )
                continue
            self._unanswered.pop(part.index, None)
            self._silent.pop(part.index, None)
            if one.lapsed:
                return one
            taken.extend(one.taken)
            if one.next_due_ms is not None:
                heads.append(one.next_due_ms)
            if len(taken) >= count:
                break
        self._turn = start + 1
        if visits < len(parts) and len(taken) < count:
            heads.append(clock.now() * 1000)  # the other partitions are yet to be seen
        return Take(taken, min(heads) if heads else None)

    @property
    def can_block(self) -> bool:
        """Whether `take_blocking` works here: one partition on one Redis (a Redis Cluster
        client sends a pipeline's commands node by node, so the take could not follow the
        pop on its connection; several partitions would need a pop of several slots), and
        not in-process fakeredis, whose `BLMOVE` does not block (2.41 answers nil at once
        when the list is missing, as `LMOVE` does): a worker waiting there would spin."""
        return (
            len(self.keys.partitions) == 1
            and not is_cluster(self.redis)
            and not is_in_process(self.redis)
        )

    async def take_blocking(self, worker: str, token: str, seconds: float) -> Take:
        """Wait up to `seconds` for a start, then take it (at most one): a blocking pop of
        the wake-up list and the take (`take.lua`) sent in one write, so Redis runs the take
        the moment the pop is served, with no round trip to the worker in between, and the
        worker hears of the start and gets it in one message. The take takes only when the
        pop got a wake-up (one that timed out takes nothing, and answers when work is due)
        and not once `stop_blocking` marked the worker stopping. Only where `can_block`.

        One at most: an idle worker takes more with its next, plain, take at once (the
        answer says work is due); a take that waits is carried out later than it was sent,
        and should its worker be cut off meanwhile, what it started waits for its answer."""
        part = self.keys.partitions[0]
        woken, stopping = part.worker_woken(worker), part.worker_stopping(worker)
        keys, args = self._take_call(part, worker, 1, token, stamp="")
        seconds = max(0.01, min(seconds, BLOCK_MAX_SECONDS))
        with blocking_reads(seconds * 1000):
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.execute_command("BLMOVE", part.wakeup, woken, "LEFT", "LEFT", f"{seconds:.3f}")
                pipe.execute_command("EVALSHA", self._takes[0].sha, len(keys), *keys, *args, woken, stopping)
                try:
                    _, answer = await pipe.execute()
                except NoScriptError:  # Redis lost its scripts (restarted): load, take plainly
                    return await self._take_from(part, worker, 1, token)
        return self._answer(answer)

    async def stop_blocking(self, worker: str) -> None:
        """Mark the worker stopping: a blocking take of its that is waiting takes nothing,
        and gives the wake-up it gets to another worker."""
        part = self.keys.partitions[0]
        await self.redis.set(part.worker_stopping(worker), 1, px=STOPPING_KEPT_MS)

    def _take_call(
        self, part: Partition, worker: str, count: int, token: str, stamp: str | None = None
    ) -> tuple[list[str], list[str | int]]:
        keys = [part.worker_running(worker), part.lease(worker), part.worker_take(worker)]
        args: list[str | int] = [count, worker, now_stamp()[0] if stamp is None else stamp, token]
        return keys, args

    async def _take_from(self, part: Partition, worker: str, count: int, token: str) -> Take:
        keys, args = self._take_call(part, worker, count, token)
        return self._answer(await self._takes[part.index](keys=keys, args=args))

    @staticmethod
    def _answer(answer: Any) -> Take:
        if answer in (b"lapsed", "lapsed"):
            return Take([], None, lapsed=True)
        head, rest = answer[0], answer[1:]
        taken = [
            Taken(
                _text(rest[i]),
                _text(rest[i + 1]),
                rest[i + 2] or None,
                int(rest[i + 3]),
                int(rest[i + 4]) if rest[i + 4] else None,
            )
            for i in range(0, len(rest), 5)
        ]
        return Take(taken, float(head) if head else None)

    async def ready_count(self) -> int:
        """How many executions can run now, in every partition's ready queue."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for part in self.keys.partitions:
                pipe.zcard(part.queue)
            return sum(int(n) for n in await pipe.execute())

    # -- concurrency slots --------------------------------------------------------------

    def _slot_expiry(self) -> tuple[int, int]:
        """(now, when a slot taken or renewed now runs out), epoch ms: a lease's length on."""
        _, ms = now_stamp()
        return ms, ms + int(self.settings.lease_seconds * 1000)

    async def release_slot(self, capability: str, execution_id: str, limit: int) -> int:
        """Free a slot (the holder's terminal event does this itself; this is for a holder
        that ends without one) and move the oldest waiting executions into the queue while
        slots are free; with `execution_id` '' it only promotes. Answers how many moved."""
        part = self.keys.partition_of_capability(capability)
        moved = await self._release(
            keys=[part.concurrency(capability), part.waiting(capability), part.queue],
            args=[execution_id, limit, self.keys.wake_channel, part.base],
        )
        return int(moved)

    async def waiting_count(self, capability: str) -> int:
        """How many executions wait for one of the capability's slots."""
        part = self.keys.partition_of_capability(capability)
        return int(await self.redis.zcard(part.waiting(capability)))

    async def waiting_counts(self, capabilities: Sequence[str]) -> list[int]:
        """How many executions wait for a slot of each capability, in one round trip."""
        if not capabilities:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for capability in capabilities:
                pipe.zcard(self.keys.partition_of_capability(capability).waiting(capability))
            return [int(n) for n in await pipe.execute()]

    async def renew_slots(
        self, held: Sequence[tuple[str, str]], keyed: Sequence[tuple[str, str, str]] = ()
    ) -> None:
        """Renew the leases of the slots a worker's running executions hold: `held`, (capability,
        id) of a capability's `max_concurrency`; `keyed`, (capability, key, id) of a key's
        (`per_key`, kept in the execution's partition)."""
        if not held and not keyed:
            return
        _, expiry = self._slot_expiry()
        async with self.redis.pipeline(transaction=False) as pipe:
            for capability, execution_id in held:
                part = self.keys.partition_of_capability(capability)
                pipe.zadd(part.concurrency(capability), {execution_id: expiry}, xx=True)
            for capability, key, execution_id in keyed:
                part = self.keys.partition_of(execution_id)
                pipe.zadd(part.key_slots(capability, key), {execution_id: expiry}, xx=True)
            await pipe.execute()

    # -- the slots of keys (`per_key`, `majordomus.flow`) -----------------------------------

    async def key_upkeep(self, capability: str, limit: int) -> int:
        """In every partition, move the next waiting executions of up to 64 of the
        capability's keys to the queue while their slots are free (`key_upkeep.lua`: for
        slots that ran out without a terminal event). Answers how many moved."""
        moved = 0
        for part, script in zip(self.keys.partitions, self._key_upkeeps, strict=True):
            moved += int(await script(keys=[part.keys_waiting(capability)], args=[capability, limit]))
        return moved

    async def key_waiting_counts(
        self, capabilities: Sequence[str], most_keys: int = 1000, busiest: int = 5
    ) -> list[tuple[int, int, list[tuple[str, int]]]]:
        """For each capability declaring `per_key`: (how many executions wait for a slot of
        their key, over how many keys, the `busiest` keys with how many each), reading up to
        `most_keys` keys of each partition."""
        found: list[tuple[int, int, list[tuple[str, int]]]] = []
        for capability in capabilities:
            waiting = keys = 0
            each: list[tuple[str, int]] = []
            for part in self.keys.partitions:
                names = await self.redis.execute_command(
                    "SRANDMEMBER", part.keys_waiting(capability), most_keys
                )
                if not names:
                    continue
                keys += len(names)
                async with self.redis.pipeline(transaction=False) as pipe:
                    for name in names:
                        pipe.zcard(part.key_waiting(capability, _text(name)))
                    counts = [int(n) for n in await pipe.execute()]
                waiting += sum(counts)
                each += [(_text(name), n) for name, n in zip(names, counts, strict=True) if n]
            each.sort(key=lambda pair: (-pair[1], pair[0]))
            found.append((waiting, keys, each[:busiest]))
        return found


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
