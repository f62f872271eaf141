"""The store's timestamps: RFC 3339 UTC with milliseconds beside epoch milliseconds."""

from __future__ import annotations

import time
from datetime import UTC, datetime


def now_stamp() -> tuple[str, int]:
    """The current time as RFC 3339 UTC with milliseconds, and as epoch milliseconds."""
    ms = int(time.time() * 1000)
    # time.strftime over datetime: this runs on every write, twice per execution at least.
    seconds, millis = divmod(ms, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z", ms


def stamp_of(ms: int) -> str:
    """Epoch milliseconds as RFC 3339 UTC with milliseconds (the store's timestamps)."""
    text = datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")
    return text[:-3] + "Z"
