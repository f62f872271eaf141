"""What a declaration hands back, and what a start answers: typed handles.

`Declared[In, Out]` is what `@capability` returns: still the handler (call it with a
context and an input, as a unit test does), and a typed way to run it on any client:
`await hello.start(client, Greet(...))` answers an `Execution[Greeting]`, `await
hello.call(client, Greet(...))` the `Greeting` itself (a `SyncClient` answers the same
without `await`). `Execution[Out]` is one execution seen from a client: its snapshot, its
outcome (`result`, following a retried chain to its last attempt, as the capability's own
route does), its events (paged, or followed live), its cancel. `SyncExecution[Out]` is the
same for a `SyncClient`.

The handles know their client only by what it can do (`ExecutionSource`,
`AsyncStarter`, `SyncStarter`), so this module depends on no transport, and the client
modules, which import it, are not imported back.
"""

from __future__ import annotations

import functools
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import datetime, timedelta
from typing import Any, Generic, Protocol, TypeVar, Union, overload

import msgspec

from majordomus.errors import ExecutionError, MajordomusError
from majordomus.model import (
    CancelOutput,
    EventHistory,
    ExecutionEvent,
    ExecutionSnapshot,
    StreamMessage,
)
from majordomus.priorities import Priority
from majordomus.states import is_final

In = TypeVar("In")
Out = TypeVar("Out")
I2 = TypeVar("I2")
O2 = TypeVar("O2")

Message = Union[ExecutionEvent, StreamMessage]
"""What following yields: an execution's event, or a control message of the live channel
(`stream.lagged` where older events were dropped before they were read)."""

Delay = Union[float, timedelta]
"""A delay: seconds, or a `timedelta`."""


class Pending(MajordomusError):
    """An execution still going when a bounded wait for its outcome ended. Not a failure:
    it goes on; `execution` is its snapshot as it stood, to wait on again."""

    def __init__(self, snapshot: ExecutionSnapshot, waited: float) -> None:
        super().__init__(
            "unavailable",
            f"{snapshot.capability} is still {snapshot.state} as {snapshot.id} after "
            f"{waited:g} s",
            "wait longer (result(timeout=None) waits until it ends), or follow its events",
            snapshot.id,
        )
        self.execution = snapshot


class ExecutionSource(Protocol):
    """What an `Execution` asks its client for."""

    async def get(self, execution_id: str) -> ExecutionSnapshot: ...

    async def wait(self, execution_id: str, timeout: float | None = None) -> ExecutionSnapshot: ...

    async def cancel(self, execution_id: str) -> CancelOutput: ...

    async def events(
        self, execution_id: str, after: int = 0, limit: int | None = None
    ) -> EventHistory: ...

    def follow(self, execution_id: str, after: int = 0) -> AsyncIterator[Message]: ...


def outcome(snapshot: ExecutionSnapshot) -> Any:
    """A final snapshot's output, or the error it ended with, raised: a failed or cancelled
    execution raises a `MajordomusError` with its code, message and suggestion, its
    correlation id the execution (as every surface answers it)."""
    if snapshot.state == "succeeded":
        return None if snapshot.output is msgspec.UNSET else snapshot.output
    error = snapshot.error if isinstance(snapshot.error, ExecutionError) else None
    code: Any = error.code if error is not None else (
        "cancelled" if snapshot.state == "cancelled" else "internal"
    )
    message = error.message if error is not None else f"the execution ended {snapshot.state}"
    suggestion = error.suggestion if error is not None and error.suggestion else None
    raise MajordomusError(
        code,
        f"{snapshot.capability} ran as {snapshot.id}, which {snapshot.state}: {message}",
        suggestion or f"read its events: {snapshot.links.events}",
        snapshot.id,
    )


