"""`serve` and `worker` run on uvloop (and the API's HTTP on httptools) where they are
installed, and on the plain asyncio loop and h11 with `MAJORDOMUS_FAST_LOOP=0`; each says
which as it starts, from the loop that runs it."""

from __future__ import annotations

import asyncio
import importlib.util
import time
from collections.abc import Callable

import pytest

from majordomus import event_loop
from majordomus.event_loop import FAST_EXTRA, LoopChoice, choose, running_loop_name
from tests.api.conftest import ApiProcess, WorkerChild

FAST_INSTALLED = all(importlib.util.find_spec(m) for m in ("uvloop", "httptools"))
needs_fast = pytest.mark.skipif(not FAST_INSTALLED, reason="majordomus[fast] is not installed")


def _said(read: Callable[[], str], text: str, timeout: float = 30) -> str:
    """The output of a process once it holds `text` (or as it is when time is up)."""
    deadline = time.monotonic() + timeout
    while text not in (out := read()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return out


@needs_fast
@pytest.mark.usefixtures("spawns")
def test_the_api_runs_on_uvloop_and_httptools_where_they_are_installed(
    suite_redis_url: str,
) -> None:
    api = ApiProcess(suite_redis_url).start()
    try:
        with api.client() as client:
            assert client.get("/api/v1/live").status_code == 200
        line = "event loop uvloop, HTTP httptools (installed)"
        assert line in _said(api.output, line)
    finally:
        api.close()


@pytest.mark.usefixtures("spawns")
def test_an_api_opted_out_runs_on_the_asyncio_loop_and_h11(suite_redis_url: str) -> None:
    api = ApiProcess(suite_redis_url, MAJORDOMUS_FAST_LOOP="0").start()
    try:
        with api.client() as client:
            assert client.get("/api/v1/live").status_code == 200
        line = "event loop asyncio, HTTP h11 (MAJORDOMUS_FAST_LOOP=0)"
        output = _said(api.output, line)
        assert line in output and "uvloop" not in output
    finally:
        api.close()


@pytest.mark.parametrize(
    "fast, line",
    [
        pytest.param("1", "event loop uvloop (installed)", marks=needs_fast),
        ("0", "event loop asyncio (MAJORDOMUS_FAST_LOOP=0)"),
    ],
)
@pytest.mark.usefixtures("spawns")
def test_a_worker_says_which_loop_it_runs_on(suite_redis_url: str, fast: str, line: str) -> None:
    worker = WorkerChild(suite_redis_url, MAJORDOMUS_FAST_LOOP=fast)
    try:
        assert line in _said(worker.output, line)
    finally:
        worker.stop()


def test_without_the_extra_the_plain_loop_is_chosen_and_the_reason_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(event_loop, "_installed", lambda module: module == "uvloop")
    choice = choose.__wrapped__(True)
    assert (choice.loop, choice.http) == ("uvloop", "h11")
    assert choice.why == f"httptools not installed: {FAST_EXTRA}"
    assert choice.why_loop == "installed"
    monkeypatch.setattr(event_loop, "_installed", lambda module: False)
    plain = choose.__wrapped__(True)
    assert plain == LoopChoice("asyncio", "h11")
    assert plain.why == f"uvloop and httptools not installed: {FAST_EXTRA}"
    assert choose.__wrapped__(False).why == "MAJORDOMUS_FAST_LOOP=0"


@needs_fast
def test_on_the_fast_loop_a_sleep_or_a_timeout_never_ends_early() -> None:
    """libuv counts whole milliseconds: unpadded, a few in a hundred of these end up to
    about a millisecond early by `time.monotonic()` (a handler measuring its own sleep saw
    2.4996 s for 2.5)."""

    async def shortest() -> float:
        assert running_loop_name() == "uvloop"
        worst = 1.0
        for i in range(60):
            wanted = 0.003 + 0.0007 * (i % 9)
            began = time.monotonic()
            await asyncio.sleep(wanted)
            worst = min(worst, time.monotonic() - began - wanted)
            began = time.monotonic()
            try:
                async with asyncio.timeout(wanted):
                    await asyncio.Event().wait()
            except TimeoutError:
                pass
            worst = min(worst, time.monotonic() - began - wanted)
        return worst

    with asyncio.Runner(loop_factory=choose(True).new_loop) as runner:
        assert runner.run(shortest()) >= 0
