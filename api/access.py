"""Who may call: the Host check, the origin check and the optional bearer token, as one
ASGI middleware, in front of every route: REST, the live channel and MCP at `/mcp` alike.

A page on a domain its owner rebinds to this server's address (DNS rebinding) is same-origin
with itself, so the origin check alone cannot stop it; the `Host` it sends still names that
domain. So a request whose `Host` is not loopback (`127.0.0.1`, `localhost`, `[::1]`, any
port), not the address the connection arrived at, and not one of `MAJORDOMUS_ALLOWED_HOSTS`
(`host` or `host:port`; `*`: any) is refused (421 `refused`, the status the MCP SDK used),
before anything else is looked at. The probes `/api/v1/live` and `/api/v1/ready` are not
checked (an orchestrator probes with the Host it likes, and they hold nothing to steal); a
request without `Host` (HTTP/1.0) names no domain and passes.

A browser on another site can make a user's browser send requests here; it cannot make
the browser lie about `Origin`. So a state-changing request (any method but GET, HEAD and
OPTIONS), the live channel and every request to `/mcp` are refused (403 `forbidden`) when
they carry an `Origin` that is not this server's own (same scheme, host and port). A
request with no `Origin` (curl, a script, a same-origin GET) passes. With `MAJORDOMUS_API_TOKEN` set, every route
but `/api/v1/live`, `/api/v1/ready`, the static documentation shell at `/docs` and the
console's shell and files (`api.console.is_console_path`) needs `Authorization: Bearer
<token>`; the shells hold no data and ask for the token themselves.

A missing or wrong token is no refusal of who the caller is but a failure to say who it is,
so it answers 401 with a `WWW-Authenticate: Bearer` challenge (RFC 6750: with
`error="invalid_token"` when a bearer token was sent and is not this server's, with no error
when none was). The body is the error envelope with the code `forbidden`, as the SPEC says
(the code a program branches on: the CLI exits 6, "the API refused the token"). 403 is left
for what no token changes: a foreign `Origin`.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from litestar.types import ASGIApp, Receive, Scope, Send

from majordomus.api.console import is_console_path
from majordomus.api.errors import send_error
from majordomus.config import HOST_PATTERN, Settings
from majordomus.errors import MajordomusError

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
PROBE_PATHS = frozenset({"/api/v1/live", "/api/v1/ready"})
OPEN_PATHS = PROBE_PATHS | {"/docs"}
MCP_PATH = "/mcp"
DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})
ANY_HOST = "*"
MISDIRECTED = 421
"""The status of a refused Host: the request reached a server that does not answer to it."""
UNAUTHORIZED = 401
"""The status of a missing or wrong bearer token, sent with its `WWW-Authenticate` challenge."""
CHALLENGE = "Bearer"
"""The challenge to a request that sent no bearer token (RFC 6750, 3.1: no error code)."""
INVALID_TOKEN_CHALLENGE = 'Bearer error="invalid_token"'
"""The challenge to a request whose bearer token is not this server's."""

_HOST = re.compile(HOST_PATTERN)


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


def host_and_port(value: str) -> tuple[str, int | None] | None:
    """`api:8000` as `("api", 8000)`, `[::1]` as `("::1", None)`; None when it is no Host."""
    matched = _HOST.fullmatch(value.strip())
    if matched is None:
        return None
    name = matched[1].lower()
    if name.startswith("["):
        name = name[1:-1]
    return name, int(matched[2][1:]) if matched[2] else None


