"""The HTTP API: every capability's route projected from the registry, on Litestar.

`create_app` reads the registry and builds one route per capability with an HTTP exposure
(GET input from the query string, POST input from a JSON body, the output Struct as JSON,
200), the probes (`/api/v1/live`, `/api/v1/ready`), `/openapi.json` and `/docs` projected
from the same registry, the live channel at `/events`, Prometheus' scrape at `/metrics`
(`majordomus.metrics`; not a capability, so in neither the registry nor the OpenAPI
document, and behind the token like any data route), and the MCP server at `/mcp` when
`api.mcp` provides one. No route is written by hand for one capability; the handlers call
the engine and nothing else. Errors of every kind leave through `api.errors`; who may call
is decided by `api.access` before any handler runs. The lifespan also runs this process's
candidacy for the one sweeper (`majordomus.sweeper`), so the executions of dead workers are
failed even when no worker is left.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import AsyncIterator, Awaitable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, cast
from urllib.parse import parse_qsl

import jsonschema
import msgspec
from litestar import Litestar, Request, Response, asgi, get, route
from litestar.enums import HttpMethod
from litestar.handlers import BaseRouteHandler
from litestar.middleware import DefineMiddleware
from litestar.types import Receive, Scope, Send
from msgspec import UNSET, UnsetType

from majordomus import clock
from majordomus.api.access import AccessGuard
from majordomus.api.console import console_handlers
from majordomus.api.docs import DOCS_HTML, HTML, StaticDocument
from majordomus.api.errors import JSON, error_response, make_exception_handler
from majordomus.api.live import LISTENER_BUFFER, FeedHub, LiveChannel
from majordomus.api.live.apart import Handoff
from majordomus.api.mcp import build_mcp
from majordomus.api.openapi import EXECUTION_HEADER, openapi_document, without_null
from majordomus.config import LIMITS, Settings
from majordomus.engine import LIVE_PATH, Engine
from majordomus.errors import MajordomusError, invalid_input
from majordomus.loading import load_capabilities
from majordomus.loops import within
from majordomus.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from majordomus.metrics import exposition
from majordomus.model import ACTOR_HEADER, CLIENT_ACTORS
from majordomus.registry import Capability
from majordomus.reports import drained_workers
from majordomus.schemas import MAX_INPUT_DEPTH, coerce_strings
from majordomus.scrape import cluster_families
from majordomus.store.connect import api_client
from majordomus.store.failures import UNREACHABLE
from majordomus.sweeper import Sweeper, concurrency_of, per_key_of

log = logging.getLogger("majordomus.api")

API_MAX_CONNECTIONS = 32
"""Redis connections one API process holds at most, whatever the number of clients."""


class ProbeStatus(msgspec.Struct, omit_defaults=True):
    """The answer of `/api/v1/live` and `/api/v1/ready`."""

    status: str
    listeners: int
    channels: int
    calls: int
    """Capability calls this process is answering now, over HTTP and MCP alike."""
    workers: int | UnsetType = UNSET
    draining: list[str] | UnsetType = UNSET
    """Those of the workers counted that an operator drained (`queue.drain`): they beat and
    take no new work until undrained. They still count: the probe stays ready (200)."""
    redis_data_lost_at: str | UnsetType = UNSET
    """When this process last found that Redis lost its data (`majordomus.epochs`)."""
    delivery_pid: int | UnsetType = UNSET
    """The process that serves this API's live channels (`serve`'s delivery process,
    `api.live.apart`), while it is up; absent, the API serves them itself. `channels`
    counts the channels of both, `listeners` this process's own."""


METRICS_PATH = "/metrics"
"""Prometheus' scrape: the process's metrics and the cluster's queue (majordomus.metrics)."""

STOP_SECONDS = 3.0
"""How long the API waits for its sweeper and its feed reader to stop when it shuts down."""


def client_name() -> str:
    return f"majordomus-api:{socket.gethostname()}:{os.getpid()}"


def api_redis(url: str | None, max_connections: int = API_MAX_CONNECTIONS) -> Any:
    """The API's one Redis client (`majordomus.store.connect.api_client`), named for this
    process in `CLIENT LIST`."""
    return api_client(url, max_connections, client_name())


# -- capability routes ------------------------------------------------------------------------


