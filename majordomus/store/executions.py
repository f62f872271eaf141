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
import random
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
from redis.asyncio.client import Pipeline
from redis.commands.core import AsyncScript

from majordomus.clock import now_stamp, stamp_of
from majordomus.config import LIMITS, Settings
from majordomus.ids import new_execution_id
from majordomus.priorities import HEAD_START, tie_rank
from majordomus.store.base import StoreBase
from majordomus.store.batching import BatchedScript
from majordomus.store.cluster import is_cluster
from majordomus.store.connect import RedisClient
from majordomus.store.feed import FeedStore
from majordomus.store.keys import Partition
from majordomus.store.policy import blocking_reads
from majordomus.store.queue import QueueStore
from majordomus.store.rollup import RollupStore
from majordomus.store.signals import SignalStore
from majordomus.store.stored_format import EVENT_ENTRY, SNAPSHOT_LAYOUT
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
    timeout_ms: int | None = None
    """Its own timeout, when its start shortened its capability's."""
    search: tuple[tuple[str, str], ...] = ()
    """(member, value text) of each searchable input member it is indexed by
    (`majordomus.search`)."""
    collapse: tuple[str, str, int] | None = None
    """(kind, key, window ms) of its capability's debounce or throttle (`majordomus.flow`):
    a start of a key whose window is open is collapsed into the window's execution."""


NOW = StartPlan()


@dataclass(frozen=True)
class Created:
    """What a create answered."""

    ahead: int
    created_at: str
    held_by: str | None = None
    """The execution that already holds the idempotency key (nothing was created)."""
    held_fingerprint: str = ""
    collapsed_into: str | None = None
    """The execution of its key's open window that carries it (nothing was created)."""
    collapsed: int = 0
    """How many starts that execution now counts as collapsed into it, this one included."""
    replaced_due_at: str = ""
    """When the debounced execution whose input it replaced is due ('': none was replaced)."""
    args: Sequence[Any] = ()
    """The create's arguments (create.lua's ARGV), from which the snapshot it wrote is known
    without reading it back: its fields (`created_hash`) and its members (`created_members`,
    what a start answers)."""


_ENTRY = EVENT_ENTRY.encode()


def _envelopes(entries: Sequence[Any]) -> list[bytes]:
    """The stored envelope of each stream entry, as redis-py parses them (id, {field:
    value}) or as Redis sends them ([id, [field, value]]): an execution's entries have the
    one field `e`."""
    if entries and isinstance(entries[0][1], dict):
        return [fields[_ENTRY] for _, fields in entries]
    return [fields[1] for _, fields in entries]


class IdTaken(RuntimeError):
    """`create` was given the id of an execution that exists (not its own call sent again):
    ids carry 32 random bits a second, so at thousands of starts a second two draws meet now
    and then; the caller draws another (`Engine.start`)."""


Searched = tuple[str, str, str]
"""A search index: (capability, member, value text), `Partition.search`."""

EventWrite = tuple[str, bytes]
"""An event to append: its type and its `data` as JSON bytes (b'' for none)."""


