"""The client's two ways to reach majordomus: straight to Redis, or through the HTTP API.

Both answer the same questions with the same types (`majordomus.model`'s snapshots, pages
and events) and the same errors (`MajordomusError`, with the protocol's codes), so a
`Client` is one interface over either:

- `RedisTransport` drives an `Engine` on the shared Redis: the same store and scripts the
  API runs, no API process needed. A capability this process imports is validated and
  redacted by its own declaration; one it does not, by the declaration its workers
  published (`Engine.known`). Redis unreachable, or answering an error, is `unavailable`.
- `HttpTransport` speaks the public routes (`/api/v1/executions/...`) and follows on the
  SSE live channel (`/events`), reconnecting from the last sequence seen; without a live
  channel it pages and long-polls. It works against any API of this version.

The CLI reaches majordomus through these same transports (`majordomus.cli.transport`).
Each imports what it drives when it is made (the engine and Redis client, or httpx), so a
process that uses one does not load the other.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import msgspec

from majordomus.config import LIMITS, Settings, shown_url
from majordomus.errors import MajordomusError, unavailable
from majordomus.ids import require_execution_id
from majordomus.matching import Match, MatchCount, Order, Sort
from majordomus.model import (
    ACTOR_HEADER,
    CancelOutput,
    EventHistory,
    ExecutionList,
    ExecutionSnapshot,
    StreamLagged,
    StreamLaggedData,
)
from majordomus.states import is_final

if TYPE_CHECKING:
    import httpx

    from majordomus.builtins.executions import StartInput
    from majordomus.client.handles import Message
    from majordomus.engine import Engine
    from majordomus.registry import Capability, Registry
    from majordomus.store.failures import StoreFailure

T = TypeVar("T")

REDIS_CONNECT_SECONDS = 5.0
FOLLOW_BLOCK_MS = 2000
"""How long a follow straight on Redis blocks on the stream before it looks again."""
SSE_RECONNECTS = 5
SSE_SILENCE_SECONDS = 90.0
POLL_WAIT_MS = 500
"""Without a live channel, how long one `executions.wait` long poll holds between pages."""
WAIT_SLICE_MS = 30_000
"""A wait longer than the server's bound (`LIMITS.wait_bound_ms`) is made of waits this long."""


class Transport(Protocol):
    where: str
    """Where the answers come from, for messages: `Redis at …` or `the API at …`."""

    async def start(self, request: StartInput, known: Capability | None) -> ExecutionSnapshot:
        """`request` (`executions.start`'s input) carried out; `known`: the capability's
        declaration when the caller holds it (a typed start), else found by its id."""
        ...

    async def get(self, execution_id: str) -> ExecutionSnapshot: ...

    async def list(
        self, match: Match, limit: int | None, before: str | None, sort: Sort, order: Order
    ) -> ExecutionList: ...

    async def count(self, match: Match) -> MatchCount: ...

    async def cancel(self, execution_id: str) -> CancelOutput: ...

    async def wait(self, execution_id: str, timeout_ms: int) -> ExecutionSnapshot: ...

    async def events(self, execution_id: str, after: int, limit: int | None) -> EventHistory: ...

    def follow(self, execution_id: str, after: int) -> AsyncIterator[Message]: ...

    async def aclose(self) -> None: ...


def lagged(dropped: int) -> Message:
    return StreamLagged(StreamLaggedData(dropped))


async def paged(
    page: Callable[[int], Awaitable[EventHistory]],
    wait: Callable[[int], Awaitable[None]],
    after: int,
) -> AsyncIterator[Message]:
    """An execution's events from `after` until it is final: each page as it comes (a gap
    where older events were dropped announced as `stream.lagged`), and between pages a wait
    for more after the last sequence seen."""
    cursor = after
    while True:
        history = await page(cursor)
        if history.truncated and history.events:
            yield lagged(history.events[0].sequence - cursor - 1)
        for event in history.events:
            yield event
        cursor = history.last_sequence
        if history.more:
            continue
        if is_final(history.state):
            return
        await wait(cursor)