class QueryShape:
    """What a GET capability's query string may hold, from its input schema, computed once."""

    def __init__(self, cap: Capability) -> None:
        schema = cap.input_schema
        props = schema.get("properties")
        self.known: set[str] | None = None
        if isinstance(props, dict) and not schema.get("additionalProperties"):
            self.known = set(props)
        # Each parameter as the OpenAPI document shows it: absent rather than null.
        self.documented: dict[str, jsonschema.Draft202012Validator] = {}
        for name, prop in (props or {}).items():
            shown = dict(without_null(prop))
            if "$defs" in schema:
                shown["$defs"] = schema["$defs"]
            self.documented[name] = jsonschema.Draft202012Validator(shown)


def query_input(cap: Capability, scope: Scope, shape: QueryShape) -> dict[str, Any]:
    """A GET's input: the query string, typed by the input schema (`"3"` becomes 3).

    A parameter is given once or not at all; one the input type does not have is refused;
    `?limit=` or `?limit=null` is refused where the document shows an integer (leave it out
    for the default), while `?capability=` is the empty string it looks like.
    """
    params: dict[str, str] = {}
    raw = scope.get("query_string", b"").decode("latin-1")
    for name, value in parse_qsl(raw, keep_blank_values=True):
        if name in params:
            raise invalid_input(f"the parameter {name!r} is given more than once")
        params[name] = value
    if shape.known is not None:
        unknown = sorted(set(params) - shape.known)
        if unknown:
            raise invalid_input(
                f"{cap.id} has no parameter {unknown[0]!r}",
                f"its parameters are: {', '.join(sorted(shape.known)) or 'none'}",
            )
    typed = coerce_strings(cap.input, params)
    for name, value in typed.items():
        check = shape.documented.get(name)
        if value is not None or check is None:
            continue
        if check.is_valid(params[name]):
            typed[name] = params[name]
        elif not check.is_valid(None):
            raise invalid_input(
                f"the parameter {name!r} has no value ({params[name]!r})",
                "give it a value, or leave it out for its default",
            )
    return typed


async def body_input(request: Request[Any, Any, Any]) -> Any:
    """A POST's input: the JSON body (empty is no input at all). JSON nested too deeply to
    decode is the client's to fix (`invalid_input`), like any other JSON that will not do;
    what decodes is bounded again by the input's validation (`MAX_INPUT_DEPTH`)."""
    body = await request.body()
    if not body.strip():
        return None
    try:
        value = msgspec.json.decode(body)
        if value is None:  # a body of `null` is not no body: an input is an object
            raise invalid_input("the body is null", "send a JSON object, or no body at all")
        return value
    except msgspec.DecodeError as exc:
        raise invalid_input(f"the body is not valid JSON ({exc})", "send a JSON object") from None
    except RecursionError:
        raise invalid_input(
            f"the body nests arrays and objects too deeply to read (the bound is "
            f"{MAX_INPUT_DEPTH} levels)",
            "send a flatter input",
        ) from None


def json_response(
    value: Any, status: int = 200, headers: dict[str, str] | None = None
) -> Response[Any]:
    return Response(
        content=msgspec.json.encode(value), status_code=status, media_type=JSON, headers=headers
    )


def preferred_wait_ms(prefer: str | None) -> tuple[int | None, str | None]:
    """How long a request asks its route to wait for the execution (RFC 7240 `Prefer`):
    `respond-async` is no wait, `wait=N` is N seconds (at most `LIMITS.wait_bound_ms`);
    with the preference applied, for `Preference-Applied`. None: the default wait."""
    for token in (prefer or "").split(","):
        name, _, value = token.strip().partition("=")
        name = name.strip().lower()
        if name == "respond-async":
            return 0, "respond-async"
        if name == "wait" and value.strip().isdigit():
            ms = min(int(value.strip()) * 1000, LIMITS.wait_bound_ms)
            return ms, f"wait={ms // 1000}"
    return None, None


async def until_disconnected(receive: Receive) -> None:
    """Returns when the client has gone away (the request's body already read)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def unless_disconnected(request: Request[Any, Any, Any], work: Awaitable[Any]) -> Any:
    """`work` awaited, or cancelled as soon as the caller disconnects (then None): what the
    API runs for a caller stops when nobody is left to answer. The work runs in the
    request's own task; one watcher task per call listens for the disconnect."""
    current = asyncio.current_task()
    assert current is not None
    answered = False

    def stop_the_work(g: asyncio.Future[None]) -> None:
        # Runs in a loop step of its own: once the work has answered, a late disconnect
        # must not cancel the task that now sends the answer.
        if not g.cancelled() and not answered:
            current.cancel()

    gone = asyncio.ensure_future(until_disconnected(request.receive))
    gone.add_done_callback(stop_the_work)
    try:
        result = await work
        answered = True
        return result
    except asyncio.CancelledError:
        if not gone.done() or gone.cancelled():
            raise  # not ours: the server is stopping
        current.uncancel()
        return None
    finally:
        gone.cancel()