class ExecutionStore(StoreBase):
    def __init__(self, redis: RedisClient, settings: Settings) -> None:
        super().__init__(redis, settings)
        # One text of each per partition, its keys and settings as constants (`scripts`).
        parts = self.keys.partitions
        self._appends = [BatchedScript(self.redis, self._append_script(p)) for p in parts]
        self._creates = [BatchedScript(self.redis, self._create_script(p)) for p in parts]
        self._page_callbacks: Any = None
        self._token_prefix = os.urandom(6).hex()
        self._tokens = itertools.count(1)

    def _create_script(self, part: Partition) -> AsyncScript:
        retain_ms = str(int(self.settings.retain_seconds * 1000))
        return self.partition_script(
            "create.lua", part, {"RETAIN_MS": retain_ms, "SEARCHED": part.searched}
        )

    def _append_script(self, part: Partition) -> AsyncScript:
        return self.partition_script("append.lua", part, {
            "RETAIN": str(self.settings.retain_seconds),
            "STREAM_MAX": str(LIMITS.stream_events),
            "STEPS_MAX": LIMITS.steps,
            "CANCEL": self.keys.cancel_channel,
        })  # fmt: skip

    def next_token(self) -> str:
        """A token no other append of any process carries (a random prefix and a count)."""
        return f"{self._token_prefix}.{next(self._tokens)}"

    # -- writes -------------------------------------------------------------------------

    def new_id(
        self,
        *,
        capped: str | None = None,
        keyed: tuple[str, str] | None = None,
        collapsed: tuple[str, str] | None = None,
        idempotency_key: str | None = None,
        retry_of: str | None = None,
        avoid: Collection[int] = (),
    ) -> str:
        """A fresh execution id, in the partition its start must be written in: a capped
        capability's (`capped`: its slots are kept there), else its key's (`keyed`:
        (capability, key) of a `per_key` limit, whose slots are kept there), else its
        collapse's (`collapsed`: (capability, key) of a debounce or throttle), else the
        retried attempt's, else its idempotency key's; any other goes anywhere (the suffix
        picks, at random), but not in a partition of `avoid` (ones not answering) while
        another is left. A collapse's window is kept in its execution's partition: one of
        these choices, the same for every start of its key (a capability's limits per key
        name one member)."""
        k = self.keys
        if k.partition_count == 1:
            return new_execution_id()
        if capped is not None:
            part = k.partition_of_capability(capped)
        elif keyed is not None:
            part = k.partition_of_concurrency_key(*keyed)
        elif collapsed is not None:
            part = k.partition_of_collapse(*collapsed)
        elif retry_of is not None:
            part = k.partition_of(retry_of)
        elif idempotency_key is not None:
            part = k.partition_of_key(idempotency_key)
        else:
            left = [i for i in range(k.partition_count) if i not in avoid]
            if not avoid or not left:
                return new_execution_id()
            return new_execution_id(partition=random.choice(left), partitions=k.partition_count)
        return new_execution_id(partition=part.index, partitions=k.partition_count)

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
        sensitive: bool = True,
        actor: str,
        episode: str | None,
        max_concurrency: int | None = None,
        per_key: tuple[int, str] | None = None,
        rate: tuple[float, float, str | None] | None = None,
        plan: StartPlan = NOW,
    ) -> Created:
        """Create and enqueue, as `plan` says (due time, priority, idempotency key, links);
        `sensitive`: whether `secret_json` holds values its schema marks sensitive;
        `per_key`: (limit, key) of its capability's limit per key (`majordomus.flow`);
        `rate`: (interval ms, tolerance ms, key or None) of its capability's rate limit.
        answers how many were queued ahead of it and when it was created, or the execution
        that holds its idempotency key, or the one its key's open window collapsed it into
        (`plan.collapse`, `majordomus.flow`)."""
        k = self.keys
        stamp, ms = now_stamp()
        due_ms = int(plan.due_ms) if plan.due_ms is not None and plan.due_ms > ms else 0
        aging_ms = int(self.settings.priority_aging_seconds * 1000)
        part = k.partition_of(execution_id)
        retried = plan.retry_of if plan.retry_of else None
        if retried is not None and k.partition_of(retried) is not part:
            retried = None  # never so (`new_id`): a link across slots would not be atomic
        keys = [k.snapshot(execution_id), k.events(execution_id), k.secret_input(execution_id)]
        args: list[bytes | str | int | float] = [
            execution_id,
            stamp,
            ms,
            capability,
            title,
            input_json,
            "1" if cancellable else "0",
            actor,
            # Sealed when it holds a secret (its schema marks a member sensitive) and keys
            # are configured (`sealing`); an input without one is no secret at rest.
            (self.sealer.seal(secret_json) if sensitive else secret_json) if secret_json else b"",
            created_data,
            plan.priority,
            int(HEAD_START[plan.priority] * aging_ms),
            plan.attempts_before,
            self.next_token(),
            tie_rank(plan.priority, aging_ms),
        ]
        # The options this start has, as (name, value) pairs after the rest (create.lua).
        if episode:
            args += ("episode", episode)
        if max_concurrency:
            args += ("conc_limit", max_concurrency)
        if per_key:
            args += ("key_limit", per_key[0], "conc_key", per_key[1])
        if rate:
            args += ("rate_t", f"{rate[0]:.6f}", "rate_tau", f"{rate[1]:.6f}")
            if rate[2] is not None:
                args += ("rate_key", rate[2])
        if due_ms:
            args += ("due_ms", due_ms, "due_at", stamp_of(due_ms))
        if plan.schedule:
            args += ("schedule", plan.schedule)
        if plan.timeout_ms:
            args += ("timeout_ms", plan.timeout_ms)
        if plan.retry_of:
            args += ("retry_of", plan.retry_of)
        if plan.idempotency_key:
            keys.append(part.idempotency(plan.idempotency_key))
            args += ("idempotency", plan.idempotency_key, "fingerprint", plan.fingerprint)
        if retried:
            keys.append(k.snapshot(retried))
            args += ("retried", "1")
        if plan.collapse:
            kind, key, window_ms = plan.collapse
            keys.append(part.collapse(capability, key))
            args += ("collapse", kind, "window_ms", window_ms)
        if plan.search:
            indexes = [part.search(capability, member, text) for member, text in plan.search]
            keys += indexes
            args += ("indexed", encode(indexes))
        if k.partition_count > 1:
            args += ("part", part.index, "parts", k.partition_count)
        answer = await self._creates[part.index](keys=keys, args=args)
        code = int(answer[0])
        if code == -2:
            return Created(0, stamp, held_by=_text(answer[1]), held_fingerprint=_text(answer[2]))
        if code == -3:
            return Created(
                0,
                stamp,
                collapsed_into=_text(answer[1]),
                collapsed=int(answer[2]),
                replaced_due_at=_text(answer[3]),
            )
        if code < 0:
            raise IdTaken(f"execution id {execution_id} already exists")
        return Created(code, stamp, args=args)

    def _append_call(
        self,
        execution_id: str,
        events: Sequence[EventWrite],
        worker: str | None,
        read_secret: bool = False,
        token: str | None = None,
        lapsed: str | None = None,
    ) -> tuple[BatchedScript, list[str], list[Any]]:
        """The partition's append script, and the call's keys and arguments (append.lua)."""
        k = self.keys
        part = k.partition_of(execution_id)
        stamp, ms = now_stamp()
        keys = [k.snapshot(execution_id), k.events(execution_id), k.secret_input(execution_id)]
        args: list[Any] = [execution_id, stamp, ms, worker or "", len(events), token or ""]
        for event_type, data in events:
            args.append(event_type)
            args.append(data)
        # The options (append.lua): only what this call uses is sent.
        if read_secret:
            args += ("secret", "1")
        if lapsed:
            args += ("lapsed", part.lease(lapsed))
        return self._appends[part.index], keys, args

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
        script, keys, args = self._append_call(
            execution_id, events, worker, token=token, lapsed=if_lapsed
        )
        raw = await script(keys=keys, args=args)
        return _append_result(raw, len(events))

    async def claim(self, execution_id: str, worker: str) -> tuple[AppendResult, bytes | None]:
        """Move queued -> running for this worker and read the worker-only input, in one trip
        (tokened like `append(token=...)`: a repeated send is not refused as a second claim)."""
        script, keys, args = self._append_call(
            execution_id,
            [("execution.started", b"")],
            worker,
            read_secret=True,
            token=self.next_token(),
        )
        raw = await script(keys=keys, args=args)
        secret = raw[4] if len(raw) > 4 else None
        return _append_result(raw, 1), self.sealer.open(secret) if secret else secret

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
        return self.sealer.open(raw) if raw else raw

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
        """Events with sequence > after, oldest first, at most `limit`; None when unknown.

        One pipeline, the events read before the snapshot (no MULTI: a Redis Cluster has
        none): the state and last sequence are then at least as new as the page, so an
        event appended between the two reads shows as `more`, never as a page past its
        snapshot."""
        async with self._raw_pipeline() as pipe:
            if limit > 0:
                pipe.xrange(self.keys.events(execution_id), f"({after}-0", "+", count=limit + 1)
            pipe.hmget(self.keys.snapshot(execution_id), ["state", "last_seq"])
            result = await pipe.execute()
        state, last = result[-1]
        if state is None:
            return None
        last_seq = int(last)
        entries = result[0] if limit > 0 else []
        read_to = int(entries[min(len(entries), limit) - 1][0].split(b"-", 1)[0]) if entries else after
        more = len(entries) > limit or last_seq > max(after, read_to)
        entries = entries[:limit]
        first_retained = max(1, last_seq - LIMITS.stream_events + 1)
        if entries:
            first_retained = int(entries[0][0].split(b"-", 1)[0])
        truncated = last_seq > after and after + 1 < first_retained
        return RawPage(
            state=state.decode(),
            last_sequence=last_seq,
            events=_envelopes(entries),
            more=more,
            truncated=truncated,
        )

    def _raw_pipeline(self) -> Any:
        """A pipeline whose `XRANGE` answers are left as Redis sent them: entries of
        [id, [field, value, ...]], not redis-py's tuple and dict per entry (140 us of a
        500-event page, more than the rest of the read). A Redis Cluster's is its own."""
        if is_cluster(self.redis):
            return self.redis.pipeline(transaction=False)
        if self._page_callbacks is None:
            kind: Any = type(self.redis.response_callbacks)  # redis-py's CaseInsensitiveDict
            callbacks = kind(self.redis.response_callbacks)
            callbacks.pop("XRANGE", None)
            self._page_callbacks = callbacks
        return Pipeline(self.redis.connection_pool, self._page_callbacks, False, None)

    async def ids_newest_first(
        self,
        count: int,
        older_than: float | None = None,
        *,
        floor: float | None = None,
        search: Sequence[Searched] | None = None,
    ) -> list[tuple[str, float]]:
        """Up to `count` execution ids, newest first, each with its place in the order of
        creation; only those created before the place `older_than`, when given, and at or
        after the place `floor`. A place, not an offset: ids forgotten or added meanwhile
        shift no page. Each partition's newest, merged (places are comparable across
        partitions: `create.lua`). With `search` (each a capability, member and value text),
        those of these search indexes only (`Partition.search`), never a scan of the others."""
        top = "+inf" if older_than is None else f"({older_than!r}"
        bottom = "-inf" if floor is None else repr(floor)
        async with self.redis.pipeline(transaction=False) as pipe:
            for part in self.keys.partitions:
                for key in [part.all] if search is None else [part.search(*s) for s in search]:
                    pipe.zrevrangebyscore(key, top, bottom, start=0, num=count, withscores=True)
            pages = await pipe.execute()
        merged = [(member.decode(), float(score)) for page in pages for member, score in page]
        merged.sort(key=lambda pair: pair[1], reverse=True)
        return merged[:count]

    async def place_of(self, execution_id: str) -> float | None:
        """Where the execution stands in the order of creation, or None when unknown."""
        score = await self.redis.zscore(self.keys.partition_of(execution_id).all, execution_id)
        return None if score is None else float(score)

    async def counts(self) -> tuple[int, int]:
        """(queued, running-or-cancelling) across the whole deployment."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for part in self.keys.partitions:
                pipe.zcard(part.queued)
                pipe.zcard(part.running)
            raw = await pipe.execute()
        return sum(int(n) for n in raw[0::2]), sum(int(n) for n in raw[1::2])

    async def finished_count(self) -> int:
        """How many finished executions are kept, in every partition."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for part in self.keys.partitions:
                pipe.zcard(part.finished)
            return sum(int(n) for n in await pipe.execute())

    async def running_ids(self) -> list[str]:
        return [member for member, _ in await self._members("running")]

    async def queued_ids(self) -> list[tuple[str, int]]:
        return [(member, int(score)) for member, score in await self._members("queued")]

    async def _members(self, index: str) -> list[tuple[str, float]]:
        """Every member of one index (`queued`, `running`) of every partition, by score."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for part in self.keys.partitions:
                pipe.zrange(getattr(part, index), 0, -1, withscores=True)
            pages = await pipe.execute()
        merged = [(member.decode(), float(score)) for page in pages for member, score in page]
        merged.sort(key=lambda pair: pair[1])
        return merged

    async def read_stream_after(self, execution_id: str, after: int, block_ms: int) -> list[bytes]:
        """Events after `after`, waiting up to `block_ms` for the first (for long polls)."""
        with blocking_reads(block_ms):
            raw = await self.redis.xread(
                {self.keys.events(execution_id): f"{after}-0"},
                count=LIMITS.page_events,
                block=block_ms,
            )
        if not raw:
            return []
        return [fields[_ENTRY] for _, fields in raw[0][1]]

    # -- retention ----------------------------------------------------------------------

    async def prune(self) -> int:
        """Forget finished executions past the retention time or over the retention count
        (the count is shared out evenly among the partitions)."""
        _, ms = now_stamp()
        cutoff = ms - self.settings.retain_seconds * 1000
        keep = -(-self.settings.retain_executions // self.keys.partition_count)
        pruned = 0
        for part in self.keys.partitions:
            old = await self.redis.zrangebyscore(part.finished, "-inf", cutoff)
            excess = await self.redis.zcard(part.finished) - keep
            if excess > 0:
                old = list({*old, *await self.redis.zrange(part.finished, 0, excess - 1)})
            if not old:
                continue
            ids = [o.decode() for o in old]
            # The search indexes each is in (`create.lua` kept their names).
            indexed = await self.redis.hmget(part.searched, ids)  # type: ignore[misc]
            async with self.redis.pipeline(transaction=False) as pipe:
                for execution_id, names in zip(ids, indexed, strict=True):
                    for index in msgspec.json.decode(names) if names else ():
                        pipe.zrem(index, execution_id)
                    pipe.delete(*self.keys.execution_keys(execution_id))
                if any(indexed):
                    pipe.hdel(part.searched, *ids)
                pipe.zrem(part.finished, *ids)
                pipe.zrem(part.all, *ids)
                await pipe.execute()
            pruned += len(ids)
        return pruned

    async def forget_missing(
        self, execution_ids: Sequence[str], search: Sequence[Searched] | None = None
    ) -> None:
        """Drop ids whose snapshot is gone from the indexes they were read from."""
        if not execution_ids:
            return
        async with self.redis.pipeline(transaction=False) as pipe:
            for execution_id in execution_ids:
                part = self.keys.partition_of(execution_id)
                for key in [part.all] if search is None else [part.search(*s) for s in search]:
                    pipe.zrem(key, execution_id)
            await pipe.execute()

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
        async with self.redis.pipeline(transaction=False) as pipe:
            for part in self.keys.partitions:
                pipe.zrevrange(part.finished, 0, count - 1, withscores=True)
            pages = await pipe.execute()
        merged = [(member.decode(), float(score)) for page in pages for member, score in page]
        merged.sort(key=lambda pair: pair[1], reverse=True)
        return [member for member, _ in merged[:count]]


CREATED_FROM_ARGV: tuple[tuple[bytes, int], ...] = (
    (b"capability", 3),
    (b"attempt", 12),
    (b"created_by", 13),
    (b"created_ms", 2),
    (b"id", 0),
    (b"title", 4),
    (b"input", 5),
    (b"cancellable", 6),
    (b"actor", 7),
    (b"created_at", 1),
    (b"priority", 10),
    (b"qoffset", 11),
)
"""The snapshot's fields create.lua writes from its arguments: (field, argument's index
from 0, ARGV's less one)."""

