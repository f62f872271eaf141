"""The workers' signals: a subscription to the wake-up and cancel channels.

`create` publishes on the wake-up channel (so an idle worker polls at once) and an
`execution.cancelling` publishes the execution's id on the cancel channel, both inside
their scripts. A worker holds one subscription to both (to the cancel channel alone where
the wake-up list is its signal: `workers/runtime.py`), on a connection of its own (on a
Redis Cluster, to one of its nodes: a PUBLISH reaches every node's subscribers, so any one
hears them all; `majordomus.store.cluster.pubsub_of`); what it does on a signal, and how
it resubscribes when Redis goes away, is `workers/`'s. A signal may be missed while no one
listens: the poll fallback and the next beat's state check are what make up for it, not
this module.

The subscription reads in slices of `SIGNAL_READ_SECONDS` and pings every
`SIGNAL_PING_SECONDS`: a connection that answers nothing for `SIGNAL_SILENCE_SECONDS` is
broken (a server gone without a reset, a proxy holding a dead socket), and the iteration
ends with `TimeoutError` so its owner subscribes again. A plain `listen()` would instead
wait for the client's socket timeout, and reconnect behind its owner's back.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any, Literal

from redis.exceptions import TimeoutError as _TimeoutError

from majordomus.store.base import StoreBase
from majordomus.store.cluster import pubsub_of

SIGNAL_READ_SECONDS = 1.0
"""One read of the subscription waits at most this (below the client's socket timeout)."""
SIGNAL_PING_SECONDS = 5.0
"""How often a quiet subscription pings Redis."""
SIGNAL_SILENCE_SECONDS = 12.0
"""A subscription that heard nothing (no signal, no pong) for this long is broken."""
_PING = b"majordomus-signals"


@dataclass(frozen=True)
class Signal:
    """A wake-up (there may be work: `execution_id` was queued, so its partition has some),
    or a cancel of `execution_id`."""

    kind: Literal["wake", "cancel"]
    execution_id: str = ""


class SignalStore(StoreBase):
    async def subscribe_signals(self, wake: bool = True) -> AsyncGenerator[Signal, None]:
        """Subscribe to both channels (the cancel channel alone without `wake`); answers,
        once subscribed, the signals as they arrive.

        The connection is given back when the iteration ends, however it ends (close it,
        or let it raise)."""
        pubsub = await pubsub_of(self.redis)
        channels = (self.keys.wake_channel,) if wake else ()
        try:
            await pubsub.subscribe(*channels, self.keys.cancel_channel)
        except BaseException:
            await pubsub.aclose()
            raise
        return self._arrivals(pubsub)

    async def _arrivals(self, pubsub: Any) -> AsyncGenerator[Signal, None]:
        cancel = self.keys.cancel_channel.encode()
        heard = pinged = time.monotonic()
        try:
            while True:
                message = await pubsub.get_message(timeout=SIGNAL_READ_SECONDS)
                now = time.monotonic()
                if message is not None:
                    heard = now
                elif now - heard > SIGNAL_SILENCE_SECONDS:
                    raise _TimeoutError(
                        f"the signal subscription heard nothing for {SIGNAL_SILENCE_SECONDS:.0f}s"
                    )
                if now - pinged >= SIGNAL_PING_SECONDS:
                    pinged = now
                    await pubsub.ping(_PING)
                if message is None or message.get("type") != "message":
                    continue
                kind: Literal["wake", "cancel"] = "cancel" if message["channel"] == cancel else "wake"
                yield Signal(kind, message["data"].decode())
        finally:
            await pubsub.aclose()
