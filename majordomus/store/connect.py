"""Connections to Redis: the one place a client is made (the embedded server is `embedded`)."""

from __future__ import annotations

import os
from typing import Any

from redis.asyncio import Redis

DEFAULT_URL = "redis://127.0.0.1:6379/0"


def connect(url: str | None, *, arq: bool = False, max_connections: int = 64) -> Any:
    """A client on `url`; with `arq`, an `ArqRedis` that can also enqueue and poll."""
    url = url or DEFAULT_URL
    if arq:
        from arq.connections import ArqRedis

        return ArqRedis.from_url(url, max_connections=max_connections)
    return Redis.from_url(url, max_connections=max_connections)


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").lower() in ("1", "true", "yes")
