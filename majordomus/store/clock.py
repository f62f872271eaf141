"""The store's timestamps: RFC 3339 UTC with milliseconds beside epoch milliseconds."""

from __future__ import annotations

import time
from datetime import UTC, datetime


def now_stamp() -> tuple[str, int]:
    """The current time as RFC 3339 UTC with milliseconds, and as epoch milliseconds."""
    ms = int(time.time() * 1000)
    seconds, millis = divmod(ms, 1000)
    return f"{second_stamp(seconds)}.{millis:03d}Z", ms


_SECOND: tuple[int, str] = (-1, "")


def second_stamp(seconds: int) -> str:
    """Epoch seconds as `YYYY-MM-DDTHH:MM:SS` (UTC). Every write stamps one or two events,
    and a start with nothing before it pays for the calendar in full (tens of microseconds
    with the caches cold, on the path of a start to its worker): the last second's text
    is kept, so the writes of one second format it once."""
    global _SECOND
    last, text = _SECOND
    if seconds != last:
        text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
        _SECOND = (seconds, text)  # one tuple: a thread reads the pair or the one before
    return text


def stamp_of(ms: int) -> str:
    """Epoch milliseconds as RFC 3339 UTC with milliseconds (the store's timestamps)."""
    text = datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")
    return text[:-3] + "Z"