def typed(answer: Any, kind: type[T], where: str) -> T:
    """A plain answer as the type it should be (converted once, where it arrives), or
    `unavailable` when it is not one: an API of another version, say."""
    try:
        return msgspec.convert(answer, kind)
    except msgspec.ValidationError as exc:
        raise unavailable(
            f"{where} answered a {kind.__name__} this client cannot read ({exc})",
            "check the URL points at a majordomus API of this version",
        ) from None


# -- straight to Redis ----------------------------------------------------------------------


def store_failure(exc: StoreFailure | OSError, where: str) -> MajordomusError:
    """A Redis failure as a client reports it: one sentence and what to do."""
    from majordomus.store.failures import UNREACHABLE

    if isinstance(exc, (*UNREACHABLE, OSError)):
        return unavailable(
            f"cannot reach {where} ({exc})",
            "check that Redis runs and MAJORDOMUS_REDIS_URL (or the client's URL) names it",
        )
    return unavailable(f"{where} answered an error ({exc})", "check the Redis server's log")


class RedisTransport:
    """Straight to Redis, on an `Engine` (this process's registry, and the declarations
    the workers published for what it does not import)."""

    def __init__(self, engine: Engine, where: str, *, actor: str = "internal") -> None:
        from majordomus.start_options import NO_OPTIONS
        from majordomus.store.failures import StoreFailure

        self.engine = engine
        self.where = where
        self.actor = actor
        self.owns_engine = True
        self.failures: tuple[type[Exception], ...] = (StoreFailure, OSError)
        self.no_options = NO_OPTIONS

    @classmethod
    def connect(
        cls,
        url: str | None,
        settings: Settings,
        registry: Registry,
        *,
        actor: str = "internal",
        why_default: str | None = None,
    ) -> RedisTransport:
        """On `url` (else `settings.redis_url`, else the default URL, which `where` names as
        such, with `why_default` when given). A URL that is no Redis URL: `invalid_input`."""
        from majordomus.engine import Engine
        from majordomus.store.connect import DEFAULT_URL, connect

        named = url or settings.redis_url
        url = named or DEFAULT_URL
        where = f"Redis at {shown_url(url)}"
        if not named:
            where += f" (the default: {why_default or 'MAJORDOMUS_REDIS_URL is unset'})"
        client = connect(url, connect_timeout=REDIS_CONNECT_SECONDS)
        return cls(Engine(client, registry, settings), where, actor=actor)

    async def _guarded(self, call: Awaitable[T]) -> T:
        try:
            return await call
        except self.failures as exc:
            raise store_failure(exc, self.where) from None  # type: ignore[arg-type]

    async def start(self, request: StartInput, known: Capability | None) -> ExecutionSnapshot:
        # One coroutine on the hot path: what `_guarded` does, written out.
        engine = self.engine
        cap_id = request.capability
        # As the `executions.start` route hands it to the engine (a start with no option
        # as one: its plan is shared).
        plain = request.start_at is None and request.delay_ms is None and not (
            request.priority or request.idempotency_key or request.timeout_ms
        )
        try:
            if cap_id not in engine.registry and cap_id not in engine.published:
                if known is not None:
                    engine.published[cap_id] = known  # declared on a registry of its own
                else:
                    await engine.known(cap_id)  # its workers' published declaration
            return await engine.start(
                cap_id,
                request.input,
                actor=self.actor,
                episode=request.episode,
                options=self.no_options if plain else request.options(),
            )
        except self.failures as exc:
            raise store_failure(exc, self.where) from None  # type: ignore[arg-type]

    async def get(self, execution_id: str) -> ExecutionSnapshot:
        return await self._guarded(self.engine.get(execution_id))

    async def list(
        self, match: Match, limit: int | None, before: str | None, sort: Sort, order: Order
    ) -> ExecutionList:
        return await self._guarded(
            self.engine.list(limit=limit, before=before, match=match, sort=sort, order=order)
        )

    async def count(self, match: Match) -> MatchCount:
        return await self._guarded(self.engine.count(match))

    async def cancel(self, execution_id: str) -> CancelOutput:
        return await self._guarded(self.engine.cancel(execution_id, by=self.actor))

    async def wait(self, execution_id: str, timeout_ms: int) -> ExecutionSnapshot:
        return await self._guarded(self.engine.wait(execution_id, timeout_ms))

    async def events(self, execution_id: str, after: int, limit: int | None) -> EventHistory:
        return await self._guarded(self.engine.events(execution_id, after=after, limit=limit))

    def follow(self, execution_id: str, after: int) -> AsyncIterator[Message]:
        async def page(cursor: int) -> EventHistory:
            return await self.events(execution_id, cursor, None)

        async def wait(cursor: int) -> None:
            # Block until something is appended (or a while passes), then page again.
            await self._guarded(
                self.engine.read_stream_after(execution_id, cursor, FOLLOW_BLOCK_MS)
            )

        return paged(page, wait, after)

    async def aclose(self) -> None:
        if self.owns_engine:
            await self.engine.aclose()


