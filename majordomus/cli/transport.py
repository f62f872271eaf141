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
user, found by the record it keeps (`DevRecord`, at `dev_record_path()`), through its API,
which reaches whatever Redis dev runs on, in-process fakeredis included; else, as before,
straight to `DEFAULT_URL`, named as the default in every message that mentions it.

Each transport imports what it drives when it is made (the engine and the Redis client for
`Direct`, httpx for `Remote`), so a command that uses neither, or only one, does not pay
for loading the other (`majordomus --help` loads none).


"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Protocol

import msgspec

from majordomus.client.handles import Message
from majordomus.client.transports import (
    HttpTransport,
    RedisTransport,
)
from majordomus.config import Settings
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


# -- finding a running dev --------------------------------------------------------------------

DEV_RECORD_NAME = "dev.json"
DEV_PROBE_SECONDS = 2.0
"""How long the found dev's API has to answer `/api/v1/live` before it is passed over."""
LIVE_PROBE_PATH = "/api/v1/live"


class DevRecord(msgspec.Struct, frozen=True):
    """What a running `majordomus dev` leaves for the CLI in other terminals to find it by
    (written by `api.launch.run_dev` once its API answers, removed when it stops), as one
    JSON object: `{"api_url": ..., "pid": ..., "redis": ..., "redis_url": ...}`. Members
    a newer `dev` adds are passed over."""

    api_url: str
    """Its API's base URL, as a client on this machine reaches it (`http://127.0.0.1:8000`)."""
    pid: int
    """Its process: a record whose process is gone (dev was killed) is passed over."""
    redis: str
    """Which Redis it runs on, as its banner says it (any password shown as `***`)."""
    redis_url: str | None = None
    """That Redis's URL, password shown as `***`; None for in-process fakeredis."""


def dev_record_path(environ: dict[str, str] | None = None) -> Path:
    """Where a running `dev` keeps its record, per user: `$XDG_RUNTIME_DIR/majordomus/dev.json`
    (the per-user runtime directory, emptied at logout and reboot) when that is set to an
    absolute path; else `$XDG_CACHE_HOME/majordomus/dev.json`, `~/.cache/majordomus/dev.json`
    by default; else, with no home at all, `<temp dir>/majordomus-<uid>/dev.json`. A record
    outliving its `dev` (killed by SIGKILL, say) is harmless: its pid is gone, or its API
    does not answer, and it is passed over."""
    env = os.environ if environ is None else environ
    runtime = env.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(runtime):
        return Path(runtime) / "majordomus" / DEV_RECORD_NAME
    cache = env.get("XDG_CACHE_HOME", "")
    if os.path.isabs(cache):
        return Path(cache) / "majordomus" / DEV_RECORD_NAME
    try:
        return Path.home() / ".cache" / "majordomus" / DEV_RECORD_NAME
    except RuntimeError:  # no HOME and no password entry
        import tempfile

        uid = os.getuid() if hasattr(os, "getuid") else "user"
        return Path(tempfile.gettempdir()) / f"majordomus-{uid}" / DEV_RECORD_NAME


def write_dev_record(record: DevRecord, path: Path | None = None) -> Path:
    """Write `record` whole (a reader never sees half of it), readable by this user alone;
    a `dev` started later replaces the record of one still running. Raises OSError."""
    path = path or dev_record_path()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    scratch = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(msgspec.json.encode(record))
    os.replace(scratch, path)
    return path


def read_dev_record(path: Path | None = None) -> DevRecord | None:
    """The record at `path`, or None when there is none or it cannot be read."""
    try:
        return msgspec.json.decode((path or dev_record_path()).read_bytes(), type=DevRecord)
    except (OSError, msgspec.DecodeError):
        return None


def remove_dev_record(pid: int, path: Path | None = None) -> None:
    """Remove the record if it is still `pid`'s (not that of a `dev` started since)."""
    path = path or dev_record_path()
    record = read_dev_record(path)
    if record is not None and record.pid == pid:
        with contextlib.suppress(OSError):
            path.unlink()


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive, though not likely our dev
        return True
    except OSError:
        return False
    return True


def api_answers(base_url: str) -> bool:
    import httpx

    try:
        response = httpx.get(
            base_url.rstrip("/") + LIVE_PROBE_PATH, timeout=DEV_PROBE_SECONDS, trust_env=False
        )
    except httpx.HTTPError:
        return False
    return response.status_code == 200


def running_dev(path: Path | None = None) -> tuple[DevRecord | None, str]:
    """The `dev` this user runs, when its record names a live process whose API answers;
    and, either way, a clause saying what was found, for messages."""
    path = path or dev_record_path()
    record = read_dev_record(path)
    if record is None:
        return None, "MAJORDOMUS_REDIS_URL is unset, and no majordomus dev is running"
    if not process_alive(record.pid):
        return None, (
            f"MAJORDOMUS_REDIS_URL is unset, and the majordomus dev recorded in {path}, "
            f"pid {record.pid}, is gone"
        )
    if not api_answers(record.api_url):
        return None, (
            f"MAJORDOMUS_REDIS_URL is unset, and the majordomus dev recorded in {path}, "
            f"pid {record.pid}, does not answer at {record.api_url}"
        )
    return record, f"recorded in {path}"


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
