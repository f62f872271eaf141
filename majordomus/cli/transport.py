"""The CLI's two ways to reach majordomus: straight to Redis, or through the HTTP API.

Both answer the same questions the same way: `call` runs a capability and answers its
output as plain JSON-shaped values (what the HTTP API would have sent, so `--format json`
prints the same either way), and `follow` yields an execution's events (and the live
channel's control messages) from a cursor until it is final, typed as `majordomus.model`
has them. `Direct` drives an `Engine` on `MAJORDOMUS_REDIS_URL`, like `rq info` reads its
Redis, through the engine's own reads (never its store); `Remote` speaks the HTTP routes
projected from the registry and the SSE live channel, and names itself on every request
(`ACTOR_HEADER: cli`) so an API that honours it attributes the CLI's starts and cancels to
`cli`, as `Direct` does. Neither renders anything: that is `render.py`'s job.

Which one a command uses (`transport`): `--api URL` or `MAJORDOMUS_API_URL`, through that
API; else `MAJORDOMUS_REDIS_URL`, straight to it; else a `majordomus dev` running for this
user, found by the record it keeps (`DevRecord`, at `dev_record_path()`), through its API,
which reaches whatever Redis dev runs on, in-process fakeredis included; else, as before,
straight to `DEFAULT_URL`, named as the default in every message that mentions it.

Each transport imports what it drives when it is made (the engine and the Redis client for
`Direct`, httpx for `Remote`), so a command that uses neither, or only one, does not pay
for loading the other (`majordomus --help` loads none).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, Union

import msgspec

from majordomus.config import Settings, shown_url
from majordomus.errors import MajordomusError, refused, unavailable
from majordomus.ids import require_execution_id
from majordomus.model import (
    ACTOR_HEADER,
    EventHistory,
    ExecutionEvent,
    StreamLagged,
    StreamLaggedData,
    StreamMessage,
)
from majordomus.registry import Capability, Registry
from majordomus.states import is_final

if TYPE_CHECKING:
    import httpx

    from majordomus.store.failures import StoreFailure

Message = Union[ExecutionEvent, StreamMessage]
"""What following yields: an execution's event, or a control message of the live channel."""

T = TypeVar("T")

REDIS_CONNECT_SECONDS = 5.0
FOLLOW_BLOCK_MS = 2000
"""How long a direct follow blocks on the stream before it looks at the execution again."""
SSE_RECONNECTS = 5
SSE_SILENCE_SECONDS = 90.0
POLL_WAIT_MS = 500
"""Without a live channel, how long one `executions.wait` long poll holds between pages."""
CLI_ACTOR = "cli"
"""What the CLI's actions are attributed to, directly and through the API (`ACTOR_HEADER`)."""


class Transport(Protocol):
    where: str
    """Where the answers come from, for messages: `Redis at …` or `the API at …`."""
    found: str | None
    """How the CLI came to this transport when it found it by itself (a running `dev`): a
    line for stderr; None when the command line or the environment named it."""

    async def call(self, cap: Capability, raw_input: dict[str, Any]) -> Any: ...

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
    """A plain answer as the type its capability declares (converted once, where it arrives),
    or `unavailable` when it is not one: an API of another version, say."""
    try:
        return msgspec.convert(answer, kind)
    except msgspec.ValidationError as exc:
        raise unavailable(
            f"{where} answered a {kind.__name__} this CLI cannot read ({exc})",
            "check --api points at a majordomus API of this version",
        ) from None


# -- straight to Redis ----------------------------------------------------------------------


class Direct:
    """Capabilities run here, on an engine over the shared Redis."""

    def __init__(
        self, settings: Settings, registry: Registry, defaulted: str | None = None
    ) -> None:
        """`defaulted`: why no Redis was named, when `DEFAULT_URL` is used for want of one."""
        from majordomus.engine import Engine
        from majordomus.store.connect import DEFAULT_URL, connect

        url = settings.redis_url or DEFAULT_URL
        self.where = f"Redis at {shown_url(url)}"
        if not settings.redis_url:
            self.where += f" (the default: {defaulted or 'MAJORDOMUS_REDIS_URL is unset'})"
        self.found: str | None = None
        # A URL that is no Redis URL is refused here, as `invalid_input`.
        client = connect(url, connect_timeout=REDIS_CONNECT_SECONDS)
        self.engine = Engine(client, registry, settings)

    async def call(self, cap: Capability, raw_input: dict[str, Any]) -> Any:
        output = await self.engine.invoke(cap.id, raw_input, actor=CLI_ACTOR)
        return msgspec.to_builtins(output)

    def follow(self, execution_id: str, after: int) -> AsyncIterator[Message]:
        async def page(cursor: int) -> EventHistory:
            return await self.engine.events(execution_id, after=cursor)

        async def wait(cursor: int) -> None:
            # Block until something is appended (or a while passes), then page again.
            await self.engine.read_stream_after(execution_id, cursor, FOLLOW_BLOCK_MS)

        return paged(page, wait, after)

    async def aclose(self) -> None:
        await self.engine.aclose()


