"""The shared feed reader of an API process (`FeedHub`) and the listeners it feeds.

`FeedHub` is the only thing in an API process that blocks on Redis for live events: one
task reads every partition's feed through the engine (`Engine.read_feed`, blocking, the
partitions merged) and hands each entry to the listeners that want it (the channels of
that execution, every unscoped channel, and `executions.wait` long polls), each through a
bounded buffer. So an API process holds a bounded number of Redis connections however
many clients listen, and a slow client never slows an execution or another client: when
its buffer overflows its listener is marked behind, stops receiving, and its owner catches
up from Redis. A live channel waiting with nothing buffered takes the next entry straight
through instead (`Listener.passes`): written from the reader's task, with no wake-up of
the channel's.

The hub's cursor is a feed cursor (`majordomus.store.feed`: one stream id per partition),
and each entry carries the cursor after it, which is the hub's cursor once it is
dispatched: an unscoped channel that has sent everything the hub has sends it as the SSE
id, formatted once for all of them.

This module knows feed entries and listeners; it does not write to a client, nor decide
what a channel sends (`api.live.channel`, `api.live.scopes`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable

import msgspec

from majordomus.api.live.sse import sse_event
from majordomus.config import LIMITS, Settings
from majordomus.engine import Engine
from majordomus.errors import MajordomusError, unavailable
from majordomus.loops import Failures, stop_task, within
from majordomus.model import TERMINAL_EVENT_TYPES
from majordomus.states import FINAL
from majordomus.store.feed import FeedEntry as StoredFeedEntry
from majordomus.store.feed import newest_cursor, stream_key

log = logging.getLogger("majordomus.live")

LISTENER_BUFFER = 1024
"""Entries one listener may have waiting before it is marked behind and catches up from Redis."""
READ_BLOCK_MS = 5000
"""How long the shared reader blocks on the feed per call (it loops at once when woken)."""
FEED_PAGE = 1000
"""Feed entries read per call, by the shared reader and by a catching-up unscoped channel."""
HUB_START_WAIT = 2.5
"""How long a new channel waits for the shared reader to reach Redis before answering 503."""
FEED_SHARE = 4.0
"""Feeding the unscoped channels takes at most 1/FEED_SHARE of the loop's time: after a
round that worked t, the next waits (FEED_SHARE - 1) * t."""
FEED_SLICE_SECONDS = 0.0005
"""The longest a round of feeding runs before letting the loop's other work go first."""
TURN_BUDGET_SECONDS = 0.0005
"""What the unscoped channels' own writes may take of one turn of the event loop (`Turns`)."""
WRITE_BYTES = 32_768
"""The most an unscoped channel writes at once from the backlog (a slow client's server
buffer holds about this beyond its high-water mark)."""
PACE_SECONDS = 0.02
"""While every listener of a process has entries still to send (slow clients, each behind
the backlog's head), its reader reads at most this often: a read gets what came meanwhile
in one call instead of one or two entries each, and a listener reaching the head wakes it
at once (`FeedHub.hungry`). A read that fills a page is followed by the next at once."""
REST_SECONDS = 2.0
"""How long the shared reader goes on reading after its last listener left, before it rests
(a client that reconnects at once finds it still reading)."""
READER_BACKOFF_CAP_SECONDS = 2.0
"""The longest wait between two attempts of the shared reader while Redis is away, so live
channels resume within two seconds of its return."""


class EventHead(msgspec.Struct):
    """What the live channel reads of a stored event: the rest passes through as it is."""

    type: str
    sequence: int

    @property
    def terminal(self) -> bool:
        return self.type in TERMINAL_EVENT_TYPES


head_of = msgspec.json.Decoder(EventHead).decode


feed_key = stream_key
"""A stream id as it orders (`1701234567890` is `1701234567890-0`)."""


