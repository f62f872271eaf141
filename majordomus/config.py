"""Configuration: one typed struct read once from the `MAJORDOMUS_*` environment.

Every limit the product keeps is a field here with its default, so `executions.protocol`
can report them as configured and the documentation's settings page is generated from this
type. Fixed limits of the protocol (the 500-entry stream, the 200-execution list bound)
are named in `LIMITS` beside it: they are part of the contract, not settings.
"""

from __future__ import annotations

import os
import re
from functools import lru_cache
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit, urlunsplit

import msgspec

ENV_PREFIX = "MAJORDOMUS_"

HOST_PATTERN = r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(:[0-9]{1,5})?"
"""A `Host` as a client writes it: a name, an IPv4 address or a bracketed IPv6 one, then an
optional port; nothing else (no scheme, path or user)."""

AllowedHost = Annotated[str, msgspec.Meta(pattern=f"^(\\*|{HOST_PATTERN})$")]

LIST_SETTINGS = frozenset({"capabilities", "allowed_hosts", "encryption_keys"})
"""Settings written as comma-separated lists in the environment."""

LogFormat = Literal["text", "json"]
LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]

CASE_FOLDED = {"log_format": str.lower, "log_level": str.upper}
"""Settings whose value is read whatever its case (`MAJORDOMUS_LOG_LEVEL=debug`)."""


class Settings(msgspec.Struct, kw_only=True, frozen=True):
    """Every setting, with its default. The environment name is `MAJORDOMUS_<FIELD>`."""

    redis_url: str | None = None
    """The Redis every API process and worker shares; unset: `dev` embeds one."""
    capabilities: list[str] = []
    """Comma-separated Python modules whose capabilities are loaded beside the built-ins."""
    max_jobs: int = 10
    """Executions one worker runs at once."""
    lease_seconds: float = 15.0
    """How long a silent worker's executions stay `running` before they are failed."""
    cancel_grace: float = 10.0
    """How long an async handler that ignores its cancel flag runs on before it is stopped."""
    default_timeout: float = 3600.0
    """Seconds an execution of a capability that declares no `timeout` may run before it
    is stopped and failed `timed_out`."""
    failure_details: bool = True
    """Whether a failed execution's error and diagnostics show an unexpected exception's
    type and message (redacted, cut to 500 characters); off: `internal` alone, the
    exception in the worker's log only."""
    child_start: Literal["forkserver", "spawn"] = "forkserver"
    """How a worker starts the child processes of capabilities that run in one (`runs_in="process"`): `forkserver` (where the platform has it, else `spawn`) or `spawn`."""
    child_max_executions: Annotated[int, msgspec.Meta(ge=0)] = 1000
    """Executions one child process runs before it is replaced by a fresh one; 0: never."""
    child_max_memory_mb: Annotated[int, msgspec.Meta(ge=0)] = 0
    """Resident memory (MiB) past which a child process is replaced once its execution ends; 0: never."""
    shutdown_grace: float = 10.0
    """How long a worker told to stop lets running executions finish before cancelling them."""
    retain_seconds: int = 7 * 24 * 3600
    """How long finished executions and closed episodes are kept."""
    retain_executions: int = 10_000
    """How many finished executions are kept at most (oldest go first)."""
    rollup_keep_seconds: Annotated[int, msgspec.Meta(ge=0)] = 25 * 3600
    """How long each minute of the roll-up that `executions.stats` and the console's charts read is kept after it ends (`majordomus.store.rollup`): a day and an hour, the day the charts show; shorter, the last day shows only what is kept. `0`: no roll-up, its counts left out of every start and end (the charts stay empty)."""
    max_live: int = 1024
    """Open live (SSE) channels per API process."""
    live_apart: bool = True
    """`serve` delivers the live channels (`/events`) from a process of its own, at a lower priority (`MAJORDOMUS_LIVE_IDLE`), so a large or slow audience never holds the API's requests (`api.live.apart`); `0`: the API delivers them itself. Connections over TLS or a Unix socket are delivered by the API."""
    live_idle: bool = True
    """`serve`'s delivery process runs under Linux's `SCHED_IDLE`, in a scheduling group of its own at niceness 19, only on a core nothing else wants, so the work never waits on an audience (its listeners, on a busy machine, fall behind and are told what they missed); `0`: niced +10 only, so listeners keep a share of a busy machine (their latency against the work's: `BENCHMARKS.md`, "A live audience, part five")."""
    heartbeat_seconds: float = 15.0
    """Seconds between comment heartbeats on a live channel."""
    mcp_call_seconds: Annotated[float, msgspec.Meta(ge=0, le=60)] = 50.0
    """Seconds an MCP tool call without a task (a client without the tasks extension) waits for the execution it started before it answers that the execution is still running, with its id and how to follow it; also the longest `majordomus_execution_wait` waits over MCP. Below the 60 s after which common MCP clients (the MCP Inspector) give up on a request, so the answer arrives before their timeout; at most 60."""
    encryption_keys: list[str] = []
    """Comma-separated keys (64 random bytes each, urlsafe base64: `python -c 'from majordomus.store.sealing import new_key; print(new_key())'`) that seal what Redis would otherwise hold of a secret: the worker-only input of executions not yet ended and schedules' definitions (AES-SIV). The first seals, every one opens (rotation: put a new key first, drop an old one once nothing sealed with it is left). Unset: those are stored in plain JSON."""
    api_token: str | None = None
    """When set, every API route but live/ready needs `Authorization: Bearer <token>` (401 without it); unset, `serve` and `dev` refuse to listen beyond loopback unless given `--insecure-no-token`."""
    allowed_hosts: list[AllowedHost] = []
    """Comma-separated `host` or `host:port` the API answers to besides loopback and its own
    address; any other `Host` is refused (421). `*` allows any: unsafe without a token."""
    reattach_grace: float = 900.0
    """Seconds a detached episode waits for its client before the reaper closes it."""
    priority_aging_seconds: float = 300.0
    """How much earlier in line a `high` execution stands than it came, and a `low` one later (`majordomus.priorities`): a `low` one waits at most twice this behind newer `high` work."""
    schedule_grace: float = 10.0
    """How late a schedule's tick may be started and still count as that tick; a tick older than this that nobody started (everything was down) is missed: started once or skipped, as its schedule says (`majordomus.schedules`)."""
    poll_seconds: float = 1.0
    """A worker's long-poll fallback when no wake-up signal arrives."""
    feed_max_events: int = 10_000
    """Entries kept in the global feed that the unscoped live channel resumes from (in each partition's feed)."""
    live_backlog: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)] = 10_000
    """Feed entries an API process holds in memory for its unscoped live channels, each of which sends from it at its own client's pace; a client further behind than this is told exactly what it was not sent (`stream.lagged` with the cursors around the gap) and goes on from the oldest entry held. About 1 KiB each."""
    key_prefix: str = "md"
    """Prefix of every Redis key majordomus writes, arq's worker health record included (`<prefix>:queue:health-check`)."""
    partitions: Annotated[int, msgspec.Meta(ge=1, le=1024)] = 1
    """How many partitions the executions are split into (`majordomus.store.keys`): each has its own queue, indexes and live feed in one hash slot, so on a Redis Cluster they spread over the shards (give at least as many as shards). Fixed for a deployment's life: every process must agree, and changing it loses track of existing executions."""
    metrics_port: Annotated[int, msgspec.Meta(ge=1, le=65535)] | None = None
    """The port a worker serves its Prometheus metrics on (`/metrics`; on 127.0.0.1 unless `majordomus worker --metrics-host` names another); unset: none."""
    api_url: str | None = None
    """For the CLI: go through this API instead of straight to Redis."""
    fast_loop: bool = True
    """Run `serve`, `dev` and `worker` on uvloop, and the API's HTTP on httptools, where they are installed (`pip install "majordomus[fast]"`); `0`: the plain asyncio loop and h11 (`majordomus.event_loop`)."""
    log_format: LogFormat = "text"
    """How every process (`serve`, `dev`, `worker`, `mcp`, capabilities' child processes) writes its log to stderr: `text`, a line per record for a person, or `json`, one object per line (`time`, `level`, `logger`, `message`, then fields such as `execution_id`; `majordomus.logs`)."""
    log_level: LogLevel | None = None
    """The least severe records logged: `DEBUG`, `INFO`, `WARNING`, `ERROR` or `CRITICAL`; unset: `INFO` (`WARNING` for `majordomus mcp`, whose client reads its stderr)."""
    access_log: bool = True
    """Whether the API logs a line per HTTP request (logger `majordomus.access`, at INFO: method, path, status, duration, actor), when its response ends; `0`: none."""

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **overrides: Any) -> Settings:
        env = os.environ if environ is None else environ
        raw: dict[str, Any] = {}
        for name in cls.__struct_fields__:
            value = env.get(ENV_PREFIX + name.upper())
            if value is None or value == "":
                continue
            if name in LIST_SETTINGS:
                raw[name] = [m.strip() for m in value.split(",") if m.strip()]
            elif name in CASE_FOLDED:
                raw[name] = CASE_FOLDED[name](value.strip())
            else:
                raw[name] = value
        raw.update(overrides)
        try:
            return msgspec.convert(raw, cls, strict=False)
        except msgspec.ValidationError as exc:
            raise SystemExit(f"majordomus: bad configuration: {exc}") from None


