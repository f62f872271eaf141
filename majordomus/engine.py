"""The engine: what every surface calls to start, cancel, read and wait on executions.

It validates and redacts input, creates and enqueues executions through the store, reads
snapshots and pages back as typed values, and calls a capability directly (with a silent
context) when a surface invokes it rather than starting it. It names no Redis command and
knows nothing of HTTP, MCP or the CLI.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import msgspec

from majordomus import clock
from majordomus.config import LIMITS, Settings, clamp
from majordomus.context import Context
from majordomus.declarations import declaration_of, published
from majordomus.epochs import EpochWatch
from majordomus.errors import (
    HTTP_STATUS,
    ExecutionError,
    MajordomusError,
    invalid_input,
    not_found,
    refused,
    unavailable,
)
from majordomus.flow import Debounce, Throttle, replaced_diagnostic
from majordomus.handler_threads import in_thread
from majordomus.ids import PROTOCOL_VERSION, require_execution_id
from majordomus.matching import (
    STATE_ORDER,
    Match,
    MatchCount,
    Order,
    Selection,
    Sort,
    place_of,
)
from majordomus.metrics import METRICS
from majordomus.model import (
    CURSOR_BOUND,
    EVENT_TYPES,
    STREAM_TYPES,
    TERMINAL_EVENT_TYPES,
    CancelOutput,
    CreatedData,
    EventHistory,
    ExecutionEvent,
    ExecutionLinks,
    ExecutionList,
    ExecutionSnapshot,
    LiveChannel,
    ProtocolInfo,
    StoredEventHistory,
    StoredForm,
    StreamMessage,
    event_decoder,
    event_type_of,
)
from majordomus.registry import Capability, Registry
from majordomus.retries import MAX_ATTEMPTS
from majordomus.schemas import has_sensitive, redact, schema_of, validate_input
from majordomus.search import indexed_values, not_indexed, parse_search
from majordomus.start_options import NO_OPTIONS, StartOptions
from majordomus.states import FINAL, is_final
from majordomus.store.connect import RedisClient
from majordomus.store.declarations import DeclarationStore
from majordomus.store.episodes import EpisodeStore
from majordomus.store.executions import (
    Created,
    IdTaken,
    RawPage,
    Searched,
    StartPlan,
    Store,
    created_members,
    encode,
)
from majordomus.store.failures import UNREACHABLE, RedisTimeout
from majordomus.store.feed import CURSOR_SEPARATOR, FeedBounds, FeedEntry
from majordomus.store.stored_format import snapshot_of, snapshot_of_members

ID_DRAWS = 5
"""How many ids a start draws before it gives up. An id carries 32 random bits a second: at
thousands of starts a second two of them draw the same id now and then (the store refuses
the second, `IdTaken`), and the start draws again; five taken in a row do not happen."""

LIVE_PATH = "/events"

FeedPage = list[FeedEntry]
"""Feed entries, merged across the partitions, each with the cursor to resume after it."""
FeedState = list[FeedBounds]
"""Each partition's feed bounds, in partition order."""
StoredEvents = list[bytes]
WorkerIds = list[str]
Snapshots = list[ExecutionSnapshot]
MatchedPage = list[tuple[str, float, list[bytes | None]]]
"""Matching executions (`Engine.matching`): each its id, its place and some of its fields."""
SortWindow = list[tuple[str, int, float]]
Searchables = list[tuple[str, tuple[str, ...]]]
"""Capabilities with searchable members: each its id and those members."""


class _Sequence(msgspec.Struct):
    sequence: int


_sequence_decoder = msgspec.json.Decoder(_Sequence)


def require_sequence(after: int) -> int:
    """A sequence cursor as given, or `invalid_input` when no stream id can be made of it."""
    if not 0 <= after <= CURSOR_BOUND:
        raise invalid_input(
            f"the cursor {after} is not a sequence number (0 to {CURSOR_BOUND})",
            "give the last sequence you saw, or 0 for the whole retained history",
        )
    return after


def _stream_id(text: str) -> str | None:
    """One partition's position (`<ms>-<n>`, or `<ms>` for `<ms>-0`) written in full, or
    None when it is not one: not digits, a part past the bound, or both at it (nothing can
    follow that id)."""
    ms, dash, seq = text.partition("-")
    if not (ms.isdigit() and ms.isascii()) or (dash and not (seq.isdigit() and seq.isascii())):
        return None
    parts = (int(ms), int(seq or 0))
    if max(parts) > CURSOR_BOUND or parts == (CURSOR_BOUND, CURSOR_BOUND):
        return None
    return f"{parts[0]}-{parts[1]}"