def store_failure(exc: StoreFailure, where: str) -> MajordomusError:
    """A Redis failure as the CLI reports it: one sentence and what to do."""
    from majordomus.store.failures import UNREACHABLE

    if isinstance(exc, (*UNREACHABLE, OSError)):
        return unavailable(
            f"cannot reach {where} ({exc})",
            "start majordomus dev, which commands in other terminals find by themselves; "
            "or point MAJORDOMUS_REDIS_URL at a Redis, or go through an API with --api URL",
        )
    return unavailable(f"{where} answered an error ({exc})", "check the Redis server's log")


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


def error_of_response(response: httpx.Response) -> MajordomusError:
    """The API's error envelope as a `MajordomusError` (or the status, when there is none)."""
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
    if status in (401, 403):
        return MajordomusError(
            "forbidden",
            f"the API refused the request ({status})",
            "set MAJORDOMUS_API_TOKEN to the server's token",
        )
    if status == 404:
        return MajordomusError(
            "not_found",
            f"the API has no {response.request.method} {response.request.url.path}",
            "check --api points at a majordomus API of this version",
        )
    return unavailable(
        f"the API answered {status} {response.reason_phrase}",
        "look at the API server's log",
    )


class Remote:
    """Capabilities called over the HTTP API; events followed on its live channel."""

    def __init__(
        self,
        base_url: str,
        registry: Registry,
        token: str | None = None,
        *,
        found: str | None = None,
    ) -> None:
        """`found`: the line saying how the CLI found this API by itself (a running `dev`)."""
        import httpx

        self.registry = registry
        self.base_url = base_url.rstrip("/")
        self.where = f"the API at {shown_url(self.base_url)}"
        self.found = found
        headers = {"Accept": "application/json", ACTOR_HEADER: CLI_ACTOR}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        # Long polls (executions.wait) hold a request up to 60 s: the read timeout is longer.
        self.http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=headers,
            timeout=httpx.Timeout(90.0, connect=10.0),
            # A dev found on this machine is on loopback: no proxy of the environment applies.
            trust_env=found is None,
        )

    async def call(self, cap: Capability, raw_input: dict[str, Any]) -> Any:
        import httpx

        method, path = cap.exposure.http_method, cap.exposure.http_path
        if not method or not path:
            raise refused(
                f"{cap.id} has no HTTP route, so it cannot be called through the API",
                "run the command without --api, straight against Redis",
            )
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
            return response.json()
        except ValueError:
            raise unavailable(
                f"{self.where} answered something that is not JSON",
                "check --api points at a majordomus API",
            ) from None

    def failure(self, exc: httpx.HTTPError) -> MajordomusError:
        return unavailable(
            f"cannot reach {self.where} ({exc.__class__.__name__}: {exc})",
            "start it (majordomus serve, or majordomus dev) or fix --api / MAJORDOMUS_API_URL",
        )

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
                        "look at the API server's log; majordomus executions wait ID still works",
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
        events_cap = self.registry.require("executions.events")
        wait_cap = self.registry.require("executions.wait")

        async def page(cursor: int) -> EventHistory:
            answer = await self.call(events_cap, {"id": execution_id, "after": cursor})
            return typed(answer, EventHistory, self.where)

        async def wait(cursor: int) -> None:
            await self.call(wait_cap, {"id": execution_id, "timeout_ms": POLL_WAIT_MS})

        return paged(page, wait, after)

    async def aclose(self) -> None:
        await self.http.aclose()


def live_message(raw: Any) -> Message | None:
    """A message of the live channel, typed; None for one this CLI does not know (a newer
    API's), which following passes over."""
    try:
        return msgspec.convert(raw, Message)  # type: ignore[arg-type]
    except msgspec.ValidationError:
        return None


# -- finding a running dev --------------------------------------------------------------------

DEV_RECORD_NAME = "dev.json"
DEV_PROBE_SECONDS = 2.0
"""How long the found dev's API has to answer `/api/v1/live` before it is passed over."""
LIVE_PROBE_PATH = "/api/v1/live"


