"""One log format for every process: `serve`, `dev`, `worker`, `mcp` and the child processes
of capabilities that run in one, uvicorn's own lines among them.

`configure` is called once, as a process starts: it puts one handler on the root logger,
writing to stderr in the format `MAJORDOMUS_LOG_FORMAT` names, at `MAJORDOMUS_LOG_LEVEL`,
and makes sure every library's logger (uvicorn's, arq's, the MCP SDK's) goes through it
rather than a handler of its own. Python's `warnings` go through it too.

- `text` (the default), one line per record for a person:
  `2025-01-31T09:00:00.123Z INFO majordomus.worker execution_id=e-...: its run failed`.
- `json`, one object per line for a collector: `time` (ISO 8601, UTC, milliseconds),
  `level`, `logger`, `message`, then every field the call gave with `extra=` (an
  execution's `execution_id`, the access log's `method`, `path`, `status`...), and
  `exception` (the traceback) when there is one.

A line about one execution gives its id as a field (`extra={"execution_id": ...}`) and in
its text (`execution_id=...`), so both formats find it by the same search.

This module does not ship, rotate or sample logs: stderr is the process's log, and where it
goes is the platform's business (docker, systemd, a terminal).
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from typing import IO, Any

import msgspec

from majordomus.config import LogFormat, LogLevel, Settings

DEFAULT_LEVEL: LogLevel = "INFO"
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"

LIBRARY_LOGGERS = ("uvicorn", "uvicorn.error", "arq", "mcp", "litestar")
"""Loggers that a library may have given handlers of its own (a format of its own): theirs
are removed, so their lines reach the one handler through the root."""

NOT_FIELDS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
    "taskName",  # Python 3.12's, absent from a record made before a task runs
    "color_message",  # uvicorn's copy of its message with terminal colours in it
}
"""A record's own attributes: whatever else it carries came from a call's `extra=`."""


def utc_time(created: float) -> str:
    """`created` (a record's epoch seconds) as ISO 8601 in UTC, to the millisecond."""
    stamp = datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds")
    return stamp.removesuffix("+00:00") + "Z"


class TextFormatter(logging.Formatter):
    """`<time> <LEVEL> <logger> <message>`, then the traceback's lines when there is one."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802  logging's name
        return utc_time(record.created)


def _shown(value: Any) -> str:
    """A field msgspec cannot encode, as text (an exception given as a field, a path)."""
    return str(value)


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (a traceback's newlines escaped in it)."""

    encoder = msgspec.json.Encoder(enc_hook=_shown)

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": utc_time(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name, value in record.__dict__.items():
            if name not in NOT_FIELDS and name not in line:
                line[name] = value
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        try:
            return self.encoder.encode(line).decode()
        except (TypeError, ValueError, OverflowError):  # a field even str() cannot save
            fields = {k: line[k] for k in ("time", "level", "logger", "message")}
            return self.encoder.encode(fields).decode()


def formatter(log_format: LogFormat) -> logging.Formatter:
    return JsonFormatter() if log_format == "json" else TextFormatter()


def configure(
    log_format: LogFormat = "text",
    level: LogLevel | None = None,
    *,
    stream: IO[str] | None = None,
) -> None:
    """This process's logging, in `log_format`, at `level` (default INFO), on `stream`
    (default stderr). Called again, it replaces what the first call set."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(formatter(log_format))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level or DEFAULT_LEVEL)
    for name in LIBRARY_LOGGERS:
        library = logging.getLogger(name)
        library.handlers.clear()
        library.propagate = True
    logging.captureWarnings(True)


def configure_from(settings: Settings, default_level: LogLevel | None = None) -> None:
    """`configure` as `settings` say; at `default_level` when they name no level."""
    configure(settings.log_format, settings.log_level or default_level)