@dataclass(frozen=True)
class AllowedHosts:
    """The `Host` values this server answers to besides loopback and its own address.

    An entry without a port allows that name on any port; `*` allows every Host.
    """

    entries: frozenset[tuple[str, int | None]]
    any_host: bool = False

    @classmethod
    def of(cls, hosts: Iterable[str]) -> AllowedHosts:
        entries: set[tuple[str, int | None]] = set()
        any_host = False
        for given in hosts:
            if given.strip() == ANY_HOST:
                any_host = True
                continue
            parsed = host_and_port(given)
            if parsed is None:
                raise ValueError(f"MAJORDOMUS_ALLOWED_HOSTS: {given!r} is not a host or host:port")
            entries.add(parsed)
        return cls(frozenset(entries), any_host)

    def allow(self, scope: Scope) -> bool:
        """Whether the request's `Host` is one this server answers to."""
        given = header(scope, b"host")
        if self.any_host or given is None:
            return True
        parsed = host_and_port(given)
        if parsed is None:
            return False
        name, port = parsed
        if name in LOOPBACK_NAMES or (name, None) in self.entries:
            return True
        port = port or DEFAULT_PORTS.get(str(scope.get("scheme", "http")), 0)
        return (name, port) in self.entries or (name, port) == own_address(scope)


def own_address(scope: Scope) -> tuple[str, int] | None:
    """The address and port the connection arrived at (the bound one, or the interface's
    when bound to all of them), as a Host names it."""
    server = scope.get("server")
    if not server or len(server) != 2 or not isinstance(server[1], int):
        return None
    return str(server[0]).lower(), server[1]


def misdirected(scope: Scope) -> MajordomusError:
    shown = (header(scope, b"host") or "")[:200]
    return MajordomusError(
        "refused",
        f"this server does not answer to the host {shown!r}",
        "reach it at 127.0.0.1 or localhost, or list the host (host or host:port) in "
        "MAJORDOMUS_ALLOWED_HOSTS",
    )


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


def request_path(scope: Scope) -> str:
    """The path of the request line. Litestar has already made `path` relative to a mount
    (`/mcp/x` is `/x` to the middleware), so the raw one is read where the server gives it."""
    raw = scope.get("raw_path")
    return raw.decode("latin-1") if isinstance(raw, bytes) else str(scope.get("path", ""))


def is_mcp(path: str) -> bool:
    return path == MCP_PATH or path.startswith(MCP_PATH + "/")


@dataclass(frozen=True)
class TokenProblem:
    """Why the request's bearer token does not do: a sentence, and the challenge to send."""

    message: str
    challenge: str

    def error(self) -> MajordomusError:
        return MajordomusError(
            "forbidden", self.message, "send Authorization: Bearer $MAJORDOMUS_API_TOKEN"
        )


def token_problem(scope: Scope, token: str) -> TokenProblem | None:
    """Why the request's bearer token does not do, or None when it does. Another scheme
    (`Basic ...`) is no bearer token at all, so it is answered as a missing one."""
    scheme, _, value = (header(scope, b"authorization") or "").partition(" ")
    if scheme.lower() != "bearer":
        return TokenProblem(
            "this server needs a bearer token (Authorization: Bearer <token>)", CHALLENGE
        )
    if not hmac.compare_digest(value.strip().encode(), token.encode()):
        return TokenProblem("the bearer token is not this server's", INVALID_TOKEN_CHALLENGE)
    return None


class AccessGuard:
    """Refuses other Hosts (421), requests without the bearer token when one is configured
    (401) and foreign origins (403)."""

    def __init__(self, app: ASGIApp, settings: Settings, live_path: str = "/events") -> None:
        self.app = app
        self.token = settings.api_token or None
        self.live_path = live_path
        self.hosts = AllowedHosts.of(settings.allowed_hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = request_path(scope)
        if path not in PROBE_PATHS and not self.hosts.allow(scope):
            await send_error(send, misdirected(scope), MISDIRECTED)
            return
        if self.token and path not in OPEN_PATHS and not is_console_path(path):
            problem = token_problem(scope, self.token)
            if problem:
                headers = {"WWW-Authenticate": problem.challenge}
                await send_error(send, problem.error(), UNAUTHORIZED, headers)
                return
        guarded = scope.get("method") not in SAFE_METHODS or path == self.live_path or is_mcp(path)
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
