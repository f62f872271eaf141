"""Every failure an HTTP client can see, as the one envelope `{"error": {...}}`.

`MajordomusError` carries its own code; everything else is mapped here once: Litestar's
routing refusals (404, 405, 413), Redis being unreachable (503 `unavailable`, so the API
keeps running and recovers by itself when Redis returns) and anything unexpected (500
`internal` with a correlation id; the traceback goes to the server's log, never to a client).

A wrong method answers 405 with code `invalid_input` and an `Allow` header; a body over
1 MiB answers 413 with code `invalid_input`. Neither status has a code of its own in the
vocabulary, and both say the request itself must change.
"""

from __future__ import annotations

import logging
import secrets
from typing import Any

import msgspec
from litestar import Request, Response
from litestar.exceptions import (
    HTTPException,
    MethodNotAllowedException,
    NotFoundException,
)
from litestar.types import Send

from majordomus.config import LIMITS
from majordomus.errors import HTTP_STATUS, ErrorBody, MajordomusError
from majordomus.store.failures import UNREACHABLE

log = logging.getLogger("majordomus.api")

JSON = "application/json"

REDIS_DOWN = UNREACHABLE
"""What the store raises when Redis cannot be reached (refused, reset, timed out, loading)."""


class ErrorEnvelope(msgspec.Struct):
    """The body of every error answer."""

    error: ErrorBody


def envelope(err: MajordomusError) -> bytes:
    return msgspec.json.encode(ErrorEnvelope(err.body()))


def redis_unavailable(exc: BaseException | None = None) -> MajordomusError:
    return MajordomusError(
        "unavailable",
        "Redis is unreachable or not answering, so this cannot be answered now",
        "try again shortly; the API reconnects by itself when Redis is back",
    )


def internal(correlation_id: str) -> MajordomusError:
    return MajordomusError(
        "internal",
        "the server failed unexpectedly",
        f"search the server's output for correlation_id={correlation_id}",
        correlation_id,
    )


def classify(exc: BaseException, method: str = "", path: str = "") -> tuple[MajordomusError, int]:
    """The error a client sees for `exc`, and its HTTP status."""
    if isinstance(exc, MajordomusError):
        return exc, exc.http_status
    if isinstance(exc, REDIS_DOWN):
        log.warning("%s %s: Redis unreachable (%s)", method, path, exc)
        return redis_unavailable(exc), HTTP_STATUS["unavailable"]
    if isinstance(exc, NotFoundException):
        return MajordomusError(
            "not_found",
            f"there is no route {method} {path}",
            "the operations are listed at /openapi.json and /docs",
        ), 404
    if isinstance(exc, MethodNotAllowedException):
        return MajordomusError(
            "invalid_input",
            f"{path} does not answer {method}",
            "see the Allow header, or the operations at /openapi.json",
        ), 405
    if isinstance(exc, HTTPException) and exc.status_code == 413:
        return MajordomusError(
            "invalid_input",
            f"the request body is over {LIMITS.body_bytes} bytes (1 MiB)",
            "send a smaller body",
        ), 413
    if isinstance(exc, HTTPException) and 400 <= exc.status_code < 500:
        return MajordomusError("invalid_input", str(exc.detail)), exc.status_code
    correlation_id = "r-" + secrets.token_hex(6)
    log.error("correlation_id=%s %s %s failed", correlation_id, method, path, exc_info=exc)
    return internal(correlation_id), 500


def error_response(
    err: MajordomusError, status: int | None = None, headers: dict[str, str] | None = None
) -> Response[Any]:
    return Response(
        content=envelope(err),
        status_code=status or err.http_status,
        media_type=JSON,
        headers=headers,
    )


def make_exception_handler(allowed: dict[str, list[str]]) -> Any:
    """Litestar's handler for every exception; `allowed` names each path's methods (for 405)."""

    def handle(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
        err, status = classify(exc, request.method, request.url.path)
        headers = None
        if status == 405 and request.url.path in allowed:
            headers = {"Allow": ", ".join(allowed[request.url.path])}
        return error_response(err, status, headers)

    return handle


async def send_error(
    send: Send,
    err: MajordomusError,
    status: int | None = None,
    headers: dict[str, str] | None = None,
) -> None:
    """The envelope straight over ASGI (for the raw routes: the live channel, the guard, the
    static documents), with `headers` beside its own (say `Allow` on a 405)."""
    body = envelope(err)
    await send(
        {
            "type": "http.response.start",
            "status": status or err.http_status,
            "headers": [
                (b"content-type", JSON.encode()),
                (b"content-length", str(len(body)).encode()),
                *(
                    (k.lower().encode("latin-1"), v.encode("latin-1"))
                    for k, v in (headers or {}).items()
                ),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})
