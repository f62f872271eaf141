"""`Client`: start, follow and read executions from Python code (asyncio).

One interface on either transport (`majordomus.client.transports`): straight to Redis
(`Client("redis://...")`, or `MAJORDOMUS_REDIS_URL`) with the same store and scripts the
API runs, or through the HTTP API (`Client("http://host:8000", token=...)`) for a service
that cannot reach Redis. A start is `executions.start`'s input (`StartInput`) on both: the
API's route takes it as its body, and straight to Redis it is handed to the engine exactly
as that route does, so the input is validated and redacted as the API would, its due time
made as the API makes it.

A start that returns has created the execution (its snapshot and its place in the queue
are written in one atomic step before the answer). A start whose answer was lost (the
connection dropped, the process was killed) may or may not have created it: send it again
with the same `idempotency_key`, and the second start answers the execution the first
created, if it did, instead of creating another.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, TypeVar, overload

import msgspec

from majordomus.builtins.executions import StartInput
from majordomus.client.handles import Declared, Delay, Execution, Message
from majordomus.client.transports import (
    HttpTransport,
    RedisTransport,
    Transport,
    wait_long,
)
from majordomus.config import Settings
from majordomus.errors import invalid_input
from majordomus.matching import Match, MatchCount, Order, Sort
from majordomus.model import CancelOutput, EventHistory, ExecutionList, ExecutionSnapshot
from majordomus.priorities import Priority
from majordomus.states import ExecutionState

In = TypeVar("In")
Out = TypeVar("Out")

HTTP_SCHEMES = ("http://", "https://")


def _plain(value: Any) -> Any:
    """An input as the JSON-shaped value a start carries (a Struct as its members)."""
    if value is None:
        return {}
    if isinstance(value, dict):
        return value
    return msgspec.to_builtins(value)


def _delay_ms(delay: Delay | None) -> int | None:
    if delay is None:
        return None
    seconds = delay.total_seconds() if isinstance(delay, timedelta) else float(delay)
    if seconds < 0:
        raise invalid_input(
            f"a delay of {seconds:g} s is negative", "give 0 or more seconds, or a timedelta"
        )
    return int(seconds * 1000)


def _check_options(request: StartInput) -> None:
    """A start's options as the API checks them (an aware `start_at`, a known priority, a
    key of 1 to 200 characters), its input left to the capability's own validation."""
    options = msgspec.structs.replace(request, input={})
    try:
        msgspec.convert(msgspec.to_builtins(options), StartInput)
    except msgspec.ValidationError as exc:
        raise invalid_input(
            f"the start of {request.capability} is not one: {exc}",
            "see Client.start's options: delay, start_at (an aware datetime), priority "
            "(low, normal, high), idempotency_key (1-200 characters), time_limit (above 0)",
        ) from None