def capability_route(cap: Capability, engine: Engine) -> BaseRouteHandler:
    """The one route of a capability: parse, `Engine.call`, answer. A capability that runs
    as an execution answers its output (200) when the execution succeeds within the wait,
    else `202` with the execution as it stands and `Location` to follow it; a built-in
    answers its output. Either stops when the caller disconnects (an execution goes on)."""
    method = cap.exposure.http_method or "GET"
    shape = QueryShape(cap) if method == "GET" else None

    async def answer(request: Request[Any, Any, Any]) -> Response[Any]:
        if method == "GET":
            assert shape is not None
            raw = query_input(cap, request.scope, shape)
        else:
            raw = await body_input(request)
        claimed = request.headers.get(ACTOR_HEADER)
        actor = claimed if claimed in CLIENT_ACTORS else "http"
        wait_ms, applied = preferred_wait_ms(request.headers.get("prefer"))
        # typed=False: the answer is only encoded, so what is stored goes out as it is.
        called = await unless_disconnected(
            request, engine.call(cap.id, raw, actor=actor, wait_ms=wait_ms, typed=False)
        )
        if called is None:  # nobody to answer
            return Response(content=b"", status_code=204)
        if called.execution is None:
            return json_response(called.output)
        headers = {EXECUTION_HEADER: called.execution.id}
        if applied:
            headers["Preference-Applied"] = applied
        if not called.pending:
            return json_response(called.output, headers=headers)
        headers["Location"] = called.execution.links.self_
        return json_response(called.execution, 202, headers)

    answer.__name__ = answer.__qualname__ = "capability_" + cap.id.replace(".", "_")
    answer.__doc__ = cap.description
    return route(
        cap.exposure.http_path,
        http_method=[cast(HttpMethod, method)],
        name=cap.id,
        include_in_schema=False,
        status_code=200,
    )(answer)


def _delivery_pid(handoff: Handoff | None) -> int | UnsetType:
    return handoff.pid if handoff is not None and handoff.pid else UNSET


# -- the application --------------------------------------------------------------------------