class Execution(Generic[Out]):
    """One execution, seen from an asyncio `Client`. `snapshot` is as it was last read."""

    def __init__(
        self, source: ExecutionSource, snapshot: ExecutionSnapshot, output: Any = None
    ) -> None:
        self._source = source
        self.snapshot = snapshot
        self._output = output

    @property
    def id(self) -> str:
        return self.snapshot.id

    def __repr__(self) -> str:
        return f"<Execution {self.id} {self.snapshot.capability} {self.snapshot.state}>"

    async def refresh(self) -> ExecutionSnapshot:
        """Read its snapshot again."""
        self.snapshot = await self._source.get(self.id)
        return self.snapshot

    async def wait(self, timeout: float | None = None) -> ExecutionSnapshot:
        """Its snapshot once final, or as it stands when `timeout` seconds pass (None: until
        it ends). This attempt's, even when it failed and was retried (`result` follows)."""
        self.snapshot = await self._source.wait(self.id, timeout)
        return self.snapshot

    async def result(self, timeout: float | None = None) -> Out:
        """Its output, as its declared type when the start was typed, once it succeeds.

        A failed or cancelled execution raises its error (`MajordomusError`, its code and
        message, the execution as correlation id). A failed attempt its retry policy retried
        is not the outcome: the wait follows `retried_as` to the chain's last attempt,
        within the same `timeout`. Still going when `timeout` seconds passed: `Pending`.
        """
        began = time.monotonic()
        snap = self.snapshot
        while True:
            left = None if timeout is None else max(0.0, timeout - (time.monotonic() - began))
            snap = await self._source.wait(snap.id, left)
            if snap.state == "failed" and isinstance(snap.retried_as, str):
                try:
                    snap = await self._source.get(snap.retried_as)
                    continue
                except MajordomusError as exc:
                    if exc.code != "not_found":
                        raise
            if not is_final(snap.state):
                raise Pending(snap, time.monotonic() - began)
            if snap.id == self.id:
                self.snapshot = snap
            value = outcome(snap)
            if self._output is None or value is None:
                return value  # type: ignore[no-any-return]
            return msgspec.convert(value, self._output)  # type: ignore[no-any-return]

    async def cancel(self) -> CancelOutput:
        """Ask it to stop (a queued one is cancelled at once; see `executions.cancel`)."""
        answer = await self._source.cancel(self.id)
        self.snapshot = answer.execution
        return answer

    async def events(self, after: int = 0, limit: int | None = None) -> EventHistory:
        """One page of its retained events after the sequence `after`, oldest first."""
        return await self._source.events(self.id, after, limit)

    def follow(self, after: int = 0) -> AsyncIterator[Message]:
        """Its events from `after` until it is final: the history, then live. Resume from
        the last `sequence` seen. A gap where older events were dropped before they were
        read is announced by a `stream.lagged` message."""
        return self._source.follow(self.id, after)


class Portal(Protocol):
    """How a `SyncExecution` runs its asyncio twin's coroutines (`SyncClient`'s loop)."""

    def run(self, awaitable: Awaitable[Any]) -> Any: ...

    def iterate(self, iterator: AsyncIterator[Any]) -> Iterator[Any]: ...


class SyncExecution(Generic[Out]):
    """One execution, seen from a `SyncClient`: `Execution`'s methods, without `await`."""

    def __init__(self, portal: Portal, execution: Execution[Out]) -> None:
        self._portal = portal
        self._execution = execution

    @property
    def id(self) -> str:
        return self._execution.id

    @property
    def snapshot(self) -> ExecutionSnapshot:
        return self._execution.snapshot

    def __repr__(self) -> str:
        return repr(self._execution).replace("<Execution", "<SyncExecution", 1)

    def refresh(self) -> ExecutionSnapshot:
        return self._portal.run(self._execution.refresh())  # type: ignore[no-any-return]

    def wait(self, timeout: float | None = None) -> ExecutionSnapshot:
        return self._portal.run(self._execution.wait(timeout))  # type: ignore[no-any-return]

    def result(self, timeout: float | None = None) -> Out:
        return self._portal.run(self._execution.result(timeout))  # type: ignore[no-any-return]

    def cancel(self) -> CancelOutput:
        return self._portal.run(self._execution.cancel())  # type: ignore[no-any-return]

    def events(self, after: int = 0, limit: int | None = None) -> EventHistory:
        return self._portal.run(self._execution.events(after, limit))  # type: ignore[no-any-return]

    def follow(self, after: int = 0) -> Iterator[Message]:
        return self._portal.iterate(self._execution.follow(after))