# -- through the HTTP API -------------------------------------------------------------------


def query_of(raw_input: dict[str, Any]) -> dict[str, str]:
    """An input as a query string: absent members left out, the rest as the API reads them."""
    query: dict[str, str] = {}
    for name, value in raw_input.items():
        if value is None:
            continue
        if isinstance(value, bool):
            query[name] = "true" if value else "false"
        elif isinstance(value, str):
            query[name] = value
        elif isinstance(value, int | float):
            query[name] = str(value)
        else:
            query[name] = msgspec.json.encode(value).decode()
    return query


def token_refused(response: httpx.Response) -> MajordomusError:
    """A 401: the API wants a bearer token this client did not send, or not the one it sent.
    Said for the client's side (the server's own suggestion names a header to send, not
    the setting that sends it)."""
    url = response.request.url
    sent = "authorization" in response.request.headers
    what = "it refused the bearer token sent" if sent else "it needs a bearer token, none was sent"
    return MajordomusError(
        "forbidden",
        f"the API at {url.scheme}://{url.netloc.decode()} answered 401: {what}",
        "give this client the server's token: MAJORDOMUS_API_TOKEN for the CLI, "
        "Client(token=...) in code",
    )


def error_of_response(response: httpx.Response) -> MajordomusError:
    """The API's error envelope as a `MajordomusError` (or the status, when there is none)."""
    if response.status_code == 401:
        return token_refused(response)
    try:
        body = response.json()
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and error.get("code") and error.get("message"):
        return MajordomusError(
            error["code"],
            str(error["message"]),
            error.get("suggestion"),
            error.get("correlation_id"),
        )
    status = response.status_code
    if status == 403:
        return MajordomusError(
            "forbidden",
            f"the API refused the request ({status})",
            "check MAJORDOMUS_API_URL, and what stands in front of the API (a proxy's rules)",
        )
    if status == 404:
        return MajordomusError(
            "not_found",
            f"the API has no {response.request.method} {response.request.url.path}",
            "check the URL points at a majordomus API of this version",
        )
    return unavailable(
        f"the API answered {status} {response.reason_phrase}",
        "look at the API server's log",
    )


def live_message(raw: Any) -> Message | None:
    """A message of the live channel, typed; None for one this client does not know (a
    newer API's), which following passes over."""
    from majordomus.client.handles import Message

    try:
        return msgspec.convert(raw, Message)  # type: ignore[arg-type]
    except msgspec.ValidationError:
        return None


START_PATH = "/api/v1/executions/start"
GET_PATH = "/api/v1/executions/get"
LIST_PATH = "/api/v1/executions"
COUNT_PATH = "/api/v1/executions/count"
CANCEL_PATH = "/api/v1/executions/cancel"
WAIT_PATH = "/api/v1/executions/wait"
EVENTS_PATH = "/api/v1/executions/events"


