"""What the store raises when Redis fails, named so surfaces can tell it apart without
importing the Redis client themselves.

`UNREACHABLE` is Redis away (refused, reset, timed out): a surface answers 503
`unavailable` and tries again later. `StoreFailure` is any error the client raised,
unreachable or not (a script error, a wrong type): a surface names it and never shows a
traceback.
"""

from __future__ import annotations

from redis.exceptions import ConnectionError as _ConnectionError
from redis.exceptions import RedisError as StoreFailure
from redis.exceptions import TimeoutError as _TimeoutError

UNREACHABLE: tuple[type[Exception], ...] = (_ConnectionError, _TimeoutError)

RedisTimeout = _TimeoutError
"""A command sent that Redis did not answer in time (it may have been carried out)."""

__all__ = ["UNREACHABLE", "RedisTimeout", "StoreFailure"]
