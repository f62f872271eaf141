"""A listener that falls behind costs a bounded amount, however far behind it falls: a
scoped one its buffer of shared entries (references, not copies), an unscoped one its
position in the hub's backlog, which is bounded once for all of them."""

from __future__ import annotations

import asyncio
import gc
import sys

from majordomus.api.live.feed import LISTENER_BUFFER, Backlog, FeedEntry, Listener

ENVELOPE = (
    b'{"sequence":1,"type":"execution.log","data":{"stream":"handler","message":"'
    + b"x" * 200
    + b'"}}'
)


def test_a_slow_listener_keeps_a_bounded_buffer_and_stores_nothing_past_it() -> None:
    listener = Listener("x-1", LISTENER_BUFFER, "0-0")
    entries = [FeedEntry(f"{1000 + i}-0", "x-1", i + 1, ENVELOPE) for i in range(100_000)]
    for entry in entries:
        listener.offer(entry)
    assert len(listener.items) == LISTENER_BUFFER and listener.behind
    # What the listener itself holds: the deque of references to entries every listener
    # shares, and its flags (the entries are the hub's, dispatched once to all).
    own = sys.getsizeof(listener.items) + sum(
        sys.getsizeof(v) for v in vars(listener).values() if not isinstance(v, type(listener.items))
    )
    assert own < 64 * 1024, own
    listener.caught_up()
    assert (listener.behind, len(listener.items)) == (False, 0)


def test_an_unscoped_listener_is_a_position_in_the_shared_backlog() -> None:
    backlog = Backlog(1000, 1)
    listener = Listener(None, LISTENER_BUFFER, "0-0")
    backlog.attach(listener)
    backlog.add([FeedEntry(f"{1000 + i}-0", "x-1", i + 1, ENVELOPE) for i in range(100_000)])
    assert backlog.head == 100_000 and backlog.base == 99_000  # the backlog's own bound
    assert not listener.items and listener.next == 0 and listener.unread
    assert backlog.missed(listener.sent) == 99_000  # what it would be told it missed


def test_the_backlog_adds_nothing_to_what_the_garbage_collector_walks() -> None:
    # The backlog keeps its entries for seconds, past the young generations: were they
    # tracked, every full collection would walk all of them (tens of milliseconds with 500
    # listeners, in whatever request was in flight).
    backlog = Backlog(10_000, 2)
    gc.collect()
    tracked_before = len(gc.get_objects())
    entries = [
        FeedEntry(f"{1000 + i}-0", "x-1", i + 1, ENVELOPE, i % 2, previous=f"{999 + i}-0")
        for i in range(10_000)
    ]
    backlog.add(entries)
    for entry in entries:
        entry.feed_message()
        entry.scoped_message()
    assert not any(gc.is_tracked(entry) for entry in entries)
    # The list that holds them here is one object; the entries and what they hold (their
    # keys, pairs of numbers, are untracked by the first collection that sees them), none.
    gc.collect()
    assert len(gc.get_objects()) - tracked_before < 100
    entry = entries[3]
    assert (entry.stream_id, entry.key, entry.type, entry.partition) == (
        "1003-0", (1003, 0), "execution.log", 1
    )
    assert entry.feed_message().startswith(b"id: 1003-0\nevent: execution.log\n")


async def test_a_wait_an_entry_ended_leaves_the_next_wait_its_whole_timeout() -> None:
    listener = Listener("x-1", LISTENER_BUFFER, "0-0")
    loop = asyncio.get_running_loop()
    loop.call_later(0.01, listener.offer, FeedEntry("1000-0", "x-1", 1, ENVELOPE))
    assert await listener.wait(0.05) is True  # the entry, not the timeout
    listener.items.clear()
    # The first wait's timer fires during this one, which goes on to its own timeout: past
    # a timer due just before it (the loop runs its timers in the order they are due).
    just_before = asyncio.Event()
    loop.call_later(0.29, just_before.set)
    assert await listener.wait(0.3) is False
    assert just_before.is_set()
    listener.release()