class HttpTransport:
    """Through the HTTP API: its public routes, and its live channel to follow."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        actor: str | None = None,
        trust_env: bool = True,
    ) -> None:
        """`actor`: what the API should attribute this client's starts and cancels to, when
        it honours the claim (`ACTOR_HEADER`: the CLI says `cli`); None: the API's own."""
        import httpx

        self.base_url = base_url.rstrip("/")
        self.where = f"the API at {shown_url(self.base_url)}"
        headers = {"Accept": "application/json"}
        if actor:
            headers[ACTOR_HEADER] = actor
        if token:
            headers["Authorization"] = f"Bearer {token}"
        # Long polls (executions.wait) hold a request up to 60 s: the read timeout is longer.
        self.http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=headers,
            timeout=httpx.Timeout(90.0, connect=10.0),
            trust_env=trust_env,
        )

    def failure(self, exc: Exception) -> MajordomusError:
        return unavailable(
            f"cannot reach {self.where} ({exc.__class__.__name__}: {exc})",
            "start it (majordomus serve, or majordomus dev) or fix the API's URL",
        )

    async def request(
        self, method: str, path: str, raw_input: dict[str, Any] | None = None
    ) -> Any:
        """One route: a `GET` with the input as its query, any other method with it as a
        JSON body. The answer's JSON, or its error envelope raised as `MajordomusError`."""
        return await self.answer(method, path, raw_input, Any)

    async def answer(
        self, method: str, path: str, raw_input: dict[str, Any] | None, kind: Any
    ) -> Any:
        """`request`'s answer decoded straight into `kind` (one pass over its JSON), or
        `unavailable` when it is not one: an API of another version, say."""
        import httpx

        raw_input = raw_input or {}
        try:
            if method == "GET":
                response = await self.http.get(path, params=query_of(raw_input))
            else:
                response = await self.http.request(
                    method,
                    path,
                    content=msgspec.json.encode(raw_input),
                    headers={"Content-Type": "application/json"},
                )
        except httpx.HTTPError as exc:
            raise self.failure(exc) from None
        if response.status_code >= 400:
            raise error_of_response(response)
        try:
            return msgspec.json.decode(response.content, type=kind)
        except msgspec.ValidationError as exc:
            raise unavailable(
                f"{self.where} answered what this client cannot read ({exc})",
                "check the URL points at a majordomus API of this version",
            ) from None
        except msgspec.DecodeError:
            raise unavailable(
                f"{self.where} answered something that is not JSON",
                "check the URL points at a majordomus API",
            ) from None

    async def call(self, cap: Capability, raw_input: dict[str, Any]) -> Any:
        """A capability by its own route (the CLI's generic call)."""
        from majordomus.errors import refused

        method, path = cap.exposure.http_method, cap.exposure.http_path
        if not method or not path:
            raise refused(
                f"{cap.id} has no HTTP route, so it cannot be called through the API",
                "call it straight against Redis instead",
            )
        return await self.request(method, path, raw_input)

    async def start(self, request: StartInput, known: Capability | None) -> ExecutionSnapshot:
        # The route's own input, as its body: the API validates and times it.
        body = msgspec.to_builtins(request)
        return await self.answer("POST", START_PATH, body, ExecutionSnapshot)  # type: ignore[no-any-return]

    async def get(self, execution_id: str) -> ExecutionSnapshot:
        return await self.answer("GET", GET_PATH, {"id": execution_id}, ExecutionSnapshot)  # type: ignore[no-any-return]

    async def list(
        self, match: Match, limit: int | None, before: str | None, sort: Sort, order: Order
    ) -> ExecutionList:
        # Times as RFC 3339 text, as the query string takes them.
        query = {**msgspec.to_builtins(match), "limit": limit, "before": before}
        if sort != "created":
            query["sort"] = sort
        if order != "desc":
            query["order"] = order
        return await self.answer("GET", LIST_PATH, query, ExecutionList)  # type: ignore[no-any-return]

    async def count(self, match: Match) -> MatchCount:
        query = msgspec.to_builtins(match)
        return await self.answer("GET", COUNT_PATH, query, MatchCount)  # type: ignore[no-any-return]

    async def cancel(self, execution_id: str) -> CancelOutput:
        return await self.answer("POST", CANCEL_PATH, {"id": execution_id}, CancelOutput)  # type: ignore[no-any-return]

    async def wait(self, execution_id: str, timeout_ms: int) -> ExecutionSnapshot:
        query = {"id": execution_id, "timeout_ms": timeout_ms}
        return await self.answer("GET", WAIT_PATH, query, ExecutionSnapshot)  # type: ignore[no-any-return]

    async def events(self, execution_id: str, after: int, limit: int | None) -> EventHistory:
        query = {"id": execution_id, "after": after, "limit": limit}
        return await self.answer("GET", EVENTS_PATH, query, EventHistory)  # type: ignore[no-any-return]

    async def follow(self, execution_id: str, after: int) -> AsyncIterator[Message]:
        """The live channel from `after`, reconnecting from the last sequence seen."""
        import asyncio

        import httpx
        from httpx_sse import SSEError

        execution_id = require_execution_id(execution_id)
        state: dict[str, Any] = {"cursor": after, "live": True}
        failures = 0
        while state["live"]:
            try:
                async for message in self._live(execution_id, state):
                    failures = 0
                    yield message
                if state.get("ended"):
                    return
            except (httpx.TransportError, SSEError) as exc:
                failures += 1
                if failures > SSE_RECONNECTS:
                    raise unavailable(
                        f"the live channel of {self.where} kept failing ({exc})",
                        "look at the API server's log; waiting for the execution still works",
                    ) from None
                await asyncio.sleep(min(0.2 * 2**failures, 5.0))
            # A stream that ended without `stream.closing` (the API restarted, say) goes on
            # from the cursor; a final execution then answers 204, which ends this.
        async for message in self._poll(execution_id, int(state["cursor"])):
            yield message

    async def _live(self, execution_id: str, state: dict[str, Any]) -> AsyncIterator[Message]:
        """One connection to the live channel; `state` keeps the cursor across reconnects."""
        import httpx
        from httpx_sse import aconnect_sse

        from majordomus.engine import LIVE_PATH

        params = {"execution": execution_id, "after": str(state["cursor"])}
        async with aconnect_sse(
            self.http,
            "GET",
            LIVE_PATH,
            params=params,
            headers={"Accept": "text/event-stream"},
            # Heartbeats (comments) arrive every heartbeat_seconds; silence this long is a
            # dead connection, which is reconnected from the cursor.
            timeout=httpx.Timeout(SSE_SILENCE_SECONDS, connect=10.0),
        ) as source:
            response = source.response
            if response.status_code == 204:
                state["ended"] = True  # final, and we have seen its end
                return
            if response.status_code in (404, 405, 406):
                state["live"] = False  # no live channel here: long-poll the routes instead
                return
            if response.status_code >= 400:
                await response.aread()
                raise error_of_response(response)
            async for sse in source.aiter_sse():
                message = json.loads(sse.data) if sse.data else {}
                if sse.event == "stream.closing":
                    state["ended"] = True
                    return
                if sse.event.startswith("stream."):
                    message = {"type": sse.event, "data": message.get("data", {})}
                else:
                    state["cursor"] = int(message.get("sequence", state["cursor"]))
                known = live_message(message)
                if known is not None:
                    yield known

    def _poll(self, execution_id: str, after: int) -> AsyncIterator[Message]:
        """Following without the live channel: page the events, long-poll between pages."""

        async def page(cursor: int) -> EventHistory:
            return await self.events(execution_id, cursor, None)

        async def wait(cursor: int) -> None:
            await self.wait(execution_id, POLL_WAIT_MS)

        return paged(page, wait, after)

    async def aclose(self) -> None:
        await self.http.aclose()


async def wait_long(
    transport: Transport, execution_id: str, timeout: float | None
) -> ExecutionSnapshot:
    """An execution's snapshot once final, or as it stands after `timeout` seconds (None:
    until it ends), made of waits within the server's bound (`LIMITS.wait_bound_ms`)."""
    deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
    slice_ms = min(WAIT_SLICE_MS, LIMITS.wait_bound_ms)
    while True:
        left_ms = slice_ms
        if deadline is not None:
            left_ms = min(slice_ms, max(0, int((deadline - time.monotonic()) * 1000)))
        snap = await transport.wait(execution_id, left_ms)
        if is_final(snap.state):
            return snap
        if deadline is not None and time.monotonic() >= deadline:
            return snap
