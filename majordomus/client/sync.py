"""`SyncClient`: `Client`'s synchronous twin, for Django, Flask, scripts and notebooks.

The same methods with the same names, arguments and errors, without `await`: each runs the
asyncio client's coroutine on an event loop of the client's own, in a daemon thread it
starts (so it works where a loop already runs, as in a notebook, and from any thread of a
WSGI server); `follow` is a plain iterator. Close it with `close()` or use it as `with`;
an open one's thread ends with the process.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import AsyncIterator, Awaitable, Coroutine, Iterator
from datetime import datetime
from types import TracebackType
from typing import Any, TypeVar, overload

from majordomus.client.client import Client
from majordomus.client.handles import Declared, Delay, Execution, Message, SyncExecution
from majordomus.config import Settings
from majordomus.matching import MatchCount, Order, Sort
from majordomus.model import CancelOutput, EventHistory, ExecutionList, ExecutionSnapshot
from majordomus.priorities import Priority
from majordomus.states import ExecutionState

In = TypeVar("In")
Out = TypeVar("Out")
T = TypeVar("T")


class LoopThread:
    """An event loop running in a daemon thread, and a way to run coroutines on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="majordomus-client", daemon=True
        )
        self.thread.start()

    def run(self, awaitable: Awaitable[T]) -> T:
        if threading.current_thread() is self.thread:
            raise RuntimeError("a SyncClient cannot be used from its own loop's thread")
        future = asyncio.run_coroutine_threadsafe(_coroutine(awaitable), self.loop)
        try:
            return future.result()
        except BaseException:  # KeyboardInterrupt included: stop what runs for us
            future.cancel()
            raise

    def iterate(self, iterator: AsyncIterator[T]) -> Iterator[T]:
        try:
            while True:
                try:
                    yield self.run(iterator.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            closing = getattr(iterator, "aclose", None)
            if closing is not None and self.loop.is_running():
                with _quietly():
                    self.run(closing())

    def stop(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=10)
        if not self.loop.is_running():
            self.loop.close()


async def _coroutine(awaitable: Awaitable[T]) -> T:
    return await awaitable


class _quietly:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> bool:
        return isinstance(exc[1], Exception | concurrent.futures.CancelledError)


class SyncClient:
    """`Client`, synchronously: the same construction (`SyncClient()`,
    `SyncClient("redis://...")`, `SyncClient("http://host:8000", token=...)`) and methods."""

    def __init__(
        self,
        url: str | None = None,
        *,
        token: str | None = None,
        settings: Settings | None = None,
        actor: str = "internal",
        client: Client | None = None,
    ) -> None:
        self._portal = LoopThread()

        async def make() -> Client:
            return client or Client(url, token=token, settings=settings, actor=actor)

        try:
            self.client = self._portal.run(make())
        except BaseException:
            self._portal.stop()
            raise

    @property
    def where(self) -> str:
        return self.client.where

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        if self._portal.loop.is_closed():
            return
        try:
            self._portal.run(self.client.aclose())
        finally:
            self._portal.stop()

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return self._portal.run(coroutine)

    def _sync(self, execution: Execution[Out]) -> SyncExecution[Out]:
        return SyncExecution(self._portal, execution)

    @overload
    def start(
        self,
        capability: Declared[In, Out],
        input: In,
        *,
        delay: Delay | None = ...,
        start_at: datetime | None = ...,
        priority: Priority | None = ...,
        idempotency_key: str | None = ...,
        time_limit: Delay | None = ...,
        episode: str | None = ...,
    ) -> SyncExecution[Out]: ...

    @overload
    def start(
        self,
        capability: str,
        input: Any = ...,
        *,
        delay: Delay | None = ...,
        start_at: datetime | None = ...,
        priority: Priority | None = ...,
        idempotency_key: str | None = ...,
        time_limit: Delay | None = ...,
        episode: str | None = ...,
    ) -> SyncExecution[Any]: ...

    def start(self, capability: Any, input: Any = None, **options: Any) -> SyncExecution[Any]:
        """`Client.start`: the execution's handle, `queued`."""
        return self._sync(self._run(self.client.start(capability, input, **options)))

    @overload
    def call(
        self, capability: Declared[In, Out], input: In, *, timeout: float | None = ...
    ) -> Out: ...

    @overload
    def call(self, capability: str, input: Any = ..., *, timeout: float | None = ...) -> Any: ...

    def call(self, capability: Any, input: Any = None, *, timeout: float | None = None) -> Any:
        """`Client.call`: its output once it succeeds."""
        return self._run(self.client.call(capability, input, timeout=timeout))

    def execution(self, execution_id: str) -> SyncExecution[Any]:
        return self._sync(self._run(self.client.execution(execution_id)))

    def get(self, execution_id: str) -> ExecutionSnapshot:
        return self._run(self.client.get(execution_id))

    def list(
        self,
        *,
        state: ExecutionState | None = None,
        capability: str | None = None,
        episode: str | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        search: str | None = None,
        limit: int | None = None,
        before: str | None = None,
        sort: Sort = "created",
        order: Order = "desc",
    ) -> ExecutionList:
        return self._run(
            self.client.list(
                state=state,
                capability=capability,
                episode=episode,
                created_after=created_after,
                created_before=created_before,
                search=search,
                limit=limit,
                before=before,
                sort=sort,
                order=order,
            )
        )

    def count(
        self,
        *,
        state: ExecutionState | None = None,
        capability: str | None = None,
        episode: str | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        search: str | None = None,
    ) -> MatchCount:
        return self._run(
            self.client.count(
                state=state,
                capability=capability,
                episode=episode,
                created_after=created_after,
                created_before=created_before,
                search=search,
            )
        )

    def cancel(self, execution_id: str) -> CancelOutput:
        return self._run(self.client.cancel(execution_id))

    def wait(self, execution_id: str, timeout: float | None = None) -> ExecutionSnapshot:
        return self._run(self.client.wait(execution_id, timeout))

    def events(self, execution_id: str, after: int = 0, limit: int | None = None) -> EventHistory:
        return self._run(self.client.events(execution_id, after, limit))

    def follow(self, execution_id: str, after: int = 0) -> Iterator[Message]:
        """Its events from `after` until it is final, as a plain iterator."""
        return self._portal.iterate(self.client.follow(execution_id, after))
