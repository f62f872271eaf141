"""Executions run by real workers on a real Redis: outcomes, cancellation, leases, scale-out."""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import msgspec

from majordomus.engine import Engine
from majordomus.model import event_type_of
from tests.conftest import (
    FOREVER_MS,
    LIVENESS_SECONDS,
    make_settings,
    running_worker,
    until,
    wait_for_workers,
    waiting_in_redis,
)


async def types_of(engine: Engine, xid: str) -> list[str]:
    return [event_type_of(e) for e in (await engine.events(xid)).events]


async def test_demonstrate_succeeds_with_every_report_as_an_event(engine: Engine, worker: Any) -> None:
    snap = await engine.start("executions.demonstrate", {"steps": 3, "log_lines": 2})
    done = await engine.wait(snap.id, 10_000)
    assert done.state == "succeeded"
    assert done.output["steps"] == 3 and done.output["observed"] is True
    assert [s.state for s in done.steps] == ["completed"] * 3
    assert done.progress.current == 3 and done.progress.total == 3  # type: ignore[union-attr]
    assert done.worker and done.attempt == 1 and done.duration_ms >= 0  # type: ignore[operator]
    per_step = ["execution.step.started", "execution.log", "execution.log",
                "execution.step.completed", "execution.progress"]
    assert await types_of(engine, snap.id) == [
        "execution.created", "execution.queued", "execution.started", *per_step * 3,
        "execution.completed",
    ]


async def test_demonstrate_called_directly_is_not_observed(engine: Engine) -> None:
    out = await engine.invoke("executions.demonstrate", {"steps": 2})
    assert (out.steps, out.observed) == (2, False)


async def test_demonstrate_failing_at_a_step_is_internal_without_a_traceback(
    engine: Engine, worker: Any
) -> None:
    snap = await engine.start("executions.demonstrate", {"steps": 4, "fail_at": 2})
    done = await engine.wait(snap.id, 10_000)
    assert done.state == "failed"
    error = done.error
    assert error.code == "internal"  # type: ignore[union-attr]
    assert error.suggestion == f"search the server's output for execution_id={snap.id}"  # type: ignore[union-attr]
    assert "Traceback" not in msgspec.json.encode(await engine.events(snap.id)).decode()
    shown = "DemonstrationFailure: demonstration failed at step 2 as asked"
    assert error.message.endswith(shown)  # type: ignore[union-attr]
    assert [(d.code, d.summary) for d in done.diagnostics] == [("execution.exception", shown)]
    assert [s.state for s in done.steps] == ["completed", "failed"]
    assert "output" not in msgspec.to_builtins(done)


async def test_an_unexpected_exception_says_its_type_and_message_and_no_traceback(
    engine: Engine, worker: Any
) -> None:
    snap = await engine.start("tests.boom", {})
    done = await engine.wait(snap.id, 10_000)
    error = done.error
    shown = "ValueError: secret internals that must not leak"
    assert error.code == "internal" and error.message.endswith(shown)  # type: ignore[union-attr]
    [diagnostic] = done.diagnostics
    assert (diagnostic.severity, diagnostic.code, diagnostic.summary) == (
        "error", "execution.exception", shown,
    )
    assert snap.id in str(diagnostic.suggestion)  # where its traceback is
    assert "Traceback" not in msgspec.json.encode(await engine.events(snap.id)).decode()


async def test_an_exception_message_is_redacted_and_bounded(engine: Engine, worker: Any) -> None:
    snap = await engine.start("tests.leaky", {"user": "ada", "token": "s3cret-token"})
    done = await engine.wait(snap.id, 10_000)
    history = msgspec.json.encode(await engine.events(snap.id)).decode()
    assert "s3cret-token" not in history and "«redacted»" in done.error.message  # type: ignore[union-attr]
    [diagnostic] = done.diagnostics
    assert len(diagnostic.summary) == 500 and diagnostic.summary.endswith("…")


async def test_with_failure_details_off_an_unexpected_exception_says_only_internal(
    engine: Engine, redis: Any, redis_url: str
) -> None:
    quiet = make_settings(redis_url, failure_details=False)
    async with running_worker(redis, quiet):
        snap = await engine.start("tests.boom", {})
        done = await engine.wait(snap.id, 10_000)
    assert done.error.code == "internal" and done.diagnostics == []  # type: ignore[union-attr]
    assert done.error.message == "the capability failed unexpectedly"  # type: ignore[union-attr]
    assert "secret internals" not in msgspec.json.encode(await engine.events(snap.id)).decode()