class FeedEntry(msgspec.Struct, gc=False):
    """One feed entry as the hub hands it to every listener: its envelope parsed once, and
    its SSE message formatted once (per channel kind) however many listeners send it.

    Not tracked by the garbage collector (`gc=False`: it holds strings, bytes, numbers and
    a tuple of two numbers, so it can be in no cycle). The backlog keeps thousands of them
    for seconds, so most outlive the young generations: tracked, they made the collector's
    full passes come every few seconds and walk every one of them, pauses of tens of
    milliseconds in whatever request was in flight."""

    feed_id: str
    """The feed cursor to resume after it: its id on the unscoped channel (with one
    partition, its stream id)."""
    execution_id: str
    sequence: int
    envelope: bytes
    partition: int = 0
    stream_id: str = ""
    """Its id in its partition's feed (its `feed_id` when not given)."""
    previous: str | None = None
    """The cursor before it (the one it was read after, or the previous entry's): a
    channel at that cursor moves to `feed_id` by sending it."""
    key: tuple[int, int] = (0, 0)
    """Its stream id as it orders (`feed_key`), computed once for every unscoped channel."""
    type: str = ""
    ordinal: int = 0
    """Its place among the entries of its partition the hub dispatched (`Backlog`)."""
    _scoped: bytes | None = None
    _feed: bytes | None = None

    def __post_init__(self) -> None:
        stream_id = self.stream_id = self.stream_id or self.feed_id
        self.key = feed_key(stream_id)
        self.type = head_of(self.envelope).type

    @property
    def terminal(self) -> bool:
        return self.type in TERMINAL_EVENT_TYPES

    def scoped_message(self) -> bytes:
        """The message of the execution's own channel (its sequence as the SSE id)."""
        if self._scoped is None:
            self._scoped = sse_event(self.sequence, self.type, self.envelope)
        return self._scoped

    def feed_message(self) -> bytes:
        """The message of the unscoped channel (the feed cursor after it as the SSE id)."""
        if self._feed is None:
            self._feed = sse_event(self.feed_id, self.type, self.envelope)
        return self._feed


def feed_entries(raw: Iterable[StoredFeedEntry], after: str) -> list[FeedEntry]:
    """The entries of a feed read after the cursor `after`, each told the cursor before it."""
    entries: list[FeedEntry] = []
    previous = after
    for cursor, execution_id, sequence, envelope, partition, stream_id in raw:
        entries.append(
            FeedEntry(cursor, execution_id, sequence, envelope, partition, stream_id, previous)
        )
        previous = cursor
    return entries


class Turns:
    """How much of one turn of the event loop the unscoped channels' own loops may take.

    Clients that read slowly become writable together (one poll of the loop can wake
    hundreds), and each then writes what it missed: run in one turn, those writes would
    hold every request that came meanwhile. Each write is timed (`spent`) against the
    turn's budget; once it is spent, the channels that want to write queue (`take`) and
    are let go, first come first, as many as the budget fits by their recent cost, a turn
    later: the loop polls its sockets in between, so requests go first."""

    def __init__(self, budget: float = TURN_BUDGET_SECONDS) -> None:
        self.budget = budget
        self.used = 0.0
        self.cost = budget / 10
        """What one write has cost lately (a moving average)."""
        self.waiting: deque[asyncio.Future[None]] = deque()
        self._resetting = False

    async def take(self) -> None:
        turn = self.turn_now()
        if turn is not None:
            await turn

    def turn_now(self) -> asyncio.Future[None] | None:
        """`take` for a callback (`EventStream`): None when a turn is free now; else a
        future, done when its turn comes."""
        if self.used >= self.budget or self.waiting:
            turn = asyncio.get_running_loop().create_future()
            self.waiting.append(turn)
            self._reset_soon()
            return turn
        self._reset_soon()
        return None

    def spent(self, seconds: float) -> None:
        self.used += seconds
        self.cost += (seconds - self.cost) / 8

    def _reset_soon(self) -> None:
        if not self._resetting:
            self._resetting = True
            asyncio.get_running_loop().call_soon(self._reset)

    def _reset(self) -> None:
        self._resetting = False
        self.used = 0.0
        let_go = max(1, int(self.budget / max(self.cost, 1e-6)))
        waiting = self.waiting
        while waiting and let_go:
            turn = waiting.popleft()
            if not turn.done():  # a channel that went away meanwhile gave its place up
                turn.set_result(None)
                let_go -= 1
        if waiting:
            self._reset_soon()