CREATED_FROM_OPTIONS: dict[str, bytes] = {
    "episode": b"episode",
    "conc_limit": b"conc_limit",
    "key_limit": b"key_limit",
    "conc_key": b"conc_key",
    "rate_t": b"rate_t",
    "rate_tau": b"rate_tau",
    "rate_key": b"rate_key",
    "due_ms": b"due_ms",
    "due_at": b"due_at",
    "schedule": b"schedule",
    "timeout_ms": b"timeout_ms",
    "retry_of": b"retry_of",
    "idempotency": b"idempotency_key",
}
"""The options of a create (name -> field) create.lua keeps in the snapshot."""

CREATE_OPTIONS_AT = 15
"""Where a create's options begin (ARGV[16], create.lua)."""

CREATED_CONSTANTS: tuple[tuple[bytes, bytes], ...] = ((b"state", b"queued"), (b"last_seq", b"2"))
"""The snapshot's fields create.lua writes the same for every execution."""


def created_members(args: Sequence[Any]) -> dict[str, Any]:
    """The members of `ExecutionSnapshot` create.lua writes given `args` (`created_hash`'s
    fields that are members, by the same tables): what a start answers, without writing
    its hash out as bytes to read it back (`stored_format.snapshot_of_members`)."""
    members = dict(_CREATED_CONSTANT_MEMBERS)
    for name, at, is_json in _CREATED_MEMBERS:
        members[name] = msgspec.json.decode(args[at]) if is_json else args[at]
    for at in range(CREATE_OPTIONS_AT, len(args), 2):
        option = _CREATED_OPTION_MEMBERS.get(args[at])
        if option is not None:
            members[option] = args[at + 1]
    return members


