"""What the two kinds of live channel differ in: one execution's events, or every one's.

A channel is opened on a scope: `ExecutionScope` (`?execution=...`) orders events by their
sequence and catches up from the execution's own stream; `FeedScope` (no execution) orders
them by feed cursor (a stream id per partition, `majordomus.store.feed`) and catches up
from the partitions' feeds. Each reads its history after the client's cursor, sends it,
then turns what its listener is offered into messages, dropping what was already sent and
catching up from Redis when the listener fell behind; when the store dropped events this
client had not been sent, it says so with `stream.lagged{dropped}`.

History then live, with no gap and no duplicate: the channel registers its listener with
the hub before a scope reads the history, so anything appended after that read reaches the
listener, and the scope drops live entries it already sent (by sequence, or by each
partition's stream id).

A scope reads through the engine only; it does not wait, beat or close (`api.live.channel`
runs the one loop every scope follows).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Protocol

from majordomus.api.live.feed import (
    FEED_PAGE,
    WRITE_BYTES,
    FeedEntry,
    Listener,
    feed_entries,
    feed_key,
    head_of,
)
from majordomus.api.live.sse import EventStream, lagged, sse_event
from majordomus.engine import Engine, RawPage
from majordomus.errors import not_found
from majordomus.ids import PROTOCOL_VERSION
from majordomus.model import StreamReadyData
from majordomus.states import FINAL
from majordomus.store.feed import cursor_of, cursor_parts, start_cursor

HISTORY_PAGE = 100
"""Events of a channel's history read and written at a time."""

Ending = str | None
"""Why a channel ends now (`finished`, `GONE`), sent as `stream.closing`; None: it goes on."""

GONE = "gone: Redis no longer has this execution (it lost its data, or the execution expired)"
"""The end of a scoped channel whose execution the store no longer has."""


class ChannelScope(Protocol):
    async def ready(self, heartbeat: float) -> StreamReadyData | None:
        """Read the history after the cursor; what `stream.ready` says, or None for 204."""

    async def replay(self, chunk: list[bytes], stream: EventStream) -> Ending:
        """Put the history read by `ready` into `chunk` (writing full pages on the way)."""

    async def advance(self, listener: Listener, chunk: list[bytes], stream: EventStream) -> Ending:
        """Put what `listener` holds into `chunk`, catching up from Redis if it fell behind."""

    def passing(self, entry: FeedEntry) -> bytes | None:
        """The message of a live entry that goes out as it comes (the next in order, ending
        nothing), with the cursor moved past it; None leaves it to `advance`."""

    async def idle(self) -> Ending:
        """A heartbeat passed with nothing to send: whether the channel ends now."""

    def unsent(self) -> bytes | None:
        """What the channel's source holds past its position, with the position moved past
        it (the unscoped channel's backlog); None: nothing, or entries come by `advance`."""


class ExecutionScope:
    """One execution's channel: its sequence is the SSE id, and its terminal event the end."""

    def __init__(self, engine: Engine, execution_id: str, after: int) -> None:
        self.engine = engine
        self.execution_id = execution_id
        self.last = after
        self.first: RawPage | None = None

    async def ready(self, heartbeat: float) -> StreamReadyData | None:
        after = self.last
        first = await self.engine.raw_page(self.execution_id, after, HISTORY_PAGE)
        if first is None:
            raise not_found(
                f"there is no execution {self.execution_id}",
                "it may have finished longer ago than the retention",
            )
        if not first.events and first.state in FINAL and after >= first.last_sequence:
            return None
        self.first = first
        upto = first.last_sequence
        oldest = head_of(first.events[0]).sequence if first.events else upto + 1
        return StreamReadyData(
            protocol_version=PROTOCOL_VERSION,
            scope="executions",
            executions=[self.execution_id],
            replayed=max(0, upto - oldest + 1),
            truncated=first.truncated,
            heartbeat_seconds=heartbeat,
        )

    async def replay(self, chunk: list[bytes], stream: EventStream) -> Ending:
        first = self.first
        assert first is not None, "ready() reads the first page"
        # What was dropped before the cursor is `truncated` in `stream.ready`, not a lag.
        if self._emit(first.events, chunk, lag=False):
            return "finished"
        if first.more:
            await stream.write(b"".join(chunk))
            chunk.clear()
            return await self._catch_up(chunk, stream)
        return "finished" if first.state in FINAL else None

    async def advance(self, listener: Listener, chunk: list[bytes], stream: EventStream) -> Ending:
        gap = False
        while listener.items:
            entry = listener.items.popleft()
            seq = entry.sequence
            if seq <= self.last:
                # Already sent, or before a cursor past the end; a terminal one still ends
                # the channel.
                if entry.terminal:
                    return "finished"
                continue
            if seq != self.last + 1:
                gap = True
                break
            chunk.append(entry.scoped_message())
            self.last = seq
            if entry.terminal:
                return "finished"
        if gap or listener.behind:
            # Behind: forget the buffer (Redis is read next, so nothing offered from now on
            # is lost) and catch up from the execution's own stream.
            listener.caught_up()
            return await self._catch_up(chunk, stream)
        return None

    def passing(self, entry: FeedEntry) -> bytes | None:
        seq = entry.sequence
        if seq != self.last + 1 or entry.terminal:
            return None
        self.last = seq
        return entry.scoped_message()

    def unsent(self) -> bytes | None:
        return None  # its entries are offered to its listener, and sent by `advance`

    async def idle(self) -> Ending:
        """A quiet execution is looked up once a heartbeat: one Redis no longer has (it came
        back empty) ends the channel, rather than heartbeats for ever."""
        return GONE if await self.engine.state_of(self.execution_id) is None else None

    async def _catch_up(self, chunk: list[bytes], stream: EventStream) -> Ending:
        """Send what the store holds after the last event sent, a page at a time (so a
        burst of clients replaying at once holds a page each in memory)."""
        while True:
            page = await self.engine.raw_page(self.execution_id, self.last, HISTORY_PAGE)
            if page is None:
                return GONE
            if self._emit(page.events, chunk, lag=True):
                return "finished"
            if not page.events:
                return "finished" if page.state in FINAL else None
            if not page.more:
                return None
            await stream.write(b"".join(chunk))
            chunk.clear()

    def _emit(self, envelopes: list[bytes], chunk: list[bytes], lag: bool) -> bool:
        """Format the events after the last one sent into `chunk`; a jump in sequence (the
        store dropped events this client had not been sent) is announced with
        `stream.lagged` when `lag`. Answers whether a terminal event went out."""
        for envelope in envelopes:
            head = head_of(envelope)
            seq = head.sequence
            if seq <= self.last:
                continue
            if lag and seq > self.last + 1:
                chunk.append(lagged(seq - self.last - 1))
            chunk.append(sse_event(seq, head.type, envelope))
            self.last = seq
            if head.terminal:
                return True
        return False


