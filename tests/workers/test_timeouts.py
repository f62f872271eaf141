"""A capability's timeout on a real worker: past it the handler is asked to stop as a
cancel asks, then stopped after the cancel grace (0.3 s here), and the execution fails
`timed_out` with a diagnostic saying the bound, counted in the metrics. A plain `def`'s
thread cannot be stopped: its execution ends and its slot is freed all the same."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import msgspec
import pytest

from majordomus.config import Settings
from majordomus.engine import Engine
from majordomus.errors import EXIT_CODE, HTTP_STATUS
from majordomus.metrics import METRICS
from majordomus.registry import Registry, RegistryError, capability
from tests.capabilities import Done, Empty, Sleep, Slept
from tests.conftest import make_settings, until


@pytest.fixture
def settings(redis_url: str) -> Settings:
    """The workers' here: a grace of 0.3 s after the timeout, not the suite's 1 s."""
    return make_settings(redis_url, cancel_grace=0.3)


async def ended(engine: Engine, capability_id: str, seconds: float = 30) -> tuple[Any, float]:
    began = time.monotonic()
    snap = await engine.start(capability_id, {"seconds": seconds})
    done = await engine.wait(snap.id, 20_000)
    return done, time.monotonic() - began


def timed_out_count(capability_id: str) -> float:
    return METRICS.timed_out.values.get((capability_id,), 0.0)


async def test_a_handler_that_stops_when_asked_fails_timed_out_at_its_bound(
    engine: Engine, worker: Any
) -> None:
    before = timed_out_count("tests.deadline")
    done, took = await ended(engine, "tests.deadline")  # a sleep of 30 s, stopped at 0.3
    print(f"failed timed_out {took:.2f} s after its start")
    assert done.state == "failed"
    error = done.error
    assert error.code == "timed_out" and "timeout of 0.3 s" in error.message
    assert [(d.code, d.summary) for d in done.diagnostics] == [
        ("execution.timed_out", "stopped after its timeout of 0.3 s")
    ]
    assert timed_out_count("tests.deadline") == before + 1
    assert "output" not in msgspec.to_builtins(done)


@pytest.mark.parametrize("capability_id", ["tests.deaf", "tests.deaf_plain"])
async def test_a_handler_that_ignores_its_stop_keeps_its_slot_no_longer_than_the_grace(
    engine: Engine, worker: Any, capability_id: str
) -> None:
    # 4 s: past the timeout and the grace, and a thread's sleep the test's loop outlives.
    done, took = await ended(engine, capability_id, seconds=4)
    print(f"failed timed_out {took:.2f} s after its start (timeout 0.3 s, grace 0.3 s)")
    assert done.state == "failed" and done.error.code == "timed_out"
    # Ended while its handler still slept: before the 4 s it would have taken.
    assert isinstance(done.duration_ms, int) and done.duration_ms < 4000
    # Its slot is free, though a thread may still be sleeping.
    async def slot_free() -> bool:
        return not worker.runtime.running

    assert await until(slot_free, timeout=2)


def test_a_timeout_is_declared_positive_and_its_code_has_a_status_and_an_exit_code() -> None:
    with pytest.raises(RegistryError):
        capability("t.zero", input=Empty, output=Done, timeout=0, registry=Registry())(
            lambda ctx, inp: Done()
        )
    declared = capability(
        "t.hour", input=Sleep, output=Slept, timeout=timedelta(minutes=90), registry=Registry()
    )(lambda ctx, inp: Slept(0))
    assert declared.capability.timeout == 5400.0
    assert (HTTP_STATUS["timed_out"], EXIT_CODE["timed_out"]) == (504, 8)


async def test_a_start_shortens_its_capabilitys_timeout_but_never_lengthens_it(
    engine: Engine, worker: Any
) -> None:
    from majordomus.start_options import StartOptions

    shorter = await engine.start(
        "tests.sleepy", {"seconds": 30}, options=StartOptions(timeout_ms=300)
    )
    done = await engine.wait(shorter.id, 20_000)
    assert done.state == "failed" and done.error.code == "timed_out"
    assert "timeout of 0.3 s" in done.error.message
    longer = await engine.start(
        "tests.deadline", {"seconds": 30}, options=StartOptions(timeout_ms=60_000)
    )
    done = await engine.wait(longer.id, 20_000)
    assert done.error.code == "timed_out" and "timeout of 0.3 s" in done.error.message