def require_feed_id(cursor: str, partitions: int = 1) -> str:
    """A feed cursor (`majordomus.store.feed`) written in full, or `invalid_input` when it
    is not one of a feed of `partitions` partitions: one stream id per partition, joined by
    `_`, each `<ms>-<n>` (or `<ms>`, for `<ms>-0`) with each part from 0 to the bound, and
    not both at it (nothing can follow that id). With one partition it is one stream id."""
    texts = cursor.split(CURSOR_SEPARATOR)
    ids = [_stream_id(t) for t in texts] if len(texts) == partitions else []
    if not ids or None in ids:
        if partitions == 1:
            raise invalid_input(
                f"{cursor!r} is not a feed id of this channel",
                f"a feed id is <ms>-<n>, each part from 0 to {CURSOR_BOUND}, "
                "such as 1701234567890-0",
            )
        raise invalid_input(
            f"{cursor!r} is not a feed cursor of this channel ({partitions} partitions)",
            f"a feed cursor is {partitions} feed ids joined by '_', one per partition, each "
            f"<ms>-<n> with each part from 0 to {CURSOR_BOUND}, such as "
            + CURSOR_SEPARATOR.join(["1701234567890-0"] * partitions),
        )
    return CURSOR_SEPARATOR.join(i for i in ids if i is not None)


OnEvent = Callable[[ExecutionEvent], Awaitable[None] | None]
OnStarted = Callable[[ExecutionSnapshot], Awaitable[None]]
HistoryT = TypeVar("HistoryT", EventHistory, StoredEventHistory)
EventFollower = Callable[[str, int, int], Awaitable[list[bytes]]]
"""(execution id, after, block ms) -> the events after `after`, waiting up to `block_ms`."""


@dataclass(frozen=True)
class Called:
    """What a capability's own route, tool or command answers (`Engine.call`)."""

    output: Any = None
    """The output: the handler's answer, or the execution's once it succeeded."""
    execution: ExecutionSnapshot | None = None
    """The execution it ran as (None for a built-in answered here and now)."""

    @property
    def pending(self) -> bool:
        """Still going when the wait ended: `execution` is as it stood then."""
        return self.execution is not None and not is_final(self.execution.state)


SILENT_PARTITION_SECONDS = 5.0
"""How long new starts avoid a partition whose Redis did not answer one (then one is tried
there again: the next that fails puts it off as long again)."""


def never_sent(exc: BaseException) -> bool:
    """Whether a Redis failure came before the command was sent (a connection refused or
    not opened, none free in the pool): a start that failed so did not happen."""
    text = str(exc)
    return not isinstance(exc, RedisTimeout) and (
        "connecting to" in text or "No connection available" in text
    )


def start_unknown(capability: str, execution_id: str, key: str | None) -> MajordomusError:
    """A start whose create Redis did not answer: it may have happened or not, and the
    answer says how to know, and how to resend it safely."""
    if key:
        how = (
            f"resend it with the same idempotency_key {key!r} once Redis answers: you get the "
            "one execution either way"
        )
    else:
        how = (
            f"once Redis answers, executions.get of {execution_id} tells (not_found: it did not "
            "happen); start with an idempotency_key to make a resend safe"
        )
    return unavailable(
        f"Redis did not answer, so the start of {capability} may or may not have happened "
        f"(as {execution_id})",
        how,
    )