class Backlog:
    """The last entries the hub dispatched, in memory, read by every unscoped channel.

    An unscoped channel is a position in it (`Listener.next`, and per partition the next
    ordinal it has not sent, `Listener.sent`), not a buffer of its own: the hub appends an
    entry once, each channel sends from its position at the pace its client reads, and a
    slow channel costs nothing until it writes. A channel further behind than the backlog
    holds is told exactly what it was not sent: the entries of each partition between its
    ordinal and the oldest one held (`missed`), and the cursors around them.

    A fixed array indexed modulo its size, so that a channel reads from its position in
    constant time however far the backlog goes."""

    def __init__(self, size: int, partitions: int) -> None:
        self.turns = Turns()
        """The share of a loop turn its readers' own loops take (`FeedScope.advance`)."""
        self.size = max(1, size)
        self.slots: list[FeedEntry | None] = [None] * self.size
        self.base = 0
        """The index of the oldest entry held (indices count every entry dispatched)."""
        self.head = 0
        """The index the next entry dispatched takes."""
        self.base_cursor: str | None = None
        """The feed cursor before the oldest entry held: after every entry dropped."""
        self.ordinals = [0] * partitions
        """Per partition, the ordinal the next entry of that partition takes."""
        self.base_ordinals = [0] * partitions
        """Per partition, the ordinal of its oldest entry held (so how many were dropped)."""

    def add(self, entries: list[FeedEntry]) -> None:
        size, slots, ordinals = self.size, self.slots, self.ordinals
        for entry in entries:
            index = self.head
            if index - self.base >= size:
                old = slots[self.base % size]
                assert old is not None
                self.base += 1
                self.base_cursor = old.feed_id
                self.base_ordinals[old.partition] = old.ordinal + 1
            entry.ordinal = ordinals[entry.partition]
            ordinals[entry.partition] += 1
            slots[index % size] = entry
            self.head = index + 1

    def at(self, index: int) -> FeedEntry:
        entry = self.slots[index % self.size]
        assert entry is not None and self.base <= index < self.head
        return entry

    def attach(self, listener: Listener) -> None:
        """Make `listener` read from here, from the next entry dispatched on."""
        listener.backlog = self
        listener.next = self.head
        listener.sent = list(self.ordinals)

    def missed(self, sent: list[int]) -> int:
        """How many entries no longer held lie past `sent` (a channel's ordinals)."""
        return sum(max(0, held - mine) for held, mine in zip(self.base_ordinals, sent, strict=True))