_CREATED_CONSTANT_MEMBERS = {SNAPSHOT_LAYOUT[f][0]: v.decode() for f, v in CREATED_CONSTANTS}
_CREATED_MEMBERS = [
    (SNAPSHOT_LAYOUT[f][0], at, SNAPSHOT_LAYOUT[f][1])
    for f, at in CREATED_FROM_ARGV
    if f in SNAPSHOT_LAYOUT  # not a field only the store reads
]
_CREATED_OPTION_MEMBERS = {
    option: SNAPSHOT_LAYOUT[f][0]
    for option, f in CREATED_FROM_OPTIONS.items()
    if f in SNAPSHOT_LAYOUT
}


def created_hash(args: Sequence[Any], ahead: int) -> dict[bytes, bytes]:
    """The snapshot hash create.lua writes given `args` (its ARGV) and answering `ahead`, but
    its `order` (the script's own count): tests/majordomus/test_stored_format.py compares it
    with what the script wrote, through every option, so the two cannot drift apart."""
    fields = dict(CREATED_CONSTANTS)
    fields[b"ahead"] = b"%d" % ahead
    for field, at in CREATED_FROM_ARGV:
        value = args[at]  # as Redis stores an argument (a number as its text)
        fields[field] = value if value.__class__ is bytes else str(value).encode()
    for at in range(CREATE_OPTIONS_AT, len(args), 2):
        kept = CREATED_FROM_OPTIONS.get(args[at])
        if kept is not None:
            fields[kept] = str(args[at + 1]).encode()
    return fields


def _append_result(raw: Any, requested: int) -> AppendResult:
    code, seq, state, applied = raw[:4]
    state_text = state.decode() if isinstance(state, bytes) else str(state)
    return AppendResult(int(code) >= 0, int(applied), requested, int(seq), state_text)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def encode(value: Any) -> bytes:
    return msgspec.json.encode(value)


class Store(ExecutionStore, QueueStore, WorkerStore, FeedStore, SignalStore, RollupStore):
    """Every store but the episodes', on one client: what the engine and the workers hold."""