class Engine:
    def __init__(self, redis: RedisClient, registry: Registry, settings: Settings) -> None:
        self.redis = redis
        self.registry = registry
        self.settings = settings
        self.store = Store(redis, settings)
        self.episodes = EpisodeStore(redis, settings)
        self.declarations = DeclarationStore(redis, settings)
        self.epochs = EpochWatch(self.store)
        """Whether Redis lost its data since this process first looked (`majordomus.epochs`)."""
        self.published: dict[str, Capability] = {}
        """Capabilities this process does not import, as their workers published them,
        read by `known` (a producer starting one by id)."""
        self.calls_in_flight = 0
        """`call`s this engine is answering now (the API's `/api/v1/live` shows it)."""
        self.follow: EventFollower | None = None
        """Where `wait` waits for an execution's next events. Unset, it is a blocking read of
        the execution's stream (a Redis connection per waiter); the API points it at its one
        shared feed reader, so a thousand waiters hold no connection."""
        self._silent: dict[int, float] = {}
        """Partitions whose Redis did not answer a start, each until when new starts go
        elsewhere (`silent_partitions`)."""

    def silent_partitions(self) -> frozenset[int]:
        """The partitions a start without a place of its own avoids now: one whose create
        Redis did not answer, for `SILENT_PARTITION_SECONDS` after (a shard stalled or
        lost costs its own partition's starts, not everyone's)."""
        if not self._silent:
            return frozenset()
        now = time.monotonic()
        for index, until in list(self._silent.items()):
            if until <= now:
                del self._silent[index]
        return frozenset(self._silent)

    # -- direct calls -------------------------------------------------------------------

    async def invoke(
        self,
        capability_id: str,
        raw_input: Any,
        *,
        actor: str = "internal",
        episode: str | None = None,
        ctx: Context | None = None,
        typed: bool = True,
    ) -> Any:
        """Run a capability's handler here and now (not as an execution). Its answer is of
        its declared output type; with `typed` False, a caller that only encodes it as JSON
        may get it in its stored form instead (`StoredForm`: the same JSON, not decoded)."""
        cap = self.registry.require(capability_id)
        value = (
            raw_input if isinstance(raw_input, cap.input) else validate_input(cap.input, raw_input)
        )
        output = await call_handler(cap, ctx or Context(self, actor, episode), value)
        return as_declared(cap, output) if typed else output

    async def call(
        self,
        capability_id: str,
        raw_input: Any,
        *,
        actor: str = "internal",
        episode: str | None = None,
        ctx: Context | None = None,
        wait_ms: int | None = None,
        on_event: OnEvent | None = None,
        on_started: OnStarted | None = None,
        typed: bool = True,
    ) -> Called:
        """A capability as its own route, tool or command runs it.

        The engine's own built-ins (reads of state and the controls, `executable=False`)
        answer here and now. Every other capability is started as an execution on the
        workers, so a handler never runs in the process of a surface: its output is
        answered when it succeeds within `wait_ms` (default `LIMITS.call_wait_ms`, at most
        `LIMITS.wait_bound_ms`; 0 answers the queued execution at once), else the execution
        as it stands, still going. One that failed or was cancelled raises its error, with
        the execution's id as the correlation id. `on_started` sees the queued execution
        before the wait, `on_event` each of its events during it. `typed`: as `invoke`'s.

        A failed attempt that its capability's retry policy retried (`retried_as`,
        `majordomus.retries`) is not the answer: the wait follows the chain, within the same
        bound, to its last execution, which carries the outcome (or is the one still going).
        """
        with self._in_flight():
            cap = self.registry.require(capability_id)
            if not cap.executable:
                output = await self.invoke(
                    cap.id, raw_input, actor=actor, episode=episode, ctx=ctx, typed=typed
                )
                return Called(output)
            started = await self.start(cap.id, raw_input, actor=actor, episode=episode)
            if on_started is not None:
                await on_started(started)
            if wait_ms == 0:
                return Called(execution=started)
            wait_ms = clamp(wait_ms, LIMITS.call_wait_ms, LIMITS.wait_bound_ms)
            deadline = time.monotonic() + wait_ms / 1000
            try:
                snap = await self.wait(started.id, wait_ms, on_event=on_event)
                # The link is written before the failure it follows, so a failed attempt
                # that is retried always shows `retried_as` here.
                while snap.state == "failed" and isinstance(snap.retried_as, str):
                    left_ms = max(0, int((deadline - time.monotonic()) * 1000))
                    try:
                        snap = await self.wait(snap.retried_as, left_ms, on_event=on_event)
                    except MajordomusError as exc:
                        if exc.code != "not_found":
                            raise
                        break  # the next attempt is gone (pruned): this one's error stands
            except UNREACHABLE:
                # Started, then Redis went away: say it was started (as still going), not an
                # error that would have the caller start it a second time.
                return Called(execution=started)
            if snap.state == "succeeded":
                return Called(snap.output, snap)
            if is_final(snap.state):
                raise ended_badly(snap)
            return Called(execution=snap)

    @contextlib.contextmanager
    def _in_flight(self) -> Iterator[None]:
        self.calls_in_flight += 1
        try:
            yield
        finally:
            self.calls_in_flight -= 1

    # -- declarations -------------------------------------------------------------------

    async def publish_declarations(self) -> None:
        """Publish every capability this process runs as an execution, so a producer that
        does not import its module can start it by id (`majordomus.declarations`)."""
        await self.declarations.write(
            {cap.id: declaration_of(cap) for cap in self.registry if cap.executable}
        )

    async def known(self, capability_id: str) -> Capability:
        """The capability `capability_id`: this process's own declaration, else the one its
        workers published (read once, then kept), else `not_found`."""
        cap = self.registry.get(capability_id) or self.published.get(capability_id)
        if cap is not None:
            return cap
        raw = await self.declarations.read(capability_id)
        cap = published(raw) if raw is not None else None
        if cap is None:
            return self.registry.require(capability_id)  # not_found, worded as everywhere
        self.published[capability_id] = cap
        return cap

    def _capability(self, capability_id: str) -> Capability:
        cap = self.registry.get(capability_id) or self.published.get(capability_id)
        return cap if cap is not None else self.registry.require(capability_id)

    # -- executions ---------------------------------------------------------------------

    async def start(
        self,
        capability_id: str,
        raw_input: Any = None,
        *,
        actor: str = "internal",
        episode: str | None = None,
        options: StartOptions = NO_OPTIONS,
    ) -> ExecutionSnapshot:
        cap = self._capability(capability_id)
        if not cap.executable:
            raise refused(
                f"{cap.id} answers directly and is not started as an execution",
                f"call it instead: {cap.exposure.http_method} {cap.exposure.http_path}",
            )
        value = validate_input(cap.input, raw_input)
        plain = msgspec.to_builtins(value)
        shown = redact(cap.input, plain)
        priority = options.priority or cap.priority
        key = options.idempotency_key
        fingerprint = _fingerprint(cap.id, plain) if key else ""
        searched = tuple(indexed_values(cap.searchable, plain))
        per_key = (cap.per_key.limit, cap.per_key.key_of(plain)) if cap.per_key else None
        rated = cap.rate_limit
        rate_key = rated.key_of(plain) if rated else None
        keyed = per_key[1] if per_key else rate_key
        # Its debounce or throttle (`majordomus.flow`); a retried attempt is never collapsed.
        collapse = cap.collapse if options.retry_of is None else None
        collapsing = (
            (collapse.kind, collapse.key_of(plain), collapse.window_ms) if collapse else None
        )
        if options is NO_OPTIONS and not searched and collapse is None:
            plan = _plain_plan(priority)
        else:
            plan = StartPlan(
                due_ms=_due_ms(options, collapse),
                priority=priority,
                idempotency_key=key,
                fingerprint=fingerprint,
                schedule=options.schedule,
                retry_of=options.retry_of,
                attempts_before=options.attempts_before,
                timeout_ms=options.timeout_ms,
                search=searched,
                collapse=collapsing,
            )
        draws = ID_DRAWS
        while True:
            execution_id = self.store.new_id(
                # One partition keeps a capability's slots, or its one rate bucket; a key's,
                # its slots and bucket.
                capped=cap.id if cap.max_concurrency or (rated and rate_key is None) else None,
                keyed=(cap.id, keyed) if keyed is not None else None,
                collapsed=(cap.id, collapsing[1]) if collapsing else None,
                idempotency_key=key,
                retry_of=options.retry_of,
                avoid=self.silent_partitions(),
            )
            try:
                created = await self.store.create(
                    execution_id,
                    capability=cap.id,
                    title=cap.title,
                    input_json=encode(shown),
                    created_data=encode(CreatedData(cap.id, cap.title, shown)),
                    secret_json=encode(plain),
                    sensitive=has_sensitive(cap.input),
                    cancellable=cap.cancellable,
                    actor=actor,
                    episode=episode,
                    max_concurrency=cap.max_concurrency,
                    per_key=per_key,
                    rate=(rated.interval_ms, rated.tolerance_ms, rate_key) if rated else None,
                    plan=plan,
                )
                break
            except IdTaken:  # another start drew the same id this second: draw again
                draws -= 1
                if not draws:
                    raise
            except UNREACHABLE as exc:
                self._silent[self.store.keys.partition_of(execution_id).index] = (
                    time.monotonic() + SILENT_PARTITION_SECONDS
                )
                if never_sent(exc):  # refused, or no connection: it did not happen
                    raise
                raise start_unknown(cap.id, execution_id, key) from exc
        if created.held_by is not None:
            return await self._held(key or "", created, fingerprint)
        if created.collapsed_into is not None:
            return await self._collapsed(created)
        METRICS.execution_started(cap.id)
        METRICS.events_appended(2)  # execution.created, execution.queued
        # What the create wrote, known from its arguments rather than read back (the answer
        # is the queued snapshot even when a worker has already picked it up); the test of
        # the stored format checks it is what a read of the hash answers.
        return snapshot_of_members(created_members(created.args), self.links)

    async def _collapsed(self, created: Created) -> ExecutionSnapshot:
        """The answer of a start its key's open window collapsed into an execution
        (`majordomus.flow`): that execution, counting it in `collapsed`. A debounced one whose
        input it replaced says so in its history first (`debounce.replaced`), written as the
        ticker writes its own: a second step, which a start that ran meanwhile still takes."""
        carrier = created.collapsed_into or ""
        if created.replaced_due_at:
            diagnostic = replaced_diagnostic(created.collapsed + 1, created.replaced_due_at)
            event = ("execution.diagnostic", encode(diagnostic))
            result = await self.store.append(carrier, [event])
            METRICS.events_appended(result.applied)
        raw = await self.store.snapshot(carrier)
        if raw is None:  # forgotten between the two steps (pruned): as if never carried
            raise refused(
                f"the start was collapsed into {carrier}, which is gone",
                "start again: its key's window is closed",
            )
        return self.snapshot_from(raw)

    async def _held(self, key: str, created: Created, fingerprint: str) -> ExecutionSnapshot:
        """The answer of a start whose idempotency key an execution already holds: that
        execution, when it was started with the same capability and input; else `refused`."""
        held = created.held_by or ""
        if created.held_fingerprint != fingerprint:
            raise refused(
                f"the idempotency key {key!r} was used by {held} with another capability or input",
                f"use a new key for a different start, or read {held} with executions.get",
            )
        raw = await self.store.snapshot(held)
        if raw is None:  # forgotten between the two reads: as if never held
            raise refused(
                f"the idempotency key {key!r} was held by {held}, which is gone",
                "start again with the same key",
            )
        return self.snapshot_from(raw)

    async def get(self, execution_id: str) -> ExecutionSnapshot:
        execution_id = require_execution_id(execution_id)
        raw = await self.store.snapshot(execution_id)
        if raw is None:
            raise _unknown(execution_id)
        return self.snapshot_from(raw)

    async def events(
        self, execution_id: str, after: int | None = None, limit: int | None = None
    ) -> EventHistory:
        """One page of an execution's events, oldest first, after `after`, typed."""
        return await self._history(EventHistory, event_decoder.decode, execution_id, after, limit)

    async def stored_events(
        self, execution_id: str, after: int | None = None, limit: int | None = None
    ) -> StoredEventHistory:
        """The same page as `events`, its events passed through as stored (not decoded)."""
        return await self._history(StoredEventHistory, msgspec.Raw, execution_id, after, limit)

    async def _history(
        self,
        kind: Callable[..., HistoryT],
        event: Callable[[bytes], Any],
        execution_id: str,
        after: int | None,
        limit: int | None,
    ) -> HistoryT:
        execution_id, page, last = await self._page(execution_id, after, limit)
        return kind(
            execution_id=execution_id,
            state=page.state,
            events=list(map(event, page.events)),
            last_sequence=last,
            more=page.more,
            truncated=page.truncated,
        )

    async def _page(
        self, execution_id: str, after: int | None, limit: int | None
    ) -> tuple[str, RawPage, int]:
        """The checked id, the stored page, and the sequence the page ends at."""
        execution_id = require_execution_id(execution_id)
        after = require_sequence(after or 0)
        limit = clamp(limit, LIMITS.page_events, LIMITS.page_events)
        page = await self.store.page(execution_id, after, limit)
        if page is None:
            raise _unknown(execution_id)
        if page.events:
            last = _sequence_decoder.decode(page.events[-1]).sequence
        else:
            last = max(after, page.last_sequence)
        return execution_id, page, last

    async def list(
        self,
        state: str | None = None,
        capability: str | None = None,
        episode: str | None = None,
        limit: int | None = None,
        before: str | None = None,
        *,
        match: Match | None = None,
        sort: Sort = "created",
        order: Order = "desc",
    ) -> ExecutionList:
        """Executions that match (`match`, else `state`, `capability`, `episode`), at most
        `limit`; with `before` (the last id of the previous page), only those created
        before it: the next page. Sorted by creation, they are the newest matches, newest
        first (`order="asc"`: the same, oldest first); by `duration` or `state`, the first
        `limit` of the newest `LIMITS.list_sort_window` matches in that order (an active
        execution has no duration yet: it comes last either way; ties newest first)."""
        if match is None:
            match = Match(state=state, capability=capability, episode=episode)  # type: ignore[arg-type]
        selection = await self.selection(match)
        if before:
            selection = selection.below(await self._place_before(before))
        limit = clamp(limit, LIMITS.list_executions, LIMITS.list_executions)
        if sort == "created":
            found = await self._newest(selection, limit)
            if order == "asc":
                found.reverse()
        else:
            found = await self._sorted(selection, limit, sort, order)
        queued, running = await self.store.counts()
        return ExecutionList(len(found), queued + running, queued, found)

    async def _newest(self, selection: Selection, limit: int) -> Snapshots:
        """The newest `limit` executions of a selection, newest first."""
        found: Snapshots = []
        older_than = selection.top
        chunk = LIMITS.list_executions
        while len(found) < limit:
            placed = await self.store.ids_newest_first(
                chunk, older_than, floor=selection.floor, search=selection.search
            )
            if not placed:
                break
            ids = [execution_id for execution_id, _ in placed]
            older_than = placed[-1][1]
            raws = await self.store.snapshots(ids)
            missing = [i for i, r in zip(ids, raws, strict=True) if not r]
            await self.store.forget_missing(missing, selection.search)
            for raw in raws:
                if not raw or not selection.holds(
                    raw.get(b"state"), raw.get(b"capability"), raw.get(b"episode")
                ):
                    continue
                found.append(self.snapshot_from(raw))
                if len(found) >= limit:
                    break
        return found

    async def _sorted(
        self, selection: Selection, limit: int, sort: Sort, order: Order
    ) -> Snapshots:
        """The first `limit` of the newest `list_sort_window` matches, by `sort`."""
        window: SortWindow = []  # id, key, place
        extra = ("duration_ms",) if sort == "duration" else ()
        async for page in self.matching(selection, extra):
            for execution_id, place, fields in page:
                if sort == "state":
                    key = STATE_ORDER.get((fields[0] or b"").decode(), len(STATE_ORDER))
                else:
                    key = int(fields[3]) if fields[3] is not None else -1
                window.append((execution_id, key, place))
                if len(window) >= LIMITS.list_sort_window:
                    break
            if len(window) >= LIMITS.list_sort_window:
                break
        sign = -1 if order == "desc" else 1
        if sort == "duration":  # no duration yet (active): last, whichever the order
            window.sort(key=lambda w: (w[1] < 0, sign * w[1], -w[2]))
        else:
            window.sort(key=lambda w: (sign * w[1], -w[2]))
        ids = [w[0] for w in window[:limit]]
        return [self.snapshot_from(raw) for raw in await self.store.snapshots(ids) if raw]

    async def selection(self, match: Match) -> Selection:
        """A filter as the store's indexes read it (`majordomus.matching`): `invalid_input`
        for a search its capability does not declare, `not_found` for an unknown one."""
        search: tuple[Searched, ...] | None = None
        if match.search is not None:
            member, text = parse_search(match.search)
            if match.capability:
                cap = await self.known(match.capability)
                if member not in cap.searchable:
                    raise not_indexed(member, cap.id, cap.searchable)
                search = ((cap.id, member, text),)
            else:
                found = [c for c in await self.searchable() if member in c[1]]
                if not found:
                    raise not_indexed(member, None, ())
                search = tuple((cap_id, member, text) for cap_id, _ in found)
        return Selection(
            state=match.state,
            capability=match.capability,
            episode=match.episode,
            top=place_of(match.created_before) if match.created_before else None,
            floor=place_of(match.created_after) if match.created_after else None,
            search=search,
        )

    async def searchable(self) -> Searchables:
        """Every capability that declares searchable members, with them: this process's and
        those its workers published."""
        found = {c.id: c.searchable for c in self.registry if c.searchable}
        for cap_id, raw in (await self.declarations.read_all()).items():
            cap = published(raw) if cap_id not in found else None
            if cap is not None and cap.searchable:
                found[cap_id] = cap.searchable
        return sorted(found.items())

    async def matching(
        self, selection: Selection, extra: tuple[str, ...] = (), page: int = 500
    ) -> AsyncIterator[MatchedPage]:
        """The executions of a selection, newest first, a page at a time: each its id, its
        place and its fields `state`, `capability`, `episode` and then `extra`. A place is
        the cursor, so what is created or forgotten meanwhile shifts nothing."""
        older_than = selection.top
        fields = ("state", "capability", "episode", *extra)
        while True:
            placed = await self.store.ids_newest_first(
                page, older_than, floor=selection.floor, search=selection.search
            )
            if not placed:
                return
            older_than = placed[-1][1]
            ids = [execution_id for execution_id, _ in placed]
            rows = await self.store.snapshot_fields(ids, fields)
            missing = [i for i, row in zip(ids, rows, strict=True) if row[0] is None]
            await self.store.forget_missing(missing, selection.search)
            yield [
                (execution_id, place, row)
                for (execution_id, place), row in zip(placed, rows, strict=True)
                if selection.holds(row[0], row[1], row[2])
            ]

    async def count(self, match: Match) -> MatchCount:
        """How many executions match now, and how many of them each bulk action would act on."""
        return await self.count_of(await self.selection(match))

    async def count_of(self, selection: Selection) -> MatchCount:
        """`count`, of a selection."""
        matching = cancellable = retryable = 0
        async for page in self.matching(selection, ("retried_as",)):
            for _, _, row in page:
                matching += 1
                state = row[0]
                if state in (b"queued", b"running"):
                    cancellable += 1
                elif state in (b"failed", b"cancelled") and row[3] is None:
                    retryable += 1
        return MatchCount(matching, cancellable, retryable)

    async def newest_place(self) -> float | None:
        """The place of the newest execution, or None when there is none."""
        newest = await self.store.ids_newest_first(1)
        return newest[0][1] if newest else None

    async def place_of(self, execution_id: str) -> float | None:
        """Where an execution stands in the order of creation, or None when unknown."""
        return await self.store.place_of(require_execution_id(execution_id))

    async def _place_before(self, before: str) -> float:
        place = await self.store.place_of(require_execution_id(before))
        if place is None:
            raise not_found(
                f"there is no execution {before} to list from",
                "it may have finished longer ago than the retention; list from the newest",
            )
        return place

    async def cancel(self, execution_id: str, by: str = "user") -> CancelOutput:
        """Cancel an execution: a queued one ends `cancelled` at once, a running one is
        asked to stop (`cancelling`); a final one answers `already_finished`.

        A retry chain is cancelled as one (`majordomus.retries`): a cancel of an attempt
        that failed and was retried (`retried_as`) is passed on along the chain to its last
        execution, and the answer is that one's (its outcome, and its snapshot, whose
        `retry_of` leads back to the one asked); a running attempt whose next attempt was
        started an instant before its failure has that one cancelled too.
        """
        execution_id = require_execution_id(execution_id)
        hops = 0
        tries = 0
        last: dict[bytes, bytes] | None = None
        while tries < 5:
            raw = await self.store.snapshot(execution_id)
            if raw is None and last is not None:  # the next attempt is gone (pruned)
                raw = last
            elif raw is None:
                raise _unknown(execution_id)
            state = raw[b"state"].decode()
            cancellable = raw.get(b"cancellable") == b"1"
            onward = raw.get(b"retried_as")
            if state == "failed" and onward and raw is not last and hops < MAX_ATTEMPTS:
                hops += 1
                last, execution_id = raw, onward.decode()
                continue
            tries += 1
            if state in FINAL:
                return CancelOutput("already_finished", cancellable, self.snapshot_from(raw))
            if state == "cancelling":
                return CancelOutput("already_requested", cancellable, self.snapshot_from(raw))
            event = (
                ("execution.cancelled", b"")
                if state == "queued"
                else (
                    "execution.cancelling",
                    encode({"by": by}),
                )
            )
            result = await self.store.append(execution_id, [event])
            METRICS.events_appended(result.applied)
            if result.complete and state == "queued":  # it never ran: ended here
                METRICS.execution_finished(raw[b"capability"].decode(), "cancelled")
            if result.complete:
                snap = await self.get(execution_id)
                if state == "running" and isinstance(snap.retried_as, str):
                    # Its worker started the next attempt just before this cancel landed:
                    # asked `cancelling`, then read `retried_as` (the worker wrote the link,
                    # then reads the state), so one of the two always cancels it.
                    with contextlib.suppress(MajordomusError):
                        await self.cancel(snap.retried_as, by)
                return CancelOutput("requested", cancellable, snap)
            # The state moved under us (picked up, or finished): look again.
        raise MajordomusError("unavailable", "the execution kept changing state; try again")

    async def wait(
        self,
        execution_id: str,
        timeout_ms: int | None = None,
        on_event: OnEvent | None = None,
        bound_ms: int | None = None,
    ) -> ExecutionSnapshot:
        """The snapshot once final, or as it stands when the timeout passes (the default
        when none is given, at most the protocol's bound, and at most `bound_ms`)."""
        timeout = clamp(timeout_ms, LIMITS.wait_default_ms, LIMITS.wait_bound_ms)
        if bound_ms is not None:
            timeout = min(timeout, bound_ms)
        deadline = time.monotonic() + timeout / 1000
        snap = await self.get(execution_id)
        cursor = snap.last_sequence
        while not is_final(snap.state):
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            if remaining_ms <= 0:
                break
            read_after = self.follow or self.store.read_stream_after
            raws = await read_after(execution_id, cursor, min(remaining_ms, 5000))
            ended = False
            for raw in raws:
                event = event_decoder.decode(raw)
                cursor = event.sequence
                ended = ended or event_type_of(event) in TERMINAL_EVENT_TYPES
                if on_event is not None:
                    maybe = on_event(event)
                    if asyncio.iscoroutine(maybe):
                        await maybe
            if ended or not raws:
                snap = await self.get(execution_id)
        return snap

    # -- reads for the surfaces ---------------------------------------------------------
    # What the live channel, the probes and the CLI read, so no surface reaches into the
    # store: raw pages and feed entries (passed through as stored JSON), the queue and
    # worker reports, and the connection's own health.

    async def state_of(self, execution_id: str) -> str | None:
        """Its state alone, or None when the store does not have it (one read)."""
        return (await self.store.states([execution_id]))[0]

    async def raw_page(self, execution_id: str, after: int, limit: int) -> RawPage | None:
        """Stored events after `after` as JSON bytes, with the page's state; None when unknown."""
        return await self.store.page(execution_id, require_sequence(after), limit)

    async def read_stream_after(self, execution_id: str, after: int, block_ms: int) -> StoredEvents:
        """One execution's events after `after`, waiting up to `block_ms` for the first."""
        return await self.store.read_stream_after(execution_id, require_sequence(after), block_ms)

    def feed_cursor(self, cursor: str) -> str:
        """A feed cursor a client gave, written in full (`require_feed_id`, for this
        deployment's partitions): `invalid_input` when it is not one."""
        return require_feed_id(cursor, self.settings.partitions)

    async def read_feed(self, cursor: str, block_ms: int | None, count: int = 1000) -> FeedPage:
        """Feed entries after `cursor` (one the feed made), merged across the partitions, at
        most `count`, waiting up to `block_ms` for the first of any partition."""
        return await self.store.read_feed(cursor, block_ms, count)

    async def stop_feed_reads(self) -> None:
        """End the feed reads `read_feed` left waiting (a Redis Cluster's), as its reader stops."""
        await self.store.stop_reads()

    async def feed_after(self, cursor: str, count: int, upto: str | None = None) -> FeedPage:
        """Retained feed entries after `cursor` and up to `upto` (None: the end), merged
        across the partitions, oldest first, at most `count`."""
        after = self.feed_cursor(cursor)
        return await self.store.feed_after(
            after, count, None if upto is None else self.feed_cursor(upto)
        )

    async def feed_state(self) -> FeedState:
        """Each partition's oldest and newest retained feed ids and length, in partition order."""
        return await self.store.feed_state()

    async def workers_beating(self, since_ms: int) -> WorkerIds:
        """The ids of workers whose last beat is at or after `since_ms` (epoch ms)."""
        return await self.store.workers_beating(since_ms)

    async def ping(self) -> bool:
        return await self.store.ping()

    async def aclose(self) -> None:
        """Close this engine's Redis connections."""
        await self.redis.aclose()

    def protocol(self) -> ProtocolInfo:
        s = self.settings
        return ProtocolInfo(
            protocol_version=PROTOCOL_VERSION,
            live=LiveChannel(
                path=LIVE_PATH,
                parameters={
                    "execution": "an execution id; absent: every execution's events",
                    "after": "the last sequence (or feed id) seen; Last-Event-ID wins",
                },
                headers={"Accept": "text/event-stream", "Last-Event-ID": "the cursor to resume"},
            ),
            heartbeat_seconds=s.heartbeat_seconds,
            event_types=list(EVENT_TYPES),
            stream_types=list(STREAM_TYPES),
            event_schema=schema_of(ExecutionEvent),
            stream_schema=schema_of(StreamMessage),
            limits=msgspec.to_builtins(LIMITS),
            settings={
                k: v
                for k, v in msgspec.to_builtins(s).items()
                if k not in ("api_token", "redis_url", "encryption_keys")
            },
        )

    # -- projections ----------------------------------------------------------------------

    def links(self, execution_id: str) -> ExecutionLinks:
        reg = self.registry
        return ExecutionLinks(
            self_=f"{reg.route_of('executions.get')}?id={execution_id}",
            events=f"{reg.route_of('executions.events')}?id={execution_id}",
            cancel=reg.route_of("executions.cancel"),
            live=f"{LIVE_PATH}?execution={execution_id}",
        )

    def snapshot_from(self, raw: Mapping[bytes, bytes]) -> ExecutionSnapshot:
        """A snapshot hash as the execution it stores (`stored_format.snapshot_of`)."""
        return snapshot_of(raw, self.links)


