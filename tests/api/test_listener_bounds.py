"""A listener that falls behind costs a bounded amount, however far behind it falls: its
buffer of shared entries (references, not copies) and three numbers for what it missed."""

from __future__ import annotations

import asyncio
import sys

from majordomus.api.live.feed import LISTENER_BUFFER, FeedEntry, Listener

ENVELOPE = (
    b'{"sequence":1,"type":"execution.log","data":{"stream":"handler","message":"'
    + b"x" * 200
    + b'"}}'
)


def test_a_slow_unscoped_listener_counts_its_backlog_and_stores_none_of_it() -> None:
    listener = Listener(None, LISTENER_BUFFER, "0-0")
    entries = [FeedEntry(f"{1000 + i}-0", "x-1", i + 1, ENVELOPE) for i in range(100_000)]
    for entry in entries:
        listener.offer(entry)
    assert len(listener.items) == LISTENER_BUFFER
    assert listener.behind and listener.missed == 100_000 - LISTENER_BUFFER
    assert (listener.missed_first, listener.missed_last) == (
        entries[LISTENER_BUFFER].feed_id,
        entries[-1].feed_id,
    )
    # What the listener itself holds: the deque of references to entries every listener
    # shares, and its counters (the entries are the hub's, dispatched once to all).
    own = sys.getsizeof(listener.items) + sum(
        sys.getsizeof(v) for v in vars(listener).values() if not isinstance(v, type(listener.items))
    )
    assert own < 64 * 1024, own
    listener.caught_up()
    assert (listener.missed, listener.missed_first, len(listener.items)) == (0, None, 0)


async def test_a_wait_an_entry_ended_leaves_the_next_wait_its_whole_timeout() -> None:
    listener = Listener("x-1", LISTENER_BUFFER, "0-0")
    loop = asyncio.get_running_loop()
    loop.call_later(0.01, listener.offer, FeedEntry("1000-0", "x-1", 1, ENVELOPE))
    assert await listener.wait(0.05) is True  # the entry, not the timeout
    listener.items.clear()
    # The first wait's timer fires during this one, which goes on to its own timeout.
    started = loop.time()
    assert await listener.wait(0.3) is False
    assert loop.time() - started >= 0.3
    listener.release()