def create_app(
    settings: Settings,
    engine: Engine | None = None,
    *,
    max_connections: int = API_MAX_CONNECTIONS,
    listener_buffer: int = LISTENER_BUFFER,
    mount_mcp: bool = True,
    handoff: Handoff | None = None,
) -> Litestar:
    """The API on `engine` (or on a Redis pool of its own, from the settings, when None);
    its live channels served by `handoff`'s delivery process where it can (`serve`)."""
    owns_redis = engine is None
    if engine is None:
        registry = load_capabilities(settings.capabilities)
        engine = Engine(api_redis(settings.redis_url, max_connections), registry, settings)
    hub = FeedHub(engine, settings, buffer=listener_buffer)
    engine.follow = hub.read_after
    channel = LiveChannel(engine, hub, settings, handoff)

    caps = [c for c in engine.registry if c.exposure.http_method and c.exposure.http_path]
    handlers: list[Any] = [capability_route(cap, engine) for cap in caps]
    allowed: dict[str, list[str]] = {}
    for cap in caps:
        allowed.setdefault(cap.exposure.http_path or "", []).append(cap.exposure.http_method or "")

    document = msgspec.json.encode(
        openapi_document(engine.registry, token_required=bool(settings.api_token))
    )

    openapi_document_endpoint = StaticDocument(document, JSON)
    docs_page_endpoint = StaticDocument(DOCS_HTML.encode(), HTML)

    @asgi("/openapi.json", copy_scope=True, include_in_schema=False)
    async def openapi_json(scope: Scope, receive: Receive, send: Send) -> None:
        await openapi_document_endpoint(scope, receive, send)

    @asgi("/docs", copy_scope=True, include_in_schema=False)
    async def docs_page(scope: Scope, receive: Receive, send: Send) -> None:
        await docs_page_endpoint(scope, receive, send)

    @get("/api/v1/live", include_in_schema=False)
    async def live_probe() -> Response[Any]:
        return json_response(
            ProbeStatus(
                "live",
                hub.listeners,
                hub.channels,
                engine.calls_in_flight,
                delivery_pid=_delivery_pid(handoff),
            )
        )

    @get("/api/v1/ready", include_in_schema=False)
    async def ready_probe() -> Response[Any]:
        try:
            await engine.ping()
            since = int(clock.now() * 1000 - settings.lease_seconds * 1000)
            workers = await engine.workers_beating(since)
            draining = await drained_workers(engine, workers)
        except UNREACHABLE as exc:
            return error_response(
                MajordomusError(
                    "unavailable",
                    f"Redis is unreachable ({exc})",
                    "start Redis, or check MAJORDOMUS_REDIS_URL",
                )
            )
        if not workers:
            return error_response(
                MajordomusError(
                    "unavailable",
                    f"no worker has reported in the last {settings.lease_seconds:g} s",
                    "start one: majordomus worker",
                )
            )
        lost_at = engine.epochs.lost_at
        return json_response(
            ProbeStatus(
                "ready",
                hub.listeners,
                hub.channels,
                engine.calls_in_flight,
                len(workers),
                draining=draining,
                redis_data_lost_at=lost_at if lost_at is not None else UNSET,
                delivery_pid=_delivery_pid(handoff),
            )
        )

    @get(METRICS_PATH, include_in_schema=False)
    async def metrics() -> Response[Any]:
        # Not a capability (no execution, no MCP tool, not in the OpenAPI document): a
        # scrape in Prometheus' text format, answered whatever Redis does (majordomus.metrics).
        handed = handoff.channels if handoff is not None else 0  # its delivery process's
        families = await cluster_families(engine, listeners=hub.listeners + handed)
        # The header given whole: Litestar appends `; charset=utf-8` to a `text/` media
        # type, so one that already names its charset would carry it twice.
        return Response(
            content=exposition(families),
            media_type=METRICS_CONTENT_TYPE,
            headers={"Content-Type": METRICS_CONTENT_TYPE},
        )

    @asgi(LIVE_PATH, copy_scope=True, include_in_schema=False)
    async def live_channel(scope: Scope, receive: Receive, send: Send) -> None:
        await channel(scope, receive, send)

    handlers += [openapi_json, docs_page, live_probe, ready_probe, live_channel, metrics]
    handlers += console_handlers()  # the console at `/` (api/console)
    allowed.update({p: ["GET"] for p in ("/api/v1/live", "/api/v1/ready", METRICS_PATH)})

    mcp = build_mcp(engine, settings, hub) if mount_mcp else None  # an import error fails start-up
    if mcp is not None:

        @asgi("/mcp", is_mount=True, copy_scope=True, include_in_schema=False)
        async def mcp_endpoint(scope: Scope, receive: Receive, send: Send) -> None:
            app: Any = mcp.asgi  # the SDK types ASGI as Starlette does, Litestar more narrowly
            await app(scope, receive, send)

        handlers.append(mcp_endpoint)

    # The API sweeps too, so executions of dead workers are failed with no worker left.
    sweeper = Sweeper(
        engine.store,
        settings,
        f"api:{client_name()}",
        concurrency_of(engine.registry),
        engine=engine,
        per_key=per_key_of(engine.registry),
    )

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        await hub.start()
        sweeper.start()
        if handoff is not None:
            handoff.start()
        try:
            async with AsyncExitStack() as stack:
                if mcp is not None:
                    await stack.enter_async_context(mcp.lifespan())
                yield
        finally:
            # Bounded: a stop that hangs (redis-py can lose a cancel that lands mid-command)
            # must not keep the API from exiting; an unreleased lock lapses by itself.
            if handoff is not None:
                await handoff.stop()
            await within(STOP_SECONDS, sweeper.stop())
            await within(STOP_SECONDS, hub.stop())
            if owns_redis:
                await engine.aclose()

    app = Litestar(
        route_handlers=handlers,
        exception_handlers={Exception: make_exception_handler(allowed)},
        middleware=[DefineMiddleware(AccessGuard, settings=settings, live_path=LIVE_PATH)],
        lifespan=[lifespan],
        # The process's logging is `majordomus.logs`'s: Litestar's default would replace
        # the root logger's handler with its own format.
        logging_config=None,
        openapi_config=None,
        request_max_body_size=LIMITS.body_bytes,
        debug=False,
    )
    app.state.engine = engine
    app.state.hub = hub
    app.state.handoff = handoff
    app.state.mcp = mcp
    app.state.sweeper = sweeper
    return app