def as_declared(cap: Capability, output: Any) -> Any:
    """A handler's answer as its declared output type: one in its stored form (`StoredForm`)
    is decoded into it (the JSON it encodes to is that type's); any other is as it is."""
    if isinstance(output, StoredForm):
        return output_decoder(cap.output).decode(msgspec.json.encode(output))
    return output


@functools.cache
def output_decoder(tp: Any) -> msgspec.json.Decoder[Any]:
    """A decoder of `tp` (made once per type): what an output's JSON must decode as."""
    return msgspec.json.Decoder(tp)


_is_async = functools.lru_cache(maxsize=4096)(asyncio.iscoroutinefunction)
"""Whether a handler is `async def`, asked once per handler (every execution asks)."""


async def call_handler(cap: Capability, ctx: Context, value: Any) -> Any:
    """Call a handler with its context: awaited when async, in a thread when plain (a
    daemon thread of `majordomus.handler_threads`, which a stopping worker never waits on)."""
    if _is_async(cap.handler):
        return await cap.handler(ctx, value)
    return await in_thread(cap.handler, ctx, value)


def ended_badly(snap: ExecutionSnapshot) -> MajordomusError:
    """The error of an execution that failed or was cancelled, as its caller is told it."""
    error = snap.error if isinstance(snap.error, ExecutionError) else None
    code: Any = error.code if error is not None and error.code in HTTP_STATUS else "internal"
    if error is None and snap.state == "cancelled":
        code = "cancelled"
    message = error.message if error is not None else f"the execution ended {snap.state}"
    suggestion = error.suggestion if error is not None and error.suggestion else None
    return MajordomusError(
        code,
        f"{snap.capability} ran as {snap.id}, which {snap.state}: {message}",
        suggestion or f"read its events: GET {snap.links.events}",
        snap.id,
    )


def _due_ms(options: StartOptions, collapse: Debounce | Throttle | None) -> int | None:
    """When a start is due (epoch ms; None: now): as its options say, and a debounced one
    no sooner than its window from now (`majordomus.flow`)."""
    if not isinstance(collapse, Debounce):
        return options.start_at_ms
    return max(options.start_at_ms or 0, clock.now_ms() + collapse.window_ms)


@functools.cache
def _plain_plan(priority: str) -> StartPlan:
    """The plan of a start with no options but its capability's priority (made once)."""
    return StartPlan(priority=priority)


def _fingerprint(capability: str, plain: Any) -> str:
    """What an idempotent start was asked to run: its capability and its whole input (keys
    sorted, secrets included, so two starts differing only in a secret differ), hashed."""
    body = json.dumps([capability, plain], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(body.encode()).hexdigest()[:32]


def _unknown(execution_id: str) -> MajordomusError:
    return not_found(
        f"there is no execution {execution_id}",
        "it may have finished longer ago than the retention; list them with executions.list",
    )
