"""The workers' signals: a subscription to the wake-up and cancel channels.

`create` publishes on the wake-up channel (so an idle worker polls at once) and an
`execution.cancelling` publishes the execution's id on the cancel channel, both inside
their scripts. A worker holds one subscription to both, on a connection of its own; what
it does on a signal, and how it resubscribes when Redis goes away, is `workers/`'s. A
signal may be missed while no one listens: the poll fallback and the next beat's state
check are what make up for it, not this module.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Literal

from majordomus.store.base import StoreBase


@dataclass(frozen=True)
class Signal:
    """A wake-up (there may be work), or a cancel of `execution_id`."""

    kind: Literal["wake", "cancel"]
    execution_id: str = ""


class SignalStore(StoreBase):
    async def subscribe_signals(self) -> AsyncIterator[Signal]:
        """Subscribe to both channels; answers, once subscribed, the signals as they arrive."""
        pubsub = self.redis.pubsub()
        await pubsub.subscribe(self.keys.wake_channel, self.keys.cancel_channel)
        return self._arrivals(pubsub)

    async def _arrivals(self, pubsub: Any) -> AsyncIterator[Signal]:
        cancel = self.keys.cancel_channel.encode()
        async for message in pubsub.listen():
            if message.get("type") != "message":
                continue
            if message["channel"] == cancel:
                yield Signal("cancel", message["data"].decode())
            else:
                yield Signal("wake")