class DevRecord(msgspec.Struct, frozen=True):
    """What a running `majordomus dev` leaves for the CLI in other terminals to find it by
    (written by `api.launch.run_dev` once its API answers, removed when it stops), as one
    JSON object: `{"api_url": ..., "pid": ..., "redis": ..., "redis_url": ...}`. Members
    a newer `dev` adds are passed over."""

    api_url: str
    """Its API's base URL, as a client on this machine reaches it (`http://127.0.0.1:8000`)."""
    pid: int
    """Its process: a record whose process is gone (dev was killed) is passed over."""
    redis: str
    """Which Redis it runs on, as its banner says it (any password shown as `***`)."""
    redis_url: str | None = None
    """That Redis's URL, password shown as `***`; None for in-process fakeredis."""


def dev_record_path(environ: dict[str, str] | None = None) -> Path:
    """Where a running `dev` keeps its record, per user: `$XDG_RUNTIME_DIR/majordomus/dev.json`
    (the per-user runtime directory, emptied at logout and reboot) when that is set to an
    absolute path; else `$XDG_CACHE_HOME/majordomus/dev.json`, `~/.cache/majordomus/dev.json`
    by default; else, with no home at all, `<temp dir>/majordomus-<uid>/dev.json`. A record
    outliving its `dev` (killed by SIGKILL, say) is harmless: its pid is gone, or its API
    does not answer, and it is passed over."""
    env = os.environ if environ is None else environ
    runtime = env.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(runtime):
        return Path(runtime) / "majordomus" / DEV_RECORD_NAME
    cache = env.get("XDG_CACHE_HOME", "")
    if os.path.isabs(cache):
        return Path(cache) / "majordomus" / DEV_RECORD_NAME
    try:
        return Path.home() / ".cache" / "majordomus" / DEV_RECORD_NAME
    except RuntimeError:  # no HOME and no password entry
        import tempfile

        uid = os.getuid() if hasattr(os, "getuid") else "user"
        return Path(tempfile.gettempdir()) / f"majordomus-{uid}" / DEV_RECORD_NAME


def write_dev_record(record: DevRecord, path: Path | None = None) -> Path:
    """Write `record` whole (a reader never sees half of it), readable by this user alone;
    a `dev` started later replaces the record of one still running. Raises OSError."""
    path = path or dev_record_path()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    scratch = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(msgspec.json.encode(record))
    os.replace(scratch, path)
    return path


def read_dev_record(path: Path | None = None) -> DevRecord | None:
    """The record at `path`, or None when there is none or it cannot be read."""
    try:
        return msgspec.json.decode((path or dev_record_path()).read_bytes(), type=DevRecord)
    except (OSError, msgspec.DecodeError):
        return None


def remove_dev_record(pid: int, path: Path | None = None) -> None:
    """Remove the record if it is still `pid`'s (not that of a `dev` started since)."""
    path = path or dev_record_path()
    record = read_dev_record(path)
    if record is not None and record.pid == pid:
        with contextlib.suppress(OSError):
            path.unlink()


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive, though not likely our dev
        return True
    except OSError:
        return False
    return True


def api_answers(base_url: str) -> bool:
    import httpx

    try:
        response = httpx.get(
            base_url.rstrip("/") + LIVE_PROBE_PATH, timeout=DEV_PROBE_SECONDS, trust_env=False
        )
    except httpx.HTTPError:
        return False
    return response.status_code == 200


def running_dev(path: Path | None = None) -> tuple[DevRecord | None, str]:
    """The `dev` this user runs, when its record names a live process whose API answers;
    and, either way, a clause saying what was found, for messages."""
    path = path or dev_record_path()
    record = read_dev_record(path)
    if record is None:
        return None, "MAJORDOMUS_REDIS_URL is unset, and no majordomus dev is running"
    if not process_alive(record.pid):
        return None, (
            f"MAJORDOMUS_REDIS_URL is unset, and the majordomus dev recorded in {path}, "
            f"pid {record.pid}, is gone"
        )
    if not api_answers(record.api_url):
        return None, (
            f"MAJORDOMUS_REDIS_URL is unset, and the majordomus dev recorded in {path}, "
            f"pid {record.pid}, does not answer at {record.api_url}"
        )
    return record, f"recorded in {path}"


def transport(settings: Settings, registry: Registry, api: str | None) -> Transport:
    """`--api URL` (or `MAJORDOMUS_API_URL`) goes through that API; `MAJORDOMUS_REDIS_URL`
    straight to Redis; with neither, through the API of a running `majordomus dev`, else
    straight to the default Redis, which messages then call the default and say why."""
    url = api or settings.api_url
    if url:
        return Remote(url, registry, settings.api_token)
    if settings.redis_url:
        return Direct(settings, registry)
    dev, why = running_dev()
    if dev is None:
        return Direct(settings, registry, defaulted=why)
    on = dev.redis_url or "its in-process fakeredis"
    found = (
        f"majordomus: using the majordomus dev API at {dev.api_url} (pid {dev.pid}, on {on}; {why})"
    )
    return Remote(dev.api_url, registry, settings.api_token, found=found)