async def test_an_output_that_is_not_its_declared_type_fails_and_is_not_stored(
    engine: Engine, worker: Any
) -> None:
    for given, problem in (("struct", "Expected `int`, got `str` - at `$.events`"),
                           ("dict", "Object missing required field `events`")):  # fmt: skip
        snap = await engine.start("tests.liar", {"kind": given})
        done = await engine.wait(snap.id, 10_000)
        assert done.state == "failed" and "output" not in msgspec.to_builtins(done)
        error = done.error
        assert error.code == "internal"  # type: ignore[union-attr]
        assert error.message == (  # type: ignore[union-attr]
            f"tests.liar answered an output that is not a Counted: {problem}"
        )
        assert [d.code for d in done.diagnostics] == ["execution.output_invalid"]


async def test_a_typed_error_from_a_handler_keeps_its_code(engine: Engine, worker: Any) -> None:
    done = await engine.wait((await engine.start("tests.refuse", {})).id, 10_000)
    assert (done.error.code, done.error.suggestion) == ("refused", "try tomorrow")  # type: ignore[union-attr]


async def test_demonstrate_cancelled_mid_way_stops_within_the_step(engine: Engine, worker: Any) -> None:
    snap = await engine.start("executions.demonstrate", {"steps": 50, "delay_ms": 200})
    await until(lambda: _step_reached(engine, snap.id, 2))
    answer = await engine.cancel(snap.id, by="test")
    assert answer.outcome == "requested" and answer.execution.state == "cancelling"
    assert (await engine.cancel(snap.id)).outcome in ("already_requested", "already_finished")
    done = await engine.wait(snap.id, 5_000)
    assert done.state == "cancelled" and done.error.code == "cancelled"  # type: ignore[union-attr]
    types = await types_of(engine, snap.id)
    assert types[-2:] == ["execution.cancelling", "execution.cancelled"] or types[-1] == "execution.cancelled"
    assert len(done.steps) < 50


async def _step_reached(engine: Engine, xid: str, n: int) -> bool:
    return len((await engine.get(xid)).steps) >= n


async def test_a_queued_execution_cancelled_before_pickup_never_starts(
    engine: Engine, redis: Any, settings: Any
) -> None:
    snap = await engine.start("tests.noop", {})
    answer = await engine.cancel(snap.id)
    assert answer.outcome == "requested" and answer.execution.state == "cancelled"
    async with running_worker(redis, settings):
        after = await engine.start("tests.noop", {})
        assert (await engine.wait(after.id, 10_000)).state == "succeeded"
    final = await engine.get(snap.id)
    assert final.state == "cancelled" and final.attempt == 0
    assert "execution.started" not in await types_of(engine, snap.id)


async def test_a_handler_that_returns_anyway_after_cancel_succeeds(engine: Engine, worker: Any) -> None:
    snap = await engine.start("tests.finisher", {"seconds": 5})
    await until(lambda: _running(engine, snap.id))
    await engine.cancel(snap.id)
    done = await engine.wait(snap.id, 5_000)
    assert done.state == "succeeded" and done.output == {"slept": 5.0}


async def _running(engine: Engine, xid: str) -> bool:
    return (await engine.get(xid)).state == "running"


async def test_an_async_handler_ignoring_its_flag_is_stopped_after_the_grace(
    engine: Engine, worker: Any
) -> None:
    snap = await engine.start("tests.stubborn", {"seconds": 60})
    await until(lambda: _running(engine, snap.id))
    await engine.cancel(snap.id)
    assert (await engine.wait(snap.id, 200)).state == "cancelling"  # grace is 1 s in tests
    done = await engine.wait(snap.id, 10_000)
    assert done.state == "cancelled"


