"""The record a running `majordomus dev` leaves for the CLI (and an application's client) in
other terminals to find it by: written by `majordomus.api.launch.run_dev` once its API
answers, removed when it stops, and read by `majordomus.cli.transport` when no Redis URL is
set. A record outliving its `dev` is passed over (its pid gone, or its API silent).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import msgspec

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
