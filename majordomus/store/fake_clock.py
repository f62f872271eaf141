"""fakeredis on majordomus's clock: the one shim of fakeredis's private names.

An in-process fakeredis server reads the time of day from Python's `time.time()`, through
the module `time` that four of its modules import: `TIME` (which every script of ours
asks for due times, leases and slots), the clock each command sets on every database
before it runs (key expiry: `PX`, `PEXPIRE`, `TTL`, so leases and locks run out), stream
ids of `XADD *`, and hash fields' and stream entries' ages. `follow_the_clock()` points
those four names at a stand-in that answers `majordomus.clock.now()` for `time()`
and is the real module for everything else; `leave_the_clock()` gives them back. So a
test that skips time on the virtual clock (`majordomus.testing`) skips it in the server
too, and the same scripts decide what is due.

The names are private to fakeredis (checked for 2.41): tests/testing/test_fakeredis.py
fails, naming the module, when a version moves them. A real Redis keeps its own time:
nothing here can change it. Blocking commands time out by the event loop's clock
(fakeredis's asyncio sockets), which a skip does not move.
"""

from __future__ import annotations

import importlib
import threading
import time
from types import ModuleType
from typing import Any

from majordomus import clock

CLOCK_READERS = (
    "fakeredis._socket._base",  # each command's clock (key expiry)
    "fakeredis.commands_mixins.server_mixin",  # TIME
    "fakeredis._helpers",  # current_time(): hash field expiry, stream entries' idle time
    "fakeredis.model._stream",  # the id XADD * gives
)
"""The fakeredis modules whose global `time` is the clock they read."""


class _ClockTime:
    """Python's `time` module, but for `time()`, which is majordomus's clock."""

    def time(self) -> float:
        return clock.now()

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


_STAND_IN = _ClockTime()
_lock = threading.Lock()
_followers = 0


def _readers() -> list[ModuleType]:
    modules = [importlib.import_module(name) for name in CLOCK_READERS]
    for module in modules:
        if getattr(module, "time", None) not in (time, _STAND_IN):
            raise RuntimeError(
                f"{module.__name__} no longer reads the time through its global `time`: "
                "majordomus.store.fake_clock does not know this fakeredis"
            )
    return modules


def follow_the_clock() -> None:
    """Have every fakeredis server of this process read majordomus's clock (counted: each
    call is undone by one `leave_the_clock`)."""
    global _followers
    with _lock:
        modules = _readers()
        if _followers == 0:
            for module in modules:
                module.time = _STAND_IN  # type: ignore[attr-defined]
        _followers += 1


def leave_the_clock() -> None:
    """Undo one `follow_the_clock`; the last gives fakeredis its own `time` back."""
    global _followers
    with _lock:
        if _followers == 0:
            return
        _followers -= 1
        if _followers == 0:
            for module in _readers():
                module.time = time  # type: ignore[attr-defined]


def following() -> bool:
    """Whether fakeredis reads majordomus's clock now."""
    return _followers > 0


def fake_server() -> Any:
    """A new in-process fakeredis server (as `majordomus dev` makes one)."""
    import fakeredis

    return fakeredis.FakeServer()


def fakeredis_version() -> str:
    """The installed fakeredis's version ("2.41.0")."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("fakeredis")
    except PackageNotFoundError:
        return "(version unknown)"