async def test_a_tight_loop_of_reports_is_batched_in_order(engine: Engine, worker: Any) -> None:
    calls = 0
    runtime_store = worker.ctx["majordomus"].store
    real = runtime_store.append

    async def counting(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        return await real(*args, **kwargs)

    runtime_store.append = counting
    try:
        snap = await engine.start("tests.chatty", {"events": 2000})
        done = await engine.wait(snap.id, 20_000)
    finally:
        runtime_store.append = real
    assert done.state == "succeeded" and done.last_sequence == 3 + 2000 + 1
    assert done.progress.current == 2000  # type: ignore[union-attr]
    history = await engine.events(snap.id)
    currents = [e.data.current for e in history.events if event_type_of(e) == "execution.progress"]  # type: ignore[union-attr]
    assert currents == sorted(currents) and currents[-1] == 2000
    assert calls < 2000 / 5, f"{calls} append calls for 2000 reports"


async def test_a_plain_def_handler_runs_in_a_thread_and_reports_in_order(
    engine: Engine, worker: Any
) -> None:
    done = await engine.wait((await engine.start("tests.plain", {"events": 50})).id, 10_000)
    assert done.state == "succeeded"
    lines = [e.data.message for e in (await engine.events(done.id)).events if event_type_of(e) == "execution.log"]  # type: ignore[union-attr]
    assert lines == [f"line {i}" for i in range(50)]


async def test_the_input_is_readable_by_the_handler_and_then_deleted(engine: Engine, worker: Any) -> None:
    snap = await engine.start("tests.login", {"user": "ada", "token": "t0ps3cret"})
    done = await engine.wait(snap.id, 10_000)
    assert done.output == {"user": "ada", "token_length": 9}
    assert await engine.redis.exists(engine.store.keys.secret_input(snap.id)) == 0


async def test_max_concurrency_one_is_serial_across_workers(redis: Any, settings: Any, engine: Engine) -> None:
    async with running_worker(redis, settings), running_worker(redis, settings):
        ids = [(await engine.start("tests.serial", {"seconds": 0.2})).id for _ in range(4)]
        done = [await engine.wait(i, 20_000) for i in ids]
    assert all(d.state == "succeeded" for d in done)
    spans = sorted((d.started_at, d.finished_at) for d in done)
    for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
        assert end <= start, spans


async def test_a_worker_publishes_its_presence(engine: Engine, worker: Any) -> None:
    runtime = worker.ctx["majordomus"]
    presence = await engine.redis.hgetall(engine.store.keys.worker(runtime.worker_id))
    assert {b"id", b"host", b"pid", b"started_at", b"running", b"last_beat"} <= set(presence)
    assert await engine.redis.exists(engine.store.keys.partitions[0].lease(runtime.worker_id))


async def test_two_worker_processes_run_each_execution_exactly_once(
    engine: Engine, worker_process: Any, redis: Any
) -> None:
    worker_process()
    worker_process()
    await wait_for_workers(redis, 2)
    ids = [(await engine.start("tests.noop", {})).id for _ in range(60)]
    done = [await engine.wait(i, 20_000) for i in ids]
    assert all(d.state == "succeeded" and d.attempt == 1 for d in done)
    for xid in ids:
        assert (await types_of(engine, xid)).count("execution.started") == 1


async def test_a_worker_killed_mid_execution_leaves_it_failed_unavailable_never_rerun(
    engine: Engine, worker_process: Any, redis: Any, settings: Any
) -> None:
    doomed = worker_process()
    await wait_for_workers(redis, 1)
    snap = await engine.start("tests.sleepy", {"seconds": 60})
    await until(lambda: _running(engine, snap.id), timeout=15)
    doomed.kill(signal.SIGKILL)
    doomed.wait()
    async with running_worker(redis, settings):  # a live worker's sweeper notices
        done = await engine.wait(snap.id, 15_000)
        assert done.state == "failed"
        assert done.error.code == "unavailable"  # type: ignore[union-attr]
        assert done.error.message == "the worker running it stopped"  # type: ignore[union-attr]
        await asyncio.sleep(1.0)  # room for a wrongful rerun to show
    final = await engine.get(snap.id)
    assert final.attempt == 1
    assert (await types_of(engine, snap.id)).count("execution.started") == 1


async def test_sigterm_lets_work_finish_for_a_grace_then_cancels_it_as_the_server(
    engine: Engine, worker_process: Any, redis: Any
) -> None:
    wp = worker_process()
    await wait_for_workers(redis, 1)
    quick = await engine.start("tests.sleepy", {"seconds": 0.3})
    slow = await engine.start("tests.sleepy", {"seconds": 60})
    await until(lambda: _running(engine, slow.id), timeout=15)
    wp.kill(signal.SIGTERM)
    assert wp.wait(20) == 0  # it stops by itself, cleanly: arq ends on its cancelled main task
    assert (await engine.get(quick.id)).state == "succeeded"
    done = await engine.get(slow.id)
    assert done.state == "cancelled"
    events = (await engine.events(slow.id)).events
    cancelling = [e for e in events if event_type_of(e) == "execution.cancelling"]
    assert [e.data.by for e in cancelling] == ["server"]  # type: ignore[union-attr]


async def test_pickup_does_not_wait_for_a_poll(redis: Any, redis_url: str, engine: Engine) -> None:
    # A fallback poll that never comes proves the wake-up signal is what starts the execution.
    cfg = make_settings(redis_url, poll_seconds=FOREVER_MS / 1000)
    async with running_worker(redis, cfg) as worker:
        await until(lambda: waiting_in_redis(worker))  # idle, past its first take
        snap = await engine.start("tests.noop", {})
        done = await engine.wait(snap.id, LIVENESS_SECONDS * 1000)
    assert done.state == "succeeded"
