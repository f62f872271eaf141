"""The access log: one line per HTTP request the API answers, as an ASGI middleware around
the whole application (so a 404, a refused Host and a request to `/mcp` are logged too).

Each line is logged by `majordomus.access` at INFO when the response ends, with the fields
`method`, `path` (without its query, which may carry what a URL should not keep), `status`,
`duration_ms`, `actor` and `client`:

    GET /api/v1/executions/e-... 200 2.1ms token 10.0.0.7:53122

`actor` is who the access layer (`api.access`) takes the caller for: `token` when the
request carries the server's bearer token, else `anonymous` (every caller when no
`MAJORDOMUS_API_TOKEN` is set; a caller without it is answered 401 where one is). `client`
is the connection's peer address (a proxy's, behind one).

A long-lived response (the live channel at `/events`, an MCP stream) is logged once, when
it ends: its duration is how long it was open. A request the client gave up on before any
answer has the status 0; one whose handler raised before answering, 500.

`MAJORDOMUS_ACCESS_LOG=0` leaves the application unwrapped: no line and no cost. uvicorn's
own access log is off (`api.launch`), or each request would be logged twice.
"""

from __future__ import annotations

import logging
import time

from litestar.types import ASGIApp, Message, Receive, Scope, Send

from majordomus.api.access import token_problem
from majordomus.config import Settings

log = logging.getLogger("majordomus.access")

NO_STATUS = 0
"""The status of a request that ended before any answer started (the client went away)."""
HANDED_ON = "majordomus.handed_on"
"""Set in a request's `state` when the API handed its connection to the live delivery
process (`api.live.apart`): that process logs the request's line, with its status."""
RAISED_STATUS = 500
"""The status of a request whose application raised before answering (the server's 500)."""


class AccessLog:
    """Logs each HTTP request once its response ends; passes anything else (the lifespan,
    websockets) through untouched."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.token = settings.api_token or None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = NO_STATUS

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception:
            status = status or RAISED_STATUS
            raise
        finally:
            if not scope.get("state", {}).get(HANDED_ON):
                self.say(scope, status, (time.perf_counter() - started) * 1000)

    def actor(self, scope: Scope) -> str:
        if self.token is None or token_problem(scope, self.token) is not None:
            return "anonymous"
        return "token"

    def say(self, scope: Scope, status: int, duration_ms: float) -> None:
        method = str(scope.get("method", ""))
        path = str(scope.get("path", ""))
        peer = scope.get("client")
        client = f"{peer[0]}:{peer[1]}" if peer else "-"
        actor = self.actor(scope)
        duration = round(duration_ms, 1)
        log.info(
            "%s %s %d %.1fms %s %s",
            method,
            path,
            status,
            duration,
            actor,
            client,
            extra={
                "method": method,
                "path": path,
                "status": status,
                "duration_ms": duration,
                "actor": actor,
                "client": client,
            },
        )


def with_access_log(app: ASGIApp, settings: Settings) -> ASGIApp:
    """`app` with its access log, unless `MAJORDOMUS_ACCESS_LOG=0` or the log's level
    leaves INFO out (then nothing is wrapped: no cost per request)."""
    if not settings.access_log or not log.isEnabledFor(logging.INFO):
        return app
    return AccessLog(app, settings)
