"""The policy every Redis client of majordomus has, named: bounded connect and read
timeouts, TCP keepalive probes as the health check of idle connections, a bounded pool
that waits for a free connection, a few quick retries of a command whose connection broke
(redis-py's `Retry`, exponential backoff with jitter), and the API's shorter bounds, with
which every API answer comes within `API_ANSWER_BOUND_SECONDS` while Redis does not
answer. `blocking_reads` lets a blocking read (`XREAD BLOCK`, `BLMOVE`) wait past the
read timeout for as long as it blocks.

The clients themselves are made in `majordomus.store.connect`.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Generator
from contextvars import ContextVar

from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import ConnectionError as _ConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as _TimeoutError

WAIT_FOR_CONNECTION_SECONDS = 10
"""How long a caller of a waiting pool (`wait=True`) waits for a free connection; past it
the call fails with `ConnectionError("No connection available.")`."""

MAX_CONNECTIONS = 64
"""Connections one client's pool opens at most (the API passes its own bound)."""

CONNECT_TIMEOUT_SECONDS = 3.0
"""How long opening a connection may take before it counts as a failure."""

LONGEST_BLOCK_SECONDS = 5.0
"""The longest a caller blocks in one read (`api.live.feed.READ_BLOCK_MS`, the 5 s slices
of `Engine.wait`, the CLI's follow): the read timeout must stay above it."""

SOCKET_TIMEOUT_SECONDS = 10.0
"""How long a reply may take before the connection counts as broken: the longest block
(5 s) with room for a busy or briefly paused server."""

KEEPALIVE_IDLE_SECONDS = 10
KEEPALIVE_INTERVAL_SECONDS = 5
KEEPALIVE_PROBES = 3
"""The health check of a connection: TCP keepalive probes after 10 s idle, every 5 s, and
the kernel drops it after 3 unanswered (so about 25 s after its peer vanished without a
reset). redis-py's own `health_check_interval` (a PING before a command on an idle
connection) is left off: in redis-py 5.3 together with `Retry` it recurses without end
when a connection is accepted and then dropped during its handshake (redis/redis-py#3745,
#2866), which is what a flapping proxy or load balancer does. A broken connection is
found at the next command instead, and that command is retried on a new one."""

RETRIES = 3
"""How many times a command is sent again after its connection broke or timed out."""

API_CONNECT_TIMEOUT_SECONDS = 1.0
API_READ_TIMEOUT_SECONDS = 1.5
API_POOL_WAIT_SECONDS = 0.5
"""The API's client fails fast: a connection opened within 1 s, a reply within 1.5 s (a
blocking read within its block and `BLOCK_MARGIN_SECONDS`), a free connection within
0.5 s, and a command that timed out is not sent again (Redis is not answering: waiting
longer answers nobody). So with Redis stalled every API answer comes within
`API_ANSWER_BOUND_SECONDS`, a 503 that says so; a broken connection is still retried (a
refused one fails in milliseconds)."""
API_ANSWER_BOUND_SECONDS = 3.0
"""The documented bound of an API answer while Redis does not answer (the sum above)."""
BLOCK_MARGIN_SECONDS = 2.0
"""What a blocking read (`blocking_reads`) waits beyond its block for the reply."""

_BLOCKING_READ: ContextVar[float | None] = ContextVar("majordomus_blocking_read", default=None)


@contextlib.contextmanager
def blocking_reads(block_ms: int | float | None) -> Generator[None, None, None]:
    """Within it, a reply may take `block_ms` and `BLOCK_MARGIN_SECONDS` whatever the
    client's read timeout (an `XREAD BLOCK`, a `BLMOVE`): the API's client reads with a
    short timeout, and its feed reader blocks for seconds."""
    if not block_ms:
        yield
        return
    token = _BLOCKING_READ.set(block_ms / 1000 + BLOCK_MARGIN_SECONDS)
    try:
        yield
    finally:
        _BLOCKING_READ.reset(token)


RETRY_BACKOFF_BASE_SECONDS = 0.05
RETRY_BACKOFF_CAP_SECONDS = 1.0
"""Each retry waits a random time up to base * 2**attempt, at most the cap: at most about
1.4 s over three retries, a blip and not an outage."""


REACHABLE_PATIENCE_SECONDS = 5.0
"""How long the start-up check of `serve` and `worker` keeps asking a silent Redis before
the process stops with "unreachable"."""

REACHABLE_RETRY_SECONDS = 0.25
"""The pause between two asks of the start-up check."""


def retry_policy(timeouts: bool = True) -> Retry:
    """The retry of every client (a fresh one each: redis-py copies it per connection);
    without `timeouts`, a command that timed out is not sent again."""
    backoff = ExponentialWithJitterBackoff(
        cap=RETRY_BACKOFF_CAP_SECONDS, base=RETRY_BACKOFF_BASE_SECONDS
    )
    return Retry(backoff, RETRIES, retried_errors(timeouts))


def retried_errors(timeouts: bool = True) -> tuple[type[RedisError], ...]:
    return (_ConnectionError, _TimeoutError) if timeouts else (_ConnectionError,)


def blocking_read_timeout() -> float | None:
    """The read timeout a blocking read set (`blocking_reads`), or None outside one."""
    return _BLOCKING_READ.get()


def keepalive_options() -> dict[int, int]:
    """The keepalive timings, where the platform names them (Linux does; macOS has some)."""
    wanted = {
        "TCP_KEEPIDLE": KEEPALIVE_IDLE_SECONDS,
        "TCP_KEEPINTVL": KEEPALIVE_INTERVAL_SECONDS,
        "TCP_KEEPCNT": KEEPALIVE_PROBES,
    }
    return {getattr(socket, name): value for name, value in wanted.items() if hasattr(socket, name)}
