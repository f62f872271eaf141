"""What goes between a worker and its child processes: msgpack frames, one message each.

The worker sends `Run`, `Cancel`, `Ack` and `Stop`; a child answers `Ready` once
it has imported its handler (or `Broken`, saying why it cannot), `Report` for each report
its handler makes, and `Done` or `Raised` for each execution. Frames are written with
`multiprocessing.connection.Connection.send_bytes`, so the framing is the standard library's.
"""

from __future__ import annotations

from typing import Any

import msgspec

WINDOW = 64
"""Reports a child sends beyond the last acknowledged one before its handler waits: the
execution's report buffer holds at most its bound plus this many."""
ACK_EVERY = 16
"""The worker acknowledges a running execution's reports every this many (when its buffer
has room; else as soon as it has)."""


class Run(msgspec.Struct, tag=True, array_like=True):
    execution_id: str
    input: bytes
    """The execution's input as JSON (the worker already validated it)."""


class Cancel(msgspec.Struct, tag=True, array_like=True):
    by: str


class Ack(msgspec.Struct, tag=True, array_like=True):
    """The worker applied this many of the running execution's reports, and its buffer has
    room: a child sends at most `WINDOW` reports past the last one acknowledged."""

    applied: int


class Stop(msgspec.Struct, tag=True, array_like=True):
    """Exit once idle (the child is recycled, or its worker stops)."""


class Ready(msgspec.Struct, tag=True, array_like=True):
    pid: int


class Broken(msgspec.Struct, tag=True, array_like=True):
    """The child cannot run its handler (its module does not import, say)."""

    reason: str


class Report(msgspec.Struct, tag=True, array_like=True):
    kind: str
    """The context method: step, step_done, progress, log or diagnostic."""
    args: list[Any]


class Done(msgspec.Struct, tag=True, array_like=True):
    output: bytes
    """The handler's answer as JSON (checked against its declared type by the worker)."""
    rss: int
    """The child's resident memory after it, in bytes (0: unknown)."""


class Raised(msgspec.Struct, tag=True, array_like=True):
    type_name: str
    text: str
    traceback: str
    rss: int
    pickled: bytes | None = None
    """The exception itself, when it pickles: the worker raises the same type."""
    code: str | None = None
    """A `MajordomusError`'s code (with its message and suggestion)."""
    message: str | None = None
    suggestion: str | None = None
    cancelled: bool = False
    """The handler stopped because it was asked to (`ExecutionCancelled`)."""


ToChild = Run | Cancel | Ack | Stop
FromChild = Ready | Broken | Report | Done | Raised

to_child = msgspec.msgpack.Decoder(ToChild)
from_child = msgspec.msgpack.Decoder(FromChild)
encode = msgspec.msgpack.Encoder().encode