class Listener:
    """One consumer of the hub: a bounded buffer, and a flag for having fallen behind."""

    def __init__(
        self,
        execution_id: str | None,
        size: int,
        start_id: str | None,
        wake: Callable[[], None] | None = None,
    ) -> None:
        self.execution_id = execution_id
        self.size = size
        self.start_id = start_id
        """The hub's cursor when this listener registered: everything after it is offered."""
        self.items: deque[FeedEntry] = deque()
        self.behind = False
        """A scoped listener's buffer overflowed: its owner catches up from the execution's
        stream (an unscoped one is offered nothing: it reads the backlog)."""
        self.closing: str | None = None
        self._waiter: asyncio.Future[bool] | None = None
        self._deadline = 0.0
        """When the current wait times out (the event loop's clock)."""
        self._timer: asyncio.TimerHandle | None = None
        self.on_wake = wake
        """Called whenever it has something to do, for an owner that waits on many listeners
        at once (a task subscription, `api.mcp.task_listen`) rather than on `wait`."""
        self.passes: Callable[[FeedEntry], bool] | None = None
        """Set by an owner while it waits with nothing buffered (a live channel's
        `Passthrough`): takes an entry straight through (True: handled, nothing to wake
        for) or declines it (False: buffered and woken for, as without it)."""
        self.sends: Callable[[], bool] | None = None
        """An unscoped listener's `passes`: set by its owner while it waits, it sends what
        the backlog holds past its position straight from the hub's task (True), or leaves
        it to the owner's loop, woken (False)."""
        self._timeout = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self.backlog: Backlog | None = None
        """An unscoped listener's source: it is offered nothing, it reads the backlog."""
        self.next = 0
        """An unscoped listener's position in the backlog: the next index to send."""
        self.sent: list[int] = []
        """An unscoped listener's next ordinal per partition: those below are sent (or were
        before its cursor)."""
        self.hungry: Callable[[], None] | None = None
        """An unscoped listener's hub's `hungry`: called as it waits with all sent."""

    @property
    def waiting(self) -> bool:
        """Whether its owner waits (`wait`) right now."""
        return self._waiter is not None

    def offer(self, entry: FeedEntry) -> None:
        passes = self.passes
        if passes is not None and not self.items and not self.behind and self.closing is None:
            if passes(entry):
                if self._loop is not None:
                    # The owner was not woken: the silence its wait times starts again now.
                    self._deadline = self._loop.time() + self._timeout
                return
        if not self.behind and len(self.items) < self.size:
            self.items.append(entry)
        else:
            self.behind = True
        self._wake()

    def close(self, reason: str) -> None:
        self.closing = reason
        self._wake()

    def nudge(self) -> None:
        """Wake the owner with nothing buffered (its `passes` left it something to settle)."""
        self._wake()

    def _wake(self) -> None:
        if self.on_wake is not None:
            self.on_wake()
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(True)

    def caught_up(self) -> None:
        """Forget the buffer: the caller reads Redis next, so nothing offered later is lost."""
        self.items.clear()
        self.behind = False

    def fed(self) -> None:
        """Its owner's `passes` sent what the backlog had: the silence its wait times starts
        again now."""
        if self._loop is not None:
            self._deadline = self._loop.time() + self._timeout

    @property
    def unread(self) -> bool:
        """An unscoped listener with backlog entries past its position."""
        return self.backlog is not None and self.next < self.backlog.head

    async def wait(self, timeout: float, busy: bool = False) -> bool:
        """Until there is something to do (an entry, being behind, closing); False on timeout.
        `busy`: its owner's last write to a slow client goes on, and its end has the hub
        feed it (`Passthrough.done`): entries of the backlog past its position are not
        something to do for its own loop meanwhile."""
        if self.items or self.behind or self.closing or (self.unread and not busy):
            return True
        if self.hungry is not None and not self.unread:
            self.hungry()
        # A bare future and a timer rather than `wait_for` on an `Event`: a fan-out wakes
        # every listener of an execution per event, and `wait_for` costs each a new task.
        # The timer outlives a wait that an entry ends, and is only set again when it would
        # fire too late: so a listener of a busy execution touches the loop's timer heap
        # about once a timeout, not twice an event.
        loop = self._loop = asyncio.get_running_loop()
        self._timeout = timeout
        self._deadline = loop.time() + timeout
        timer = self._timer
        if timer is None or timer.when() > self._deadline:
            if timer is not None:
                timer.cancel()
            self._timer = loop.call_at(self._deadline, self._timed_out, loop)
        waiter = self._waiter = loop.create_future()
        try:
            return await waiter
        finally:
            self._waiter = None

    def _timed_out(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        if loop.time() < self._deadline:
            # Set for a wait that ended on an entry: the one going on now ends later.
            self._timer = loop.call_at(self._deadline, self._timed_out, loop)
            return
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(False)

    def release(self) -> None:
        """It waits no more (its hub let it go): its timer goes."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class FeedHub:
    """The one blocking feed read of an API process, fanned out to every listener.

    It reads only while someone listens: the reader starts with the first listener (or the
    first `ready`) and rests `REST_SECONDS` after the last one left, its backlog and cursor
    let go (a process nobody listens to reads no feed: each read is a Redis call and a
    tenth of a core at a busy feed, on the loop that answers starts)."""

    def __init__(self, engine: Engine, settings: Settings, buffer: int = LISTENER_BUFFER) -> None:
        self.engine = engine
        self.settings = settings
        self.buffer = buffer
        self.scoped: dict[str, set[Listener]] = {}
        self.unscoped: set[Listener] = set()
        self.unparked: set[Listener] = set()
        """The unscoped listeners a round visits: all but those whose last write to a slow
        client goes on (`park`): with hundreds of slow clients, most are writing at any
        moment, and a round that visits them only to find so costs a core's share."""
        self.channels = 0
        """Open live channels (bounded by `MAJORDOMUS_MAX_LIVE`); long polls are not counted."""
        self.cursor: str | None = None
        """The feed cursor of the last entry dispatched (every partition's position)."""
        self.started = asyncio.Event()
        self.healthy = False
        self.closed = False
        self.dispatched = 0
        self.backlog = Backlog(settings.live_backlog, settings.partitions)
        self._task: asyncio.Task[None] | None = None
        self._feeding: asyncio.Handle | None = None
        self._feed_after = 0.0
        """The `perf_counter` time before which the unscoped channels are not fed again."""
        self._again = False
        """A round was asked for (`feed_soon`) since the current one began."""
        self._round: deque[Listener] = deque()
        """The unscoped listeners the current round of `_feed` has still to feed."""
        self._round_work = 0.0
        self._armed = False
        """`start` was called: the reader runs while anyone listens."""
        self._rest: asyncio.TimerHandle | None = None
        self._resting: set[asyncio.Task[None]] = set()
        """Readers put to rest, until they have ended."""
        self._asking = 0
        """Callers waiting in `ready`: they keep the reader from resting, as listeners do."""
        self._hunger = asyncio.Event()
        """Set when someone waits for entries the backlog does not hold yet (`hungry`)."""

    # -- life --

    async def start(self) -> None:
        """From now on, the feed is read while anyone listens."""
        self._armed = True
        if self.listeners:
            self._wanted()

    async def stop(self, reason: str = "server stopping") -> None:
        self.close_all(reason)
        self._armed = False
        self._cancel_rest()
        if self._feeding is not None:
            self._feeding.cancel()
            self._feeding = None
        if self._resting:
            await asyncio.wait(set(self._resting))
        if self._task is not None:
            task, self._task = self._task, None
            await stop_task(task, log)
            await self.engine.stop_feed_reads()

    def _wanted(self) -> None:
        """Someone listens: the reader runs (started if it rests)."""
        self._cancel_rest()
        if self._task is None and self._armed and not self.closed:
            self._task = asyncio.create_task(self._run(), name="majordomus-feed-reader")

    def _maybe_rest(self) -> None:
        """Nobody listens: the reader rests in `REST_SECONDS` unless someone comes."""
        if self._task is not None and self._rest is None and not self._wanted_by():
            self._rest = asyncio.get_running_loop().call_later(REST_SECONDS, self._go_rest)

    def _wanted_by(self) -> int:
        return self.listeners + self._asking

    def _cancel_rest(self) -> None:
        if self._rest is not None:
            self._rest.cancel()
            self._rest = None

    def _go_rest(self) -> None:
        self._rest = None
        if self._wanted_by() or self._task is None:
            return
        task, self._task = self._task, None
        if self._feeding is not None:
            self._feeding.cancel()
            self._feeding = None
        # What the next reader starts from: the feed's newest entry then, as at the first.
        self.cursor = None
        self.started = asyncio.Event()
        self.healthy = False
        self.backlog = Backlog(self.settings.live_backlog, self.settings.partitions)
        self._round.clear()
        self._feed_after = 0.0
        self._again = False
        resting = asyncio.get_running_loop().create_task(self._put_to_rest(task))
        self._resting.add(resting)
        resting.add_done_callback(self._resting.discard)
        log.debug("feed reader: nobody listens, resting")

    async def _put_to_rest(self, task: asyncio.Task[None]) -> None:
        await stop_task(task, log)
        if self._task is None:  # a Redis Cluster's waiting reads end with their reader
            await self.engine.stop_feed_reads()

    def close_all(self, reason: str = "server stopping") -> None:
        """End every live channel with `stream.closing{reason}` (clients reconnect elsewhere)."""
        self.closed = True
        for listener in self._all():
            listener.close(reason)

    def _all(self) -> Iterable[Listener]:
        yield from list(self.unscoped)
        for group in list(self.scoped.values()):
            yield from list(group)

    @property
    def listeners(self) -> int:
        return len(self.unscoped) + sum(len(g) for g in self.scoped.values())

    async def _run(self) -> None:
        failures = Failures(log, "the feed reader", cap=READER_BACKOFF_CAP_SECONDS)
        while True:
            try:
                if self.cursor is None:
                    self.cursor = newest_cursor(await self.engine.feed_state())
                    self.backlog.base_cursor = self.cursor
                    for listener in self._all():  # registered before there was a cursor
                        if listener.start_id is None:
                            listener.start_id = self.cursor
                    self.started.set()
                    self._answered(failures)
                cursor = self.cursor
                entries = feed_entries(
                    await self.engine.read_feed(cursor, READ_BLOCK_MS, FEED_PAGE), cursor
                )
            except Exception as exc:  # noqa: BLE001  back off, then read again
                failures.failed(exc)
                self.healthy = False
                await failures.pause()
                continue
            self._answered(failures)
            if entries:
                # The cursor moves and the entries go out with no await in between, so a
                # listener registering now is offered exactly the entries after `cursor`.
                self.cursor = entries[-1].feed_id
                self._dispatch(entries)
            if len(entries) < FEED_PAGE and not self._anyone_hungry():
                self._hunger.clear()
                await within(PACE_SECONDS, self._hunger.wait())

    def _anyone_hungry(self) -> bool:
        """Does anyone wait for entries the backlog does not hold yet? Every scoped listener
        and every caller of `ready` may; an unscoped one does once it has sent them all."""
        if self.scoped or self._asking:
            return True
        head = self.backlog.head
        return any(listener.next >= head for listener in self.unparked)

    def hungry(self) -> None:
        """Someone waits for entries the backlog does not hold yet: the reader reads now."""
        self._hunger.set()

    def _answered(self, failures: Failures) -> None:
        if not self.healthy:
            failures.recovered()
            log.debug("feed reader: following the feed from %s", self.cursor)
        self.healthy = True

    def _dispatch(self, entries: list[FeedEntry]) -> None:
        self.backlog.add(entries)
        scoped = self.scoped
        if scoped:
            for entry in entries:
                group = scoped.get(entry.execution_id)
                if group:
                    for listener in group:
                        listener.offer(entry)
        self.dispatched += len(entries)
        if self.unscoped and self._feeding is None:
            if time.perf_counter() >= self._feed_after:
                self._feed()
            else:
                self._feed_later()

    def _feed_later(self) -> None:
        delay = self._feed_after - time.perf_counter()
        self._feeding = asyncio.get_running_loop().call_later(max(0.0, delay), self._feed)

    def park(self, listener: Listener) -> None:
        """Its channel's write to a slow client goes on: no round visits it until `unpark`."""
        self.unparked.discard(listener)

    def unpark(self, listener: Listener) -> None:
        """Its channel's write ended (or none goes on): rounds visit it again."""
        if listener in self.unscoped:
            self.unparked.add(listener)
            if listener.next >= self.backlog.head:
                self._hunger.set()

    def feed_soon(self) -> None:
        """A write to a slow client ended with more to send (`Passthrough.done`): a round
        of feeding soon, at the pace `FEED_SHARE` allows, if none is coming."""
        self._again = True
        if self.unscoped and self._feeding is None:
            self._feed_later()

    def _feed(self) -> None:
        """Hand the backlog's new entries to every unscoped channel: written at once for a
        channel waiting with its client keeping up, left to the others' own loops (one
        writing to a slow client reads from its position when its write completes).

        A round of every channel goes in slices of at most `FEED_SLICE_SECONDS`, each after
        what else waits on the loop (a start, a page), and rounds take at most a
        `FEED_SHARE`th of the time: with many channels, the entries go out in fewer, bigger
        writes, and the process's other work keeps its pace."""
        t0 = time.perf_counter()
        round_ = self._round
        if not round_:
            round_.extend(self.unparked)
            self._round_work = 0.0
            self._again = False
        head = self.backlog.head
        while round_:
            listener = round_.popleft()
            if listener.next < head and listener.closing is None and listener.waiting:
                sends = listener.sends
                if sends is not None and sends():
                    listener.fed()
                    if listener.next >= head:
                        self._hunger.set()
                else:
                    listener.nudge()
            if time.perf_counter() - t0 > FEED_SLICE_SECONDS:
                break
        now = time.perf_counter()
        self._round_work += now - t0
        if round_:
            self._feeding = asyncio.get_running_loop().call_soon(self._feed)
            return
        self._feeding = None
        self._feed_after = now + (FEED_SHARE - 1) * self._round_work
        if self._again:  # a write that ended during the round, maybe after its turn in it
            self._feed_later()

    # -- listeners --

    def register(
        self, execution_id: str | None, wake: Callable[[], None] | None = None
    ) -> Listener:
        listener = Listener(execution_id, self.buffer, self.cursor, wake)
        if execution_id is None:
            self.backlog.attach(listener)
            listener.hungry = self.hungry
            self.unscoped.add(listener)
            self.unparked.add(listener)
        else:
            self.scoped.setdefault(execution_id, set()).add(listener)
        if self.closed:
            listener.close("server stopping")
        self._wanted()
        self._hunger.set()
        return listener

    def unregister(self, listener: Listener) -> None:
        listener.release()
        if listener.execution_id is None:
            self.unscoped.discard(listener)
            self.unparked.discard(listener)
        else:
            group = self.scoped.get(listener.execution_id)
            if group is not None:
                group.discard(listener)
                if not group:
                    del self.scoped[listener.execution_id]
        self._maybe_rest()

    async def ready(self) -> None:
        """Wait (bounded) until the reader has its cursor; `unavailable` if Redis is away.
        What a listener registered before it returns is offered every entry after it
        (stopping, it returns at once: its listeners are told so)."""
        if self.started.is_set() or self.closed:
            return
        self._wanted()
        self._hunger.set()
        self._asking += 1
        try:
            if not await within(HUB_START_WAIT, self.started.wait()):
                raise unavailable("the live channel cannot reach Redis yet", "try again shortly")
        finally:
            self._asking -= 1
            self._maybe_rest()  # asked for, and nobody registered after all

    async def read_after(self, execution_id: str, after: int, block_ms: int) -> list[bytes]:
        """`Engine.follow` for `executions.wait`: the events after `after`, waiting on the hub
        (not on a Redis connection of its own) for up to `block_ms` when there are none."""
        listener = self.register(execution_id)
        try:
            with contextlib.suppress(MajordomusError):  # Redis away: the page read says so
                await self.ready()
            page = await self.engine.raw_page(execution_id, after, LIMITS.page_events)
            if page is None:
                return []
            if page.events or page.state in FINAL:
                return page.events
            if self.healthy and not self.closed:
                if not await listener.wait(block_ms / 1000):
                    return []
            else:
                # Not following the feed right now (Redis was away, or stopping): poll.
                await asyncio.sleep(min(block_ms, 500) / 1000)
            page = await self.engine.raw_page(execution_id, after, LIMITS.page_events)
            return page.events if page is not None else []
        finally:
            self.unregister(listener)