class Client:
    """Start, read, cancel, wait for and follow executions, on Redis or through the API.

    `Client()` uses `MAJORDOMUS_REDIS_URL`, else `MAJORDOMUS_API_URL` (with
    `MAJORDOMUS_API_TOKEN`), else the default Redis URL. `Client(url)`: an `http(s)://` URL
    is an API, any other a Redis URL (`redis://`, `rediss://`, `unix://`, cluster and
    Sentinel URLs as `MAJORDOMUS_REDIS_URL` takes them). Use it as `async with`, or close
    it with `aclose()`. Every error is a `MajordomusError` with the protocol's codes.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        token: str | None = None,
        settings: Settings | None = None,
        actor: str = "internal",
        transport: Transport | None = None,
    ) -> None:
        from majordomus.config import settings as process_settings

        cfg = settings or process_settings()
        if transport is None:
            transport = _transport(url, token, cfg, actor)
        self.transport = transport

    @classmethod
    def from_engine(cls, engine: Any) -> Client:
        """A client on an engine this process already runs (the testing kit's), which it
        does not close."""
        redis = RedisTransport(engine, "the engine's Redis")
        redis.owns_engine = False
        return cls(transport=redis)

    @property
    def where(self) -> str:
        """Where it reaches majordomus: `Redis at …` or `the API at …`."""
        return self.transport.where

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.transport.aclose()

    # -- starting -------------------------------------------------------------------------

    @overload
    async def start(
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
    ) -> Execution[Out]: ...

    @overload
    async def start(
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
    ) -> Execution[Any]: ...

    async def start(
        self,
        capability: Declared[Any, Any] | str,
        input: Any = None,
        *,
        delay: Delay | None = None,
        start_at: datetime | None = None,
        priority: Priority | None = None,
        idempotency_key: str | None = None,
        time_limit: Delay | None = None,
        episode: str | None = None,
    ) -> Execution[Any]:
        """Start `capability` (its declaration, or its id) as an execution and answer its
        handle at once, `queued`. `delay` (seconds or a timedelta) or `start_at` (aware
        datetime; given both, the later) makes it wait in the queue holding no worker;
        `priority` (`low`, `normal`, `high`; default the capability's own);
        `idempotency_key`: a start with a key an execution holds answers that execution
        (the same input) or is `refused` (another one); `time_limit` (seconds or a timedelta):
        stop it and fail it `timed_out` sooner than its capability's own timeout. A typed start (a declaration)
        answers an `Execution` whose `result()` is of its declared output type."""
        declared = capability if isinstance(capability, Declared) else None
        cap_id = declared.id if declared is not None else str(capability)
        request = StartInput(capability=cap_id, input=_plain(input), episode=episode)
        if (
            delay is not None
            or start_at is not None
            or priority is not None
            or idempotency_key
            or time_limit is not None
        ):
            request.start_at = start_at
            request.delay_ms = _delay_ms(delay)
            request.priority = priority
            request.idempotency_key = idempotency_key
            request.timeout_ms = _delay_ms(time_limit)
            _check_options(request)
        known = declared.capability if declared is not None else None
        snapshot = await self.transport.start(request, known)
        return Execution(self, snapshot, declared.output_type if declared is not None else None)

    @overload
    async def call(
        self, capability: Declared[In, Out], input: In, *, timeout: float | None = ...
    ) -> Out: ...

    @overload
    async def call(
        self, capability: str, input: Any = ..., *, timeout: float | None = ...
    ) -> Any: ...

    async def call(
        self,
        capability: Declared[Any, Any] | str,
        input: Any = None,
        *,
        timeout: float | None = None,
    ) -> Any:
        """Start it and answer its output once it succeeds (as its declared type when
        typed), following a retried chain to its last attempt. A failure or a cancel raises
        its error; still going after `timeout` seconds (None: no bound): `Pending`."""
        execution = await self.start(capability, input)  # type: ignore[arg-type]
        return await execution.result(timeout)

    # -- reading --------------------------------------------------------------------------

    async def execution(self, execution_id: str) -> Execution[Any]:
        """A handle on an execution started before (by anyone), read now."""
        return Execution(self, await self.get(execution_id))

    async def get(self, execution_id: str) -> ExecutionSnapshot:
        """Its snapshot: state, progress, steps, output or error (`executions.get`)."""
        return await self.transport.get(execution_id)

    async def list(
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
        """Executions newest first, filtered (`executions.list`): by state, capability,
        episode, a time range (aware datetimes), or `search` (`member=value`, a member its
        capability declares searchable); `before`: the last id of the previous page, for
        the next; `sort` by `created`, `duration` or `state`, in `order`."""
        match = Match(
            state=state,
            capability=capability,
            episode=episode,
            created_after=created_after,
            created_before=created_before,
            search=search,
        )
        return await self.transport.list(match, limit, before, sort, order)

    async def count(
        self,
        *,
        state: ExecutionState | None = None,
        capability: str | None = None,
        episode: str | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        search: str | None = None,
    ) -> MatchCount:
        """How many executions the filter of `list` matches, and how many of them
        `executions.cancel_matching` and `executions.retry_matching` would act on (start
        those with `start` or `call`, with the same filter as input)."""
        match = Match(
            state=state,
            capability=capability,
            episode=episode,
            created_after=created_after,
            created_before=created_before,
            search=search,
        )
        return await self.transport.count(match)

    async def cancel(self, execution_id: str) -> CancelOutput:
        """Ask it to stop (`executions.cancel`)."""
        return await self.transport.cancel(execution_id)

    async def wait(self, execution_id: str, timeout: float | None = None) -> ExecutionSnapshot:
        """Its snapshot once final, or as it stands after `timeout` seconds (None: until
        it ends, however long; the server's own bound is met by waiting again)."""
        return await wait_long(self.transport, execution_id, timeout)

    async def events(
        self, execution_id: str, after: int = 0, limit: int | None = None
    ) -> EventHistory:
        """One page of its retained events after the sequence `after` (`executions.events`)."""
        return await self.transport.events(execution_id, after, limit)

    def follow(self, execution_id: str, after: int = 0) -> AsyncIterator[Message]:
        """Its events from `after` until it is final, the history and then live, as an
        async iterator; resume from the last `sequence` seen."""
        return self.transport.follow(execution_id, after)


def _transport(url: str | None, token: str | None, settings: Settings, actor: str) -> Transport:
    from majordomus.loading import load_capabilities

    if url is None:
        if settings.redis_url:
            url = settings.redis_url
        elif settings.api_url:
            url = settings.api_url
    if url is not None and url.startswith(HTTP_SCHEMES):
        return HttpTransport(url, token or settings.api_token)
    # The built-ins (whose routes an execution's links name) and whatever this process
    # declared; not `MAJORDOMUS_CAPABILITIES`: a producer need not import what it starts.
    return RedisTransport.connect(url, settings, load_capabilities([]), actor=actor)
