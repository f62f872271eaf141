"""The console: a page for people, served by the API itself at `/`, on the public API alone.

The console is a handful of static files in `api/console/static/` (one HTML shell, one
stylesheet, plain ES modules): no build step, no Node toolchain, nothing fetched from a CDN.
Every figure it shows it reads from the routes any client has (`executions.*`,
`capabilities.*`, `queue.*`, `schedules.*`, `episodes.list`, the live channel at `/events`; the charts
`executions.stats`, drawn as SVG by the page itself); this module only serves the
files. The shell answers at every page's own address (`/`, `/queue`, `/schedules`,
`/episodes`, `/charts`, `/start`, `/executions/<id>`), so a page's URL can be shared and reloaded; the script reads the path
and its query to know what to show. The files live under `/console/`.

Each file is read once at import and answered with its content type, `ETag` and
`Cache-Control: no-cache` (a browser keeps it, asks again with `If-None-Match` and gets
`304` when the process still serves the same bytes, so a deployment never serves a stale
script); `HEAD` answers the same headers without the body; any other method is `405`. The
shell and its files hold no data, so like `/docs` they are open without the bearer token
(`SHELL_PATHS`, `is_console_path`, read by `api.access`); the Host rule applies to them as
to every route. It does not compress, negotiate or list the folder.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from litestar import asgi
from litestar.handlers import BaseRouteHandler
from litestar.types import Receive, Scope, Send

from majordomus.api.errors import send_error
from majordomus.errors import MajordomusError, invalid_input

STATIC = Path(__file__).parent / "static"
ASSETS_PREFIX = "/console/"
SHELL_PATHS = frozenset({"/", "/queue", "/schedules", "/episodes", "/charts", "/start"})
"""The pages with an address of their own, besides `/executions/<id>`."""
EXECUTION_PAGE_PREFIX = "/executions/"
TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
ALLOW = "GET, HEAD"


def is_console_path(path: str) -> bool:
    """Whether `path` is the console's shell or one of its files (open without a token)."""
    if path in SHELL_PATHS or path.startswith(ASSETS_PREFIX):
        return True
    return path.startswith(EXECUTION_PAGE_PREFIX) and "/" not in path[len(EXECUTION_PAGE_PREFIX) :]


@dataclass(frozen=True)
class Asset:
    """One file as served: its bytes and the headers every answer of it carries."""

    body: bytes
    media_type: str
    etag: bytes

    @classmethod
    def of(cls, path: Path) -> Asset:
        body = path.read_bytes()
        digest = hashlib.sha256(body).hexdigest()[:20]
        return cls(body, TYPES.get(path.suffix, "application/octet-stream"), f'"{digest}"'.encode())

    def headers(self, length: int) -> list[tuple[bytes, bytes]]:
        return [
            (b"content-type", self.media_type.encode("latin-1")),
            (b"content-length", str(length).encode()),
            (b"etag", self.etag),
            (b"cache-control", b"no-cache"),
            (b"x-content-type-options", b"nosniff"),
        ]


def load_assets(folder: Path = STATIC) -> dict[str, Asset]:
    """Every file of the folder, by the name it is served under (`/console/<name>`)."""
    return {p.name: Asset.of(p) for p in sorted(folder.iterdir()) if p.suffix in TYPES}


ASSETS = load_assets()
SHELL = ASSETS["index.html"]


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value)
    return None


async def answer(asset: Asset | None, scope: Scope, send: Send) -> None:
    """`asset` for a GET or HEAD (`304` when the client holds these bytes), else the error."""
    method = scope.get("method", "GET")
    path = str(scope.get("raw_path", b"").decode("latin-1") or scope.get("path", ""))
    if method not in ("GET", "HEAD"):
        err = invalid_input(f"{path} does not answer {method}", "see the Allow header")
        await send_error(send, err, 405, {"Allow": ALLOW})
        return
    if asset is None:
        await send_error(
            send,
            MajordomusError("not_found", f"the console has no file {path!r}", "open / instead"),
        )
        return
    if asset.etag in [t.strip() for t in (_header(scope, b"if-none-match") or b"").split(b",")]:
        headers = [h for h in asset.headers(0) if h[0] != b"content-length"]
        await send({"type": "http.response.start", "status": 304, "headers": headers})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return
    await send(
        {"type": "http.response.start", "status": 200, "headers": asset.headers(len(asset.body))}
    )
    body = asset.body if method == "GET" else b""
    await send({"type": "http.response.body", "body": body, "more_body": False})


def console_handlers() -> list[BaseRouteHandler]:
    """The console's routes: the shell at each page's address, the files under `/console/`."""

    @asgi("/", copy_scope=True, include_in_schema=False)
    async def console_home(scope: Scope, receive: Receive, send: Send) -> None:
        await answer(SHELL, scope, send)

    @asgi("/queue", copy_scope=True, include_in_schema=False)
    async def console_queue(scope: Scope, receive: Receive, send: Send) -> None:
        await answer(SHELL, scope, send)

    @asgi("/start", copy_scope=True, include_in_schema=False)
    async def console_start(scope: Scope, receive: Receive, send: Send) -> None:
        await answer(SHELL, scope, send)

    @asgi("/schedules", copy_scope=True, include_in_schema=False)
    async def console_schedules(scope: Scope, receive: Receive, send: Send) -> None:
        await answer(SHELL, scope, send)

    @asgi("/episodes", copy_scope=True, include_in_schema=False)
    async def console_episodes(scope: Scope, receive: Receive, send: Send) -> None:
        await answer(SHELL, scope, send)

    @asgi("/charts", copy_scope=True, include_in_schema=False)
    async def console_charts(scope: Scope, receive: Receive, send: Send) -> None:
        await answer(SHELL, scope, send)

    # Litestar gives no path parameters to an ASGI handler: these two are mounts, and each
    # reads the rest of the path itself.
    @asgi("/executions", is_mount=True, copy_scope=True, include_in_schema=False)
    async def console_execution(scope: Scope, receive: Receive, send: Send) -> None:
        rest = str(scope.get("path", "")).strip("/")
        await answer(SHELL if rest and "/" not in rest else None, scope, send)

    @asgi("/console", is_mount=True, copy_scope=True, include_in_schema=False)
    async def console_asset(scope: Scope, receive: Receive, send: Send) -> None:
        await answer(ASSETS.get(str(scope.get("path", "")).strip("/")), scope, send)

    return [
        console_home,
        console_queue,
        console_start,
        console_schedules,
        console_episodes,
        console_charts,
        console_execution,
        console_asset,
    ]


__all__ = ["ASSETS", "SHELL_PATHS", "console_handlers", "is_console_path"]