class Limits(msgspec.Struct, frozen=True):
    """Bounds of the protocol itself; each is also the default where a request may name one."""

    stream_events: int = 500
    page_events: int = 500
    list_executions: int = 200
    list_sort_window: int = 5000
    """`executions.list` sorted by duration or state orders at most this many of the newest
    matching executions (a time range narrows it to a period), then answers the first."""
    diagnostics: int = 200
    steps: int = 200
    """Steps a snapshot keeps (the first ones); later ones are counted in `steps_dropped`."""
    log_line_chars: int = 2000
    validation_problems: int = 5
    wait_default_ms: int = 30_000
    wait_bound_ms: int = 60_000
    call_wait_ms: int = 8_000
    """How long a capability's own route waits for the execution it started before it
    answers `202` with the execution as it stands (a request may ask for up to
    `wait_bound_ms`, or for no wait at all, with `Prefer`). Under 10 s, so the answer
    reaches a client with the common 10 s timeout (schemathesis', many HTTP tools') before
    it gives up."""
    body_bytes: int = 1024 * 1024


LIMITS = Limits()


def clamp(value: int | None, default: int, bound: int) -> int:
    """A numeric input as the protocol reads it: absent is the default, above the bound is it."""
    if value is None:
        return default
    return min(value, bound)


@lru_cache(maxsize=1)
def settings() -> Settings:
    """The process's settings, read once."""
    return Settings.from_env()


def shown_url(url: str) -> str:
    """A URL fit for a message or a banner: any password replaced by `***`, the userinfo's
    and a Sentinel URL's `sentinel_password` (the hosts as given, a cluster's several seeds
    and IPv6 brackets included)."""
    parts = urlsplit(url)
    query = re.sub(r"(^|&)(sentinel_password=)[^&]*", r"\1\2***", parts.query)
    userinfo, at, hosts = parts.netloc.rpartition("@")
    netloc = parts.netloc
    if at and ":" in userinfo:
        netloc = f"{userinfo.partition(':')[0]}:***@{hosts}"
    if (netloc, query) == (parts.netloc, parts.query):
        return url
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))
