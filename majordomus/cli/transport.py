"""The CLI's two ways to reach majordomus: straight to Redis, or through the HTTP API.

Both answer the same questions the same way: `call` runs a capability and answers its
output as plain JSON-shaped values (what the HTTP API would have sent, so `--format json`
prints the same either way), and `follow` yields an execution's events (and the live
channel's control messages) from a cursor until it is final, typed as `majordomus.model`
has them. Both are the Python client's transports (`majordomus.client.transports`), not a
second copy of them: `Direct` drives an `Engine` on `MAJORDOMUS_REDIS_URL` (the client's
`RedisTransport`), like `rq info` reads its Redis, through the engine's own reads (never
its store); `Remote` speaks the HTTP routes projected from the registry and the SSE live
channel (the client's `HttpTransport`), and names itself on every request (`ACTOR_HEADER:
cli`) so an API that honours it attributes the CLI's starts and cancels to `cli`, as
`Direct` does. Neither renders anything: that is `render.py`'s job.

Which one a command uses (`transport`): `--api URL` or `MAJORDOMUS_API_URL`, through that
API; else `MAJORDOMUS_REDIS_URL`, straight to it; else a `majordomus dev` running for this
user, found by the record it keeps (`majordomus.local.dev_record`), through its API,
which reaches whatever Redis dev runs on, in-process fakeredis included; else, as before,
straight to `DEFAULT_URL`, named as the default in every message that mentions it.

Each transport imports what it drives when it is made (the engine and the Redis client for
`Direct`, httpx for `Remote`), so a command that uses neither, or only one, does not pay
for loading the other (`majordomus --help` loads none).


"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol

import msgspec

from majordomus.client.handles import Message
from majordomus.client.transports import (
    HttpTransport,
    RedisTransport,
)
from majordomus.config import Settings
from majordomus.local.dev_record import running_dev
from majordomus.registry import Capability, Registry

CLI_ACTOR = "cli"
"""What the CLI's actions are attributed to, directly and through the API (`ACTOR_HEADER`)."""


class Transport(Protocol):
    where: str
    """Where the answers come from, for messages: `Redis at …` or `the API at …`."""
    found: str | None
    """How the CLI came to this transport when it found it by itself (a running `dev`): a
    line for stderr; None when the command line or the environment named it."""

    async def call(self, cap: Capability, raw_input: dict[str, Any]) -> Any: ...

    def follow(self, execution_id: str, after: int) -> AsyncIterator[Message]: ...

    async def aclose(self) -> None: ...


# -- straight to Redis ----------------------------------------------------------------------


class Direct:
    """Capabilities run here, on an engine over the shared Redis (the client's
    `RedisTransport`, which follows executions the same way)."""

    def __init__(
        self, settings: Settings, registry: Registry, defaulted: str | None = None
    ) -> None:
        """`defaulted`: why no Redis was named, when `DEFAULT_URL` is used for want of one."""
        # A URL that is no Redis URL is refused here, as `invalid_input`.
        self.redis = RedisTransport.connect(
            None, settings, registry, actor=CLI_ACTOR, why_default=defaulted
        )
        self.engine = self.redis.engine
        self.where = self.redis.where
        self.found: str | None = None

    async def call(self, cap: Capability, raw_input: dict[str, Any]) -> Any:
        output = await self.engine.invoke(cap.id, raw_input, actor=CLI_ACTOR)
        return msgspec.to_builtins(output)

    def follow(self, execution_id: str, after: int) -> AsyncIterator[Message]:
        return self.redis.follow(execution_id, after)

    async def aclose(self) -> None:
        await self.redis.aclose()


# -- through the HTTP API -------------------------------------------------------------------


class Remote:
    """Capabilities called over the HTTP API, each by its own route; events followed on its
    live channel (the client's `HttpTransport`)."""

    def __init__(
        self,
        base_url: str,
        registry: Registry,
        token: str | None = None,
        *,
        found: str | None = None,
    ) -> None:
        """`found`: the line saying how the CLI found this API by itself (a running `dev`)."""
        # A dev found on this machine is on loopback: no proxy of the environment applies.
        self.api = HttpTransport(base_url, token, actor=CLI_ACTOR, trust_env=found is None)
        self.registry = registry
        self.where = self.api.where
        self.found = found

    async def call(self, cap: Capability, raw_input: dict[str, Any]) -> Any:
        return await self.api.call(cap, raw_input)

    def follow(self, execution_id: str, after: int) -> AsyncIterator[Message]:
        return self.api.follow(execution_id, after)

    async def aclose(self) -> None:
        await self.api.aclose()


def transport(settings: Settings, registry: Registry, api: str | None) -> Transport:
    """`--api URL` (or `MAJORDOMUS_API_URL`) goes through that API; `MAJORDOMUS_REDIS_URL`
    straight to Redis; with neither, through the API of a running `majordomus dev`, else
    straight to the default Redis, which messages then call the default and say why."""
    url = api or settings.api_url
    if url:
        return Remote(url, registry, settings.api_token)
    if settings.redis_url:
        return Direct(settings, registry)
    dev, why = running_dev()
    if dev is None:
        return Direct(settings, registry, defaulted=why)
    on = dev.redis_url or "its in-process fakeredis"
    found = (
        f"majordomus: using the majordomus dev API at {dev.api_url} (pid {dev.pid}, on {on}; {why})"
    )
    return Remote(dev.api_url, registry, settings.api_token, found=found)
