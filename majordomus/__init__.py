"""majordomus: capabilities declared once, run as executions anyone can watch.

The public surface for people declaring capabilities: `capability`, `Context`,
`ExecutionCancelled`, `MajordomusError`, `Secret`, and what a declaration may carry:
`Retry` (its retry policy) and `Schedule` (its cron schedules). For people running them from
Python code: `Client` (asyncio) and `SyncClient`, on Redis or through the HTTP API, the
`Execution` and `SyncExecution` handles they answer, `Declared` (what `@capability` hands
back, typed by its declaration) and `Pending`. For tests: `majordomus.testing`. Everything
else is reached through the surfaces (HTTP, SSE, MCP, CLI) or the engine.

Each name is imported from its module when it is first asked for, so importing any part
of majordomus (`majordomus.cli` for `majordomus --help`, say) does not load the handler
context and the Redis client behind it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from majordomus.exports import lazy_exports

if TYPE_CHECKING:
    from majordomus.client import (
        Client,
        Declared,
        Execution,
        Pending,
        SyncClient,
        SyncExecution,
    )
    from majordomus.context import Context, ExecutionCancelled
    from majordomus.errors import MajordomusError
    from majordomus.flow import Debounce, PerKey, RateLimit, Throttle
    from majordomus.registry import capability
    from majordomus.retries import Retry
    from majordomus.schedules import Schedule
    from majordomus.schemas import Secret

_HOME = {
    "Client": "majordomus.client",
    "Declared": "majordomus.client",
    "Execution": "majordomus.client",
    "Pending": "majordomus.client",
    "SyncClient": "majordomus.client",
    "SyncExecution": "majordomus.client",
    "Context": "majordomus.context",
    "ExecutionCancelled": "majordomus.context",
    "MajordomusError": "majordomus.errors",
    "PerKey": "majordomus.flow",
    "Debounce": "majordomus.flow",
    "Throttle": "majordomus.flow",
    "RateLimit": "majordomus.flow",
    "capability": "majordomus.registry",
    "Retry": "majordomus.retries",
    "Schedule": "majordomus.schedules",
    "Secret": "majordomus.schemas",
}
"""Where each public name is defined."""


__getattr__ = lazy_exports(globals(), _HOME)


__all__ = [
    "Client",
    "Context",
    "Declared",
    "Execution",
    "Pending",
    "SyncClient",
    "SyncExecution",
    "ExecutionCancelled",
    "MajordomusError",
    "PerKey",
    "Debounce",
    "Throttle",
    "RateLimit",
    "Retry",
    "Schedule",
    "Secret",
    "capability",
]
__version__ = "0.1.0"