class FeedScope:
    """Every execution's channel: the feed cursor is the SSE id, and the channel never ends.

    Its position is one stream id per partition (`parts`, and `last` as they order), so an
    entry is new when it lies past its own partition's position, whatever the order the
    partitions' entries arrive in. The id sent with an entry is the channel's cursor moved
    past it: the entry's shared message when the channel stood where the hub stood before
    it (`FeedEntry.previous`, the usual case), else a message of its own.

    Its history (after the client's cursor) is read from Redis up to where the hub's
    backlog begins; from there it sends from the backlog (`Backlog`), at its client's
    pace, and never reads Redis again. A channel the backlog left behind is told exactly
    how many entries it was not sent, with the cursors around them (`stream.lagged`), and
    goes on from the oldest entry held."""

    def __init__(
        self,
        engine: Engine,
        cursor: str | None,
        listener: Listener,
        feed_max_events: int,
    ) -> None:
        self.engine = engine
        self.cursor = cursor
        self.listener = listener
        assert listener.backlog is not None, "an unscoped listener reads the hub's backlog"
        self.backlog = listener.backlog
        self.feed_max_events = feed_max_events
        self._move_to(listener.start_id or start_cursor(engine.settings.partitions))
        self.replay_upto: str | None = None

    def _move_to(self, cursor: str) -> None:
        self.last_id = cursor
        self.parts = cursor_parts(cursor)
        self.last = [feed_key(part) for part in self.parts]

    async def ready(self, heartbeat: float) -> StreamReadyData | None:
        truncated = False
        replayed = 0
        if self.cursor is not None:
            cursor = self.engine.feed_cursor(self.cursor)
            self._move_to(cursor)
            # Redis up to the backlog's start, the backlog from there: the listener's
            # position moves to the backlog's start, past what it already has.
            backlog, listener = self.backlog, self.listener
            upto = backlog.base_cursor or cursor
            listener.next = backlog.base
            listener.sent = list(backlog.base_ordinals)
            # What the backlog holds past the cursor is history too (sent from memory):
            # counted, and what it holds before the cursor marked as sent.
            for index in range(backlog.base, backlog.head):
                entry = backlog.at(index)
                if entry.key <= self.last[entry.partition]:
                    listener.sent[entry.partition] = entry.ordinal + 1
                else:
                    replayed += 1
            # Dropped after the cursor: some partition's oldest retained entry lies past
            # its position, and that feed is at its cap (so it was trimmed, not young).
            truncated = any(
                bounds.oldest is not None
                and feed_key(bounds.oldest) > at
                and bounds.length >= self.feed_max_events
                for bounds, at in zip(await self.engine.feed_state(), self.last, strict=True)
            )
            # Counted page by page, never held: the replay reads the pages again as it sends.
            self.replay_upto = upto
            async for page in self._pages_after(cursor, upto):
                replayed += len(page)
        return StreamReadyData(
            protocol_version=PROTOCOL_VERSION,
            scope="all",
            replayed=replayed,
            truncated=truncated,
            heartbeat_seconds=heartbeat,
        )

    async def replay(self, chunk: list[bytes], stream: EventStream) -> Ending:
        if self.replay_upto is not None:
            await self._send_pages(self.last_id, self.replay_upto, chunk, stream)
        return None

    async def advance(self, listener: Listener, chunk: list[bytes], stream: EventStream) -> Ending:
        """Send from the backlog until the position is at its end or a write suspends (a
        slow client): that one goes on by itself while the channel waits, and when it ends
        the hub feeds the channel the rest (`Passthrough.done`), its task left asleep."""
        turns = self.backlog.turns
        while True:
            await stream.settle()
            await turns.take()
            t0 = time.perf_counter()
            message = self.unsent()
            written = True
            if message is not None:
                chunk.append(message)
                written = stream.write_now(b"".join(chunk))
                chunk.clear()
            turns.spent(time.perf_counter() - t0)
            if message is None or not written:
                return None

    def passing(self, entry: FeedEntry) -> bytes | None:
        return None  # an unscoped listener is offered nothing: `unsent` reads the backlog

    def unsent(self) -> bytes | None:
        """The messages of the backlog past the position, at most about `WRITE_BYTES`,
        with the position moved past them; first a `stream.lagged` if the backlog no longer
        holds the next entry. None: nothing to send."""
        backlog, listener = self.backlog, self.listener
        out: list[bytes] = []
        if listener.next < backlog.base:
            out.append(self._lag())
        # Once per entry per channel (hundreds of channels, thousands of entries a second,
        # the delivery's busiest loop): `Backlog.at` and `_take` written out inline.
        sent, last, parts = listener.sent, self.last, self.parts
        slots, capacity = backlog.slots, backlog.size
        single = len(parts) == 1
        last_id = self.last_id
        append = out.append
        size = 0
        index, head = listener.next, backlog.head
        while index < head and size < WRITE_BYTES:
            entry = slots[index % capacity]
            assert entry is not None  # held: base <= index < head
            index += 1
            partition, ordinal = entry.partition, entry.ordinal
            if ordinal < sent[partition] or entry.key <= last[partition]:
                if ordinal >= sent[partition]:
                    sent[partition] = ordinal + 1
                continue  # sent by the replay, or before the client's cursor
            sent[partition] = ordinal + 1
            last[partition] = entry.key
            parts[partition] = entry.stream_id
            if single or entry.previous == last_id:
                last_id = entry.feed_id
                message = entry.feed_message()
            else:
                last_id = cursor_of(parts)
                message = sse_event(last_id, entry.type, entry.envelope)
            size += len(message)
            append(message)
        self.last_id = last_id
        listener.next = index
        return b"".join(out) if out else None

    def _lag(self) -> bytes:
        """The backlog dropped entries this channel had not sent: say exactly how many and
        between which cursors, and move to its oldest entry."""
        backlog, listener = self.backlog, self.listener
        dropped = backlog.missed(listener.sent)
        before = self.last_id
        assert backlog.base_cursor is not None
        for index, part in enumerate(cursor_parts(backlog.base_cursor)):
            if listener.sent[index] < backlog.base_ordinals[index]:
                listener.sent[index] = backlog.base_ordinals[index]
            key = feed_key(part)
            if key > self.last[index]:
                self.last[index] = key
                self.parts[index] = part
        self.last_id = cursor_of(self.parts)
        listener.next = backlog.base
        return lagged(dropped, before, self.last_id)

    async def idle(self) -> Ending:
        return None  # every execution's channel never ends on its own

    def _take(self, entry: FeedEntry) -> bytes:
        """The message of an entry past the position, with the position moved to it."""
        index = entry.partition
        self.last[index] = entry.key
        self.parts[index] = entry.stream_id
        if entry.previous == self.last_id or len(self.parts) == 1:
            self.last_id = entry.feed_id
            return entry.feed_message()
        self.last_id = cursor_of(self.parts)
        return sse_event(self.last_id, entry.type, entry.envelope)

    async def _send_pages(
        self, after_id: str, upto: str | None, chunk: list[bytes], stream: EventStream
    ) -> None:
        """Send the feed after `after_id` (up to `upto`), a page at a time, flushed as it goes."""
        async for page in self._pages_after(after_id, upto):
            for entry in page:
                if entry.key <= self.last[entry.partition]:
                    continue
                chunk.append(self._take(entry))
            await stream.write(b"".join(chunk))
            chunk.clear()

    async def _pages_after(self, after_id: str, upto: str | None) -> AsyncIterator[list[FeedEntry]]:
        """The retained feed after `after_id` (and up to `upto`), `FEED_PAGE` at a time."""
        while True:
            page = feed_entries(await self.engine.feed_after(after_id, FEED_PAGE, upto), after_id)
            if page:
                yield page
            if len(page) < FEED_PAGE:
                return
            after_id = page[-1].feed_id
