"""The executions' Redis: snapshots, event streams, indexes and retention; and `Store`.

Per execution: a snapshot hash and an event stream capped at exactly 500 entries whose
entry ids are the sequences (`<seq>-0`), so a page is one `XRANGE` from the cursor. Every
write that must be atomic (create + enqueue, append + move + fold) is a Lua script from
`lua/`, loaded once; both also write the global feed, which `majordomus.store.feed` reads.

`Store` is what the engine and the workers hold: these executions together with the queue,
the workers' presence, the feed and the signals, one class per concept in its own module.
What is not about executions lives there, not here.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from majordomus.config import LIMITS, Settings
from majordomus.priorities import HEAD_START
from majordomus.store.base import StoreBase
from majordomus.store.clock import now_stamp, stamp_of
from majordomus.store.connect import RedisClient
from majordomus.store.feed import FeedStore
from majordomus.store.queue import QueueStore
from majordomus.store.signals import SignalStore
from majordomus.store.workers import WorkerStore


@dataclass(frozen=True)
class AppendResult:
    found: bool
    applied: int
    requested: int
    last_sequence: int
    state: str

    @property
    def complete(self) -> bool:
        return self.found and self.applied == self.requested


@dataclass(frozen=True)
class RawPage:
    state: str
    last_sequence: int
    events: list[bytes]
    more: bool
    truncated: bool


@dataclass(frozen=True)
class StartPlan:
    """How the store enqueues a new execution (`ExecutionStore.create`)."""

    due_ms: int | None = None
    """When it is due (epoch ms); None or past: now."""
    priority: str = "normal"
    idempotency_key: str | None = None
    fingerprint: str = ""
    """What the key's holder was started with (capability and input), to tell a repeat
    from a different start under the same key."""
    schedule: str | None = None
    retry_of: str | None = None
    attempts_before: int = 0


NOW = StartPlan()


@dataclass(frozen=True)
class Created:
    """What a create answered."""

    ahead: int
    created_at: str
    held_by: str | None = None
    """The execution that already holds the idempotency key (nothing was created)."""
    held_fingerprint: str = ""


EventWrite = tuple[str, bytes]
"""An event to append: its type and its `data` as JSON bytes (b'' for none)."""


class ExecutionStore(StoreBase):
    def __init__(self, redis: RedisClient, settings: Settings) -> None:
        super().__init__(redis, settings)
        self._append = self.script("append.lua")
        self._create = self.script("create.lua")
        self._token_prefix = os.urandom(6).hex()
        self._tokens = itertools.count(1)

    def next_token(self) -> str:
        """A token no other append of any process carries (a random prefix and a count)."""
        return f"{self._token_prefix}.{next(self._tokens)}"

    # -- writes -------------------------------------------------------------------------

    async def create(
        self,
        execution_id: str,
        *,
        capability: str,
        title: str,
        input_json: bytes,
        created_data: bytes,
        secret_json: bytes | None,
        cancellable: bool,
        actor: str,
        episode: str | None,
        max_concurrency: int | None = None,
        plan: StartPlan = NOW,
    ) -> Created:
        """Create and enqueue, as `plan` says (due time, priority, idempotency key, links);
        answers how many were queued ahead of it and when it was created, or the execution
        that holds its idempotency key."""
        k = self.keys
        stamp, ms = now_stamp()
        due_ms = plan.due_ms if plan.due_ms is not None and plan.due_ms > ms else 0
        aging_ms = int(self.settings.priority_aging_seconds * 1000)
        keys = [
            k.snapshot(execution_id),
            k.events(execution_id),
            k.feed,
            k.all,
            k.queued,
            k.secret_input(execution_id),
            k.queue,
            k.created_counter,
            k.delayed,
            k.idempotency(plan.idempotency_key) if plan.idempotency_key else "",
            k.snapshot(plan.retry_of) if plan.retry_of else "",
        ]
        args: list[bytes | str | int | float] = [
            execution_id,
            stamp,
            ms,
            self.settings.feed_max_events,
            capability,
            title,
            input_json,
            "1" if cancellable else "0",
            actor,
            episode or "",
            secret_json or b"",
            self.settings.retain_seconds * 1000,
            created_data,
            k.wake_channel,
            max_concurrency or 0,
            due_ms,
            stamp_of(due_ms) if due_ms else "",
            plan.priority,
            HEAD_START[plan.priority] * aging_ms,
            plan.fingerprint,
            k.prefix,
            plan.schedule or "",
            plan.retry_of or "",
            plan.attempts_before,
            plan.idempotency_key or "",
        ]
        answer = await self._create(keys=keys, args=args)
        code = int(answer[0])
        if code == -2:
            return Created(0, stamp, held_by=_text(answer[1]), held_fingerprint=_text(answer[2]))
        if code < 0:
            raise RuntimeError(f"execution id {execution_id} already exists")
        return Created(code, stamp)

    def _append_call(
        self,
        execution_id: str,
        events: Sequence[EventWrite],
        worker: str | None,
        read_secret: bool = False,
        token: str | None = None,
        lapsed: str | None = None,
    ) -> tuple[list[str], list[Any]]:
        k = self.keys
        stamp, ms = now_stamp()
        keys = [
            k.snapshot(execution_id),
            k.events(execution_id),
            k.feed,
            k.queued,
            k.running,
            k.finished,
            k.secret_input(execution_id),
            k.queue,
            k.delayed,
        ]
        args: list[Any] = [
            execution_id,
            stamp,
            ms,
            self.settings.retain_seconds,
            self.settings.feed_max_events,
            worker or "",
            k.cancel_channel,
            LIMITS.stream_events,
            len(events),
            "1" if read_secret else "0",
            k.prefix,
            k.wake_channel,
            LIMITS.steps,
            token or "",
            k.lease(lapsed) if lapsed else "",
        ]
        for event_type, data in events:
            args.append(event_type)
            args.append(data)
        return keys, args

    async def append(
        self,
        execution_id: str,
        events: Sequence[EventWrite],
        worker: str | None = None,
        *,
        token: str | None = None,
        if_lapsed: str | None = None,
    ) -> AppendResult:
        """Append events in order, in one atomic step; stops at the first refused one.

        `token` (from `next_token`): the append is tokened (append.lua), so the same call
        sent again (the client's retry after a lost answer, or the caller's with the same
        token) is answered as the first and changes nothing. The writers of one execution's
        reports and claim pass one (they write its non-state events, which nothing else
        would refuse twice); the token kept is the last one of those.
        `if_lapsed`: a worker id; nothing is appended (the answer is a refusal) while that
        worker's lease holds, checked in the same atomic step (the sweeper's failures).
        """
        keys, args = self._append_call(execution_id, events, worker, token=token, lapsed=if_lapsed)
        raw = await self._append(keys=keys, args=args)
        return _append_result(raw, len(events))

    async def claim(self, execution_id: str, worker: str) -> tuple[AppendResult, bytes | None]:
        """Move queued -> running for this worker and read the worker-only input, in one trip
        (tokened like `append(token=...)`: a repeated send is not refused as a second claim)."""
        keys, args = self._append_call(
            execution_id,
            [("execution.started", b"")],
            worker,
            read_secret=True,
            token=self.next_token(),
        )
        raw = await self._append(keys=keys, args=args)
        secret = raw[4] if len(raw) > 4 else None
        return _append_result(raw, 1), secret

    # -- reads --------------------------------------------------------------------------

    async def snapshot(self, execution_id: str) -> dict[bytes, bytes] | None:
        raw: dict[bytes, bytes] = await self.redis.hgetall(  # type: ignore[misc]
            self.keys.snapshot(execution_id)
        )
        return raw or None

    async def worker_input(self, execution_id: str) -> bytes | None:
        """An active execution's worker-only input (unredacted; deleted by its terminal
        event): what the sweeper starts a lost attempt's retry with before it fails it."""
        raw: bytes | None = await self.redis.get(self.keys.secret_input(execution_id))
        return raw

    async def snapshots(self, execution_ids: Sequence[str]) -> list[dict[bytes, bytes]]:
        async with self.redis.pipeline(transaction=False) as pipe:
            for execution_id in execution_ids:
                pipe.hgetall(self.keys.snapshot(execution_id))
            return list(await pipe.execute())

    async def states(self, execution_ids: Sequence[str]) -> list[str | None]:
        async with self.redis.pipeline(transaction=False) as pipe:
            for execution_id in execution_ids:
                pipe.hget(self.keys.snapshot(execution_id), "state")
            raw = await pipe.execute()
        return [r.decode() if r else None for r in raw]

    async def page(self, execution_id: str, after: int, limit: int) -> RawPage | None:
        """Events with sequence > after, oldest first, at most `limit`; None when unknown."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hmget(self.keys.snapshot(execution_id), ["state", "last_seq"])
            if limit > 0:
                pipe.xrange(self.keys.events(execution_id), f"({after}-0", "+", count=limit + 1)
            result = await pipe.execute()
        state, last = result[0]
        if state is None:
            return None
        last_seq = int(last)
        entries = result[1] if limit > 0 else []
        more = len(entries) > limit or (limit == 0 and last_seq > after)
        entries = entries[:limit]
        first_retained = max(1, last_seq - LIMITS.stream_events + 1)
        if entries:
            first_retained = int(entries[0][0].split(b"-", 1)[0])
        truncated = last_seq > after and after + 1 < first_retained
        return RawPage(
            state=state.decode(),
            last_sequence=last_seq,
            events=[fields[b"e"] for _, fields in entries],
            more=more,
            truncated=truncated,
        )

    async def ids_newest_first(
        self, count: int, older_than: float | None = None
    ) -> list[tuple[str, float]]:
        """Up to `count` execution ids, newest first, each with its place in the order of
        creation; only those created before the place `older_than`, when given. A place,
        not an offset: ids forgotten or added meanwhile shift no page."""
        top = "+inf" if older_than is None else f"({older_than!r}"
        raw = await self.redis.zrevrangebyscore(
            self.keys.all, top, "-inf", start=0, num=count, withscores=True
        )
        return [(member.decode(), float(score)) for member, score in raw]

    async def place_of(self, execution_id: str) -> float | None:
        """Where the execution stands in the order of creation, or None when unknown."""
        score = await self.redis.zscore(self.keys.all, execution_id)
        return None if score is None else float(score)

    async def counts(self) -> tuple[int, int]:
        """(queued, running-or-cancelling) across the whole cluster."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.zcard(self.keys.queued)
            pipe.zcard(self.keys.running)
            queued, running = await pipe.execute()
        return int(queued), int(running)

    async def running_ids(self) -> list[str]:
        return [r.decode() for r in await self.redis.zrange(self.keys.running, 0, -1)]

    async def queued_ids(self) -> list[tuple[str, int]]:
        raw = await self.redis.zrange(self.keys.queued, 0, -1, withscores=True)
        return [(r.decode(), int(score)) for r, score in raw]

    async def read_stream_after(self, execution_id: str, after: int, block_ms: int) -> list[bytes]:
        """Events after `after`, waiting up to `block_ms` for the first (for long polls)."""
        raw = await self.redis.xread(
            {self.keys.events(execution_id): f"{after}-0"}, count=LIMITS.page_events, block=block_ms
        )
        if not raw:
            return []
        return [fields[b"e"] for _, fields in raw[0][1]]

    # -- retention ----------------------------------------------------------------------

    async def prune(self) -> int:
        """Forget finished executions past the retention time or over the retention count."""
        k = self.keys
        _, ms = now_stamp()
        cutoff = ms - self.settings.retain_seconds * 1000
        old = await self.redis.zrangebyscore(k.finished, "-inf", cutoff)
        excess = await self.redis.zcard(k.finished) - self.settings.retain_executions
        if excess > 0:
            old = list({*old, *await self.redis.zrange(k.finished, 0, excess - 1)})
        if not old:
            return 0
        ids = [o.decode() for o in old]
        async with self.redis.pipeline(transaction=False) as pipe:
            for execution_id in ids:
                pipe.delete(*k.execution_keys(execution_id))
            pipe.zrem(k.finished, *ids)
            pipe.zrem(k.all, *ids)
            await pipe.execute()
        return len(ids)

    async def forget_missing(self, execution_ids: Sequence[str]) -> None:
        if execution_ids:
            await self.redis.zrem(self.keys.all, *execution_ids)

    # -- inspection ---------------------------------------------------------------------
    # Read-only views for `majordomus queue` and `majordomus workers`; nothing here writes.

    async def snapshot_fields(
        self, execution_ids: Sequence[str], fields: Sequence[str]
    ) -> list[list[bytes | None]]:
        """Some fields of many snapshots, in one round trip (None where a field is absent)."""
        if not execution_ids:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for execution_id in execution_ids:
                pipe.hmget(self.keys.snapshot(execution_id), list(fields))
            return list(await pipe.execute())

    async def recently_finished_ids(self, count: int) -> list[str]:
        """The ids of the last `count` executions to finish, newest first."""
        raw = await self.redis.zrevrange(self.keys.finished, 0, count - 1)
        return [r.decode() for r in raw]


def _append_result(raw: Any, requested: int) -> AppendResult:
    code, seq, state, applied = raw[:4]
    state_text = state.decode() if isinstance(state, bytes) else str(state)
    return AppendResult(int(code) >= 0, int(applied), requested, int(seq), state_text)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def encode(value: Any) -> bytes:
    return msgspec.json.encode(value)


class Store(ExecutionStore, QueueStore, WorkerStore, FeedStore, SignalStore):
    """Every store but the episodes', on one client: what the engine and the workers hold."""
