"""The capabilities' declarations as their workers publish them: one hash, id to JSON.

A process that starts executions by id without importing the capability's module (a
producer: `majordomus.Client` on Redis) reads here what it needs to validate, redact and
enqueue a start as the API would (`majordomus.declarations`). Every worker writes its
declarations at start-up, so the hash holds the newest worker's view of each id; an id no
worker publishes any more stays until one publishes it again (a start of it then waits in
the queue for a worker that has it, as any start does). One key, written by single-key
commands, so it lives anywhere on a cluster. This module stores bytes; what they mean is
`majordomus.declarations`'.
"""

from __future__ import annotations

from majordomus.store.base import StoreBase


class DeclarationStore(StoreBase):
    @property
    def key(self) -> str:
        return self.keys.declarations

    async def write(self, declarations: dict[str, bytes]) -> None:
        """Write each capability's declaration (id to its JSON), replacing an older one."""
        if declarations:
            await self.redis.hset(self.key, mapping=declarations)  # type: ignore[misc, arg-type]

    async def read(self, capability_id: str) -> bytes | None:
        """One capability's published declaration, or None when no worker published it."""
        raw = await self.redis.hget(self.key, capability_id)  # type: ignore[misc]
        return bytes(raw) if raw is not None else None

    async def read_all(self) -> dict[str, bytes]:
        """Every published declaration, by id."""
        raw = await self.redis.hgetall(self.key)  # type: ignore[misc]
        return {k.decode() if isinstance(k, bytes) else str(k): bytes(v) for k, v in raw.items()}
