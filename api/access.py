"""Who may call: the origin check and the optional bearer token, as one ASGI middleware.

A browser on another site can make a user's browser send requests here; it cannot make
the browser lie about `Origin`. So a state-changing request (any method but GET, HEAD and
OPTIONS) and the live channel are refused (403 `forbidden`) when they carry an `Origin`
that is not this server's own (same scheme, host and port). A request with no `Origin`
(curl, a script, a same-origin GET) passes. With `MAJORDOMUS_API_TOKEN` set, every route
but `/api/v1/live`, `/api/v1/ready` and the static documentation shell at `/docs` needs
`Authorization: Bearer <token>`; the shell holds no data and asks for the token itself.
"""

from __future__ import annotations

import hmac
from urllib.parse import urlsplit

from litestar.types import ASGIApp, Receive, Scope, Send

from api.errors import send_error
from majordomus.config import Settings
from majordomus.errors import MajordomusError

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
OPEN_PATHS = frozenset({"/api/v1/live", "/api/v1/ready", "/docs"})
DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


def header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return value.decode("latin-1")
    return None


def _endpoint(scheme: str, netloc: str) -> tuple[str, str, int] | None:
    try:
        parts = urlsplit(f"{scheme}://{netloc}")
        port = parts.port or DEFAULT_PORTS.get(scheme, 0)
    except ValueError:
        return None
    return scheme, (parts.hostname or "").lower(), port


def is_foreign_origin(scope: Scope) -> bool:
    """Whether the request names an `Origin` other than this server's own."""
    origin = header(scope, b"origin")
    if origin is None:
        return False
    try:
        given = urlsplit(origin.strip())
    except ValueError:
        return True
    theirs = _endpoint(given.scheme.lower(), given.netloc) if given.scheme else None
    host = header(scope, b"host")
    if host is None:
        server = scope.get("server")
        host = f"{server[0]}:{server[1]}" if server else ""
    ours = _endpoint(str(scope.get("scheme", "http")), host)
    return theirs is None or ours is None or theirs != ours


def token_problem(scope: Scope, token: str) -> str | None:
    """Why the request's bearer token does not do, or None when it does."""
    given = header(scope, b"authorization")
    if not given:
        return "this server needs a bearer token (Authorization: Bearer <token>)"
    scheme, _, value = given.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(
        value.strip().encode(), token.encode()
    ):
        return "the bearer token is not this server's"
    return None


class AccessGuard:
    """Refuses foreign origins and (when configured) requests without the bearer token."""

    def __init__(self, app: ASGIApp, settings: Settings, live_path: str = "/events") -> None:
        self.app = app
        self.token = settings.api_token or None
        self.live_path = live_path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        if self.token and path not in OPEN_PATHS:
            problem = token_problem(scope, self.token)
            if problem:
                await send_error(
                    send,
                    MajordomusError(
                        "forbidden", problem, "send Authorization: Bearer $MAJORDOMUS_API_TOKEN"
                    ),
                )
                return
        guarded = scope.get("method") not in SAFE_METHODS or path == self.live_path
        if guarded and is_foreign_origin(scope):
            await send_error(
                send,
                MajordomusError(
                    "forbidden",
                    f"requests from origin {header(scope, b'origin')!r} are refused here",
                    "call the API from its own origin, or from a client that sends no Origin",
                ),
            )
            return
        await self.app(scope, receive, send)