class AsyncStarter(Protocol):
    """An asyncio client, as a declaration's handle runs on it (`Client`)."""

    async def start(
        self,
        capability: Declared[I2, O2],
        input: I2,
        *,
        delay: Delay | None = None,
        start_at: datetime | None = None,
        priority: Priority | None = None,
        idempotency_key: str | None = None,
        time_limit: Delay | None = None,
    ) -> Execution[O2]: ...

    async def call(
        self, capability: Declared[I2, O2], input: I2, *, timeout: float | None = None
    ) -> O2: ...


class SyncStarter(Protocol):
    """A synchronous client, as a declaration's handle runs on it (`SyncClient`)."""

    def start(
        self,
        capability: Declared[I2, O2],
        input: I2,
        *,
        delay: Delay | None = None,
        start_at: datetime | None = None,
        priority: Priority | None = None,
        idempotency_key: str | None = None,
        time_limit: Delay | None = None,
    ) -> SyncExecution[O2]: ...

    def call(
        self, capability: Declared[I2, O2], input: I2, *, timeout: float | None = None
    ) -> O2: ...


class Declared(Generic[In, Out]):
    """A declared capability, as `@capability` hands it back.

    Callable as its handler (`await hello(ctx, inp)`, or `shout(ctx, inp)` for a plain
    `def`), so a unit test calls it directly; `start` and `call` run it as an execution on
    a client, typed by the declaration: the input its `input` type, the outcome its
    `output` type.
    """

    def __init__(self, capability: Any, handler: Callable[..., Any]) -> None:
        functools.update_wrapper(self, handler)
        self.capability = capability
        """The registry's record of it (`majordomus.registry.Capability`)."""
        self.handler = handler

    @property
    def id(self) -> str:
        return str(self.capability.id)

    @property
    def output_type(self) -> type[Out]:
        return self.capability.output  # type: ignore[no-any-return]

    def __call__(self, ctx: Any, inp: In) -> Any:
        return self.handler(ctx, inp)

    def __repr__(self) -> str:
        return f"<capability {self.id}>"

    @overload
    def start(
        self,
        client: SyncStarter,
        input: In,
        *,
        delay: Delay | None = ...,
        start_at: datetime | None = ...,
        priority: Priority | None = ...,
        idempotency_key: str | None = ...,
        time_limit: Delay | None = ...,
    ) -> SyncExecution[Out]: ...

    @overload
    def start(
        self,
        client: AsyncStarter,
        input: In,
        *,
        delay: Delay | None = ...,
        start_at: datetime | None = ...,
        priority: Priority | None = ...,
        idempotency_key: str | None = ...,
        time_limit: Delay | None = ...,
    ) -> Awaitable[Execution[Out]]: ...

    def start(self, client: Any, input: In, **options: Any) -> Any:
        """Start it on `client` as an execution: its handle (awaited on a `Client`)."""
        return client.start(self, input, **options)

    @overload
    def call(self, client: SyncStarter, input: In, *, timeout: float | None = ...) -> Out: ...

    @overload
    def call(
        self, client: AsyncStarter, input: In, *, timeout: float | None = ...
    ) -> Awaitable[Out]: ...

    def call(self, client: Any, input: In, *, timeout: float | None = None) -> Any:
        """Run it on `client` and answer its output (awaited on a `Client`); a failure or
        cancel raises its error; still going after `timeout` seconds: `Pending`."""
        return client.call(self, input, timeout=timeout)
