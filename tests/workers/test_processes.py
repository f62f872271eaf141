"""Capabilities that run in child processes of their worker (`runs_in="process"`,
`majordomus.children`), on a real worker and a real Redis: their reports are the loop's
(same events, redaction and back-pressure), they hear cancels and timeouts, a child past its
grace is killed, a child that dies fails only its execution (`unavailable`, saying how),
children are recycled by count and by memory, and a worker told to stop leaves none behind."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest

from majordomus.context import ExecutionContext
from majordomus.engine import Engine
from majordomus.errors import MajordomusError
from majordomus.metrics import METRICS
from majordomus.registry import Registry, RegistryError, capability
from tests.conftest import make_settings, running_worker, until, wait_for_workers
from tests.process_capabilities import Count, How, Pid, registry

PROCESS = registry()

pytestmark = [pytest.mark.process, pytest.mark.slow]  # its workers start child processes


def ended_count(cap_id: str, how: str) -> float:
    return METRICS.children_ended.values.get((cap_id, how), 0.0)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (dead, not yet reaped) still answers signal 0: /proc says which it is.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return True


@pytest.fixture
def proc_settings(redis_url: str) -> Any:
    return make_settings(redis_url)


@pytest.fixture
async def proc_engine(redis: Any, proc_settings: Any) -> Engine:
    return Engine(redis, PROCESS, proc_settings)


@pytest.fixture
async def proc_worker(redis: Any, proc_settings: Any) -> AsyncIterator[Any]:
    async with running_worker(redis, proc_settings, registry=PROCESS) as w:
        yield w


async def run(engine: Engine, cap_id: str, inp: dict[str, Any], wait_ms: int = 20_000) -> Any:
    snap = await engine.start(cap_id, inp)
    return await engine.wait(snap.id, wait_ms)


async def events_of(engine: Engine, execution_id: str) -> list[Any]:
    page = await engine.events(execution_id)
    return list(page.events)


async def test_a_handler_in_a_child_reports_as_in_the_loop_with_its_secrets_masked(
    proc_engine: Engine, proc_worker: Any
) -> None:
    done = await run(proc_engine, "proc.say", {"text": "hey", "token": "hunter2-secret"})
    assert done.state == "succeeded", done
    assert done.output["text"] == "HEY"
    assert done.output["pid"] != os.getpid()  # it ran in another process
    events = await events_of(proc_engine, done.id)
    kinds = [e.type for e in events]
    assert kinds == [
        "execution.created", "execution.queued", "execution.started", "execution.step.started",
        "execution.progress", "execution.log", "execution.step.completed",
        "execution.diagnostic", "execution.completed",
    ], kinds
    texts = msgspec.json.encode([msgspec.to_builtins(e) for e in events]).decode()
    assert "hunter2-secret" not in texts and "«redacted»" in texts
    assert done.progress.current == 1 and done.progress.total == 2
    assert [(s.name, s.state) for s in done.steps] == [("say", "completed")]
    assert [(d.code, d.detail) for d in done.diagnostics] == [("proc.note", "from the child")]


async def test_a_plain_def_handler_runs_in_a_child_too(
    proc_engine: Engine, proc_worker: Any
) -> None:
    done = await run(proc_engine, "proc.shout", {"text": "hey", "reports": 3})
    assert done.state == "succeeded" and done.output["text"] == "HEY!"
    logs = [e.data.message for e in await events_of(proc_engine, done.id) if e.type == "execution.log"]
    assert logs == ["report 0", "report 1", "report 2"]


async def test_what_a_handler_raises_in_its_child_is_read_as_in_the_loop(
    proc_engine: Engine, proc_worker: Any
) -> None:
    plain = await run(proc_engine, "proc.fail", {})
    assert plain.state == "failed" and plain.error.code == "internal"
    assert plain.error.message.endswith("Zero: division by zero, in a child")
    assert [(d.code, d.summary) for d in plain.diagnostics] == [
        ("execution.exception", "Zero: division by zero, in a child")
    ]
    typed = await run(proc_engine, "proc.fail", {"how": "typed"})
    assert (typed.error.code, typed.error.message, typed.error.suggestion) == (
        "conflict", "it conflicts", "try another"
    )
    odd = await run(proc_engine, "proc.fail", {"how": "unpicklable"})
    assert odd.error.message.endswith("UnpicklableError: holds a lambda")
    liar = await run(proc_engine, "proc.liar", {})
    assert liar.state == "failed" and liar.error.code == "internal"
    assert "Expected `int`, got `str` - at `$.count`" in liar.error.message
    assert "output" not in msgspec.to_builtins(liar)


@pytest.mark.parametrize(
    ("how", "said"),
    [("exit", "exited with status 3"), ("kill", "killed by SIGKILL"), ("segfault", "killed by SIGSEGV")],
)
async def test_a_child_that_dies_fails_only_its_execution_saying_how(
    proc_engine: Engine, proc_worker: Any, how: str, said: str
) -> None:
    beside = await proc_engine.start("proc.polite", {"seconds": 1.0})
    died = ended_count("proc.die", "died")
    done = await run(proc_engine, "proc.die", {"how": how})
    assert done.state == "failed" and done.error.code == "unavailable"
    assert done.error.message.endswith(f"died: {said}")
    assert [(d.code, d.summary) for d in done.diagnostics] == [
        ("execution.child_died", f"its child process died: {said}")
    ]
    # Its log line before dying is in its history; the worker and the other execution go on.
    logs = [e.data.message for e in await events_of(proc_engine, done.id) if e.type == "execution.log"]
    assert logs == ["about to die"]
    assert (await proc_engine.wait(beside.id, 20_000)).state == "succeeded"
    assert ended_count("proc.die", "died") == died + 1
    again = await run(proc_engine, "proc.die", {"how": "nothing"})  # a fresh child
    assert again.error.message.endswith("died: exited with status 3")


@pytest.mark.parametrize("cap_id", ["proc.polite", "proc.polite_plain"])
async def test_a_child_hears_its_cancel(
    proc_engine: Engine, proc_worker: Any, cap_id: str
) -> None:
    snap = await proc_engine.start(cap_id, {"seconds": 30})

    async def running() -> bool:
        return (await proc_engine.get(snap.id)).state == "running"

    await until(running)
    await proc_engine.cancel(snap.id)
    done = await proc_engine.wait(snap.id, 20_000)
    assert done.state == "cancelled"
    # Its child was not killed: it stopped when asked, and runs the next one.
    pool = proc_worker.runtime.children.pools[cap_id]
    again = await run(proc_engine, cap_id, {"seconds": 0})
    assert again.state == "succeeded" and pool.started == 1


@pytest.mark.parametrize("cap_id", ["proc.stuck", "proc.stuck_async"])
async def test_a_child_deaf_to_its_cancel_is_killed_past_the_grace(
    proc_engine: Engine, proc_worker: Any, cap_id: str
) -> None:
    snap = await proc_engine.start(cap_id, {"seconds": 60})

    async def running() -> bool:
        return (await proc_engine.get(snap.id)).state == "running"

    pool = proc_worker.runtime.children.pools[cap_id]

    async def in_its_child() -> bool:
        return bool(pool.busy)

    await until(in_its_child)
    (child,) = pool.busy
    killed = ended_count(cap_id, "killed")
    await proc_engine.cancel(snap.id)
    done = await proc_engine.wait(snap.id, 20_000)  # the grace is 1 s here
    assert done.state == "cancelled"
    assert await until(lambda: asyncio.to_thread(lambda: not alive(child.pid)), timeout=10)
    assert not proc_worker.runtime.running
    assert await until(lambda: asyncio.sleep(0, ended_count(cap_id, "killed") == killed + 1))


async def test_a_child_past_its_timeout_is_stopped_and_its_execution_timed_out(
    proc_engine: Engine, proc_worker: Any
) -> None:
    done = await run(proc_engine, "proc.late", {"seconds": 60})
    assert done.state == "failed" and done.error.code == "timed_out"
    assert [d.code for d in done.diagnostics] == ["execution.timed_out"]
    pool = proc_worker.runtime.children.pools["proc.late"]
    assert pool.started >= 1 and not pool.busy


async def test_a_starts_own_timeout_holds_for_every_attempt_of_its_chain(
    proc_engine: Engine, proc_worker: Any
) -> None:
    from majordomus.start_options import StartOptions

    first = await proc_engine.start(
        "proc.retried", {"seconds": 30}, options=StartOptions(timeout_ms=300)
    )
    done = await proc_engine.wait(first.id, 20_000)
    assert done.error.code == "timed_out" and isinstance(done.retried_as, str)
    second = await proc_engine.wait(done.retried_as, 20_000)
    assert second.attempt == 2 and second.state == "failed"
    assert second.error.code == "timed_out" and "timeout of 0.3 s" in second.error.message


async def test_children_are_recycled_after_a_count_of_executions(
    redis: Any, redis_url: str
) -> None:
    cfg = make_settings(redis_url, child_max_executions=3)
    engine = Engine(redis, PROCESS, cfg)
    async with running_worker(redis, cfg, registry=PROCESS) as worker:
        pids = [(await run(engine, "proc.pid", {})).output["pid"] for _ in range(7)]
        pool = worker.runtime.children.pools["proc.pid"]
    assert [pids.index(p) for p in pids] == [0, 0, 0, 3, 3, 3, 6], pids
    assert pool.recycled == 2
    assert METRICS.children_started.values[("proc.pid",)] >= 3


async def test_a_pool_a_burst_grew_shrinks_back_to_its_warm_child_once_idle(
    proc_engine: Engine, proc_worker: Any, monkeypatch: Any
) -> None:
    starts = [await proc_engine.start("proc.polite", {"seconds": 0.3}) for _ in range(3)]
    for snap in starts:
        assert (await proc_engine.wait(snap.id, 20_000)).state == "succeeded"
    pool = proc_worker.runtime.children.pools["proc.polite"]
    assert len(pool.idle) == 3
    pool.trim()  # none idle for long yet
    assert len(pool.idle) == 3
    monkeypatch.setattr("majordomus.children.pool.IDLE_SECONDS", 0.0)
    retired = sorted(pool.idle, key=lambda c: c.idle_since)[:2]
    pool.trim()
    assert len(pool.idle) == 1 and pool.idle[0] not in retired

    async def gone() -> bool:
        return not any(alive(c.pid) for c in retired)

    assert await until(gone)
    again = await run(proc_engine, "proc.polite", {"seconds": 0})
    assert again.state == "succeeded"


async def test_children_are_recycled_past_their_memory(redis: Any, redis_url: str) -> None:
    # A child's own footprint first (what its imports make it), then a limit 10 MiB above
    # it: each run of proc.leak keeps 2 MiB more.
    cfg = make_settings(redis_url)
    async with running_worker(redis, cfg, registry=PROCESS):
        base = (await run(Engine(redis, PROCESS, cfg), "proc.leak", {})).output["rss_mb"]
    limit = int(base) + 10
    cfg = make_settings(redis_url, child_max_memory_mb=limit)
    engine = Engine(redis, PROCESS, cfg)
    async with running_worker(redis, cfg, registry=PROCESS) as worker:
        outputs = [(await run(engine, "proc.leak", {})).output for _ in range(20)]
        pool = worker.runtime.children.pools["proc.leak"]
    pids = [o["pid"] for o in outputs]
    # Each child is replaced after the run that took it past the limit: none grows further.
    assert len(set(pids)) >= 3 and pool.recycled >= len(set(pids)) - 1, (limit, outputs)
    assert max(o["rss_mb"] for o in outputs) < limit + 2 + 2, (limit, outputs)


async def test_a_child_is_held_while_its_reports_wait_past_their_bound(
    proc_engine: Engine, proc_settings: Any, redis: Any, monkeypatch: Any
) -> None:
    """The loop's bound holds a child's handler too: with the report buffer bounded at 20
    and Redis slowed, 3,000 reports made as fast as a loop makes them never pile up."""
    import workers.runtime as runtime_module

    seen: list[int] = []

    class Bounded(ExecutionContext):
        def __init__(self, store: Any, *args: Any, **kwargs: Any) -> None:
            super().__init__(SlowStore(store), *args, max_events=20, **kwargs)

        def _emit(self, event_type: str, data: bytes) -> Any:
            reported = super()._emit(event_type, data)
            seen.append(self.pending()[0])
            return reported

    monkeypatch.setattr("majordomus.workers.runtime.ExecutionContext", Bounded)
    assert runtime_module is not None
    async with running_worker(redis, proc_settings, registry=PROCESS):
        done = await run(proc_engine, "proc.flood", {"count": 3000}, wait_ms=60_000)
    assert done.state == "succeeded" and done.output == {"count": 3000}
    assert len(seen) >= 3000
    # Without the hold the child would have sent them all at once; with it, the buffer
    # stays within its bound, the child's window of unacknowledged reports (64), and the
    # reports the handler makes between two awaits (100).
    assert max(seen) <= 20 + 64 + 100, max(seen)


class SlowStore:
    """A store whose appends each take 5 ms more (Redis far away)."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def append(self, *args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(0.005)  # Redis slower than the handler: the point
        return await self._store.append(*args, **kwargs)


def test_runs_in_is_checked_when_declared() -> None:
    reg = Registry()
    with pytest.raises(RegistryError, match="plain def handler"):
        capability("t.a", input=How, output=Pid, runs_in="loop", registry=reg)(lambda c, i: None)

    async def handler(ctx: Any, inp: How) -> Pid:
        return Pid(0)

    with pytest.raises(RegistryError, match="async handler"):
        capability("t.b", input=How, output=Pid, runs_in="thread", registry=reg)(handler)
    with pytest.raises(RegistryError, match="top level of an importable module"):
        capability("t.c", input=How, output=Pid, runs_in="process", registry=reg)(handler)
    with pytest.raises(RegistryError, match="needs an execution"):
        capability(
            "t.d", input=How, output=Pid, runs_in="process", executable=False, registry=reg
        )(handler)
    assert capability("t.e", input=How, output=Count, registry=reg)(handler).capability.runs_in == "loop"
    plain = capability("t.f", input=How, output=Count, registry=reg)(lambda c, i: None)
    assert plain.capability.runs_in == "thread"


async def stuck_in_children(engine: Engine, redis: Any, worker_process: Any) -> tuple[Any, list[str], list[int]]:
    """A worker process running two `procs.stuck` in their children: it, their ids, the
    children's pids."""
    child = worker_process(MAJORDOMUS_CAPABILITIES="tests.capabilities,tests.process_worker_capabilities")
    await wait_for_workers(redis, 1)

    async def published() -> bool:  # as its worker published it (not imported here)
        try:
            return bool(await engine.known("procs.stuck"))
        except MajordomusError:
            return False

    await until(published)
    ids = [(await engine.start("procs.stuck", {"seconds": 60})).id for _ in range(2)]

    async def both_logged() -> list[int]:
        pids = []
        for x in ids:
            logs = [e.data.message for e in await events_of(engine, x) if e.type == "execution.log"]
            pids += [int(m.split()[1]) for m in logs]
        return pids if len(pids) == 2 else []

    pids = await until(both_logged, timeout=30)
    assert all(alive(p) for p in pids)
    return child, ids, pids


async def test_a_worker_told_to_stop_kills_its_stuck_children_within_its_graces(
    proc_engine: Engine, redis: Any, worker_process: Any
) -> None:
    child, ids, pids = await stuck_in_children(proc_engine, redis, worker_process)
    engine = proc_engine
    told = time.monotonic()
    child.kill(signal.SIGTERM)
    # Within the two graces of 1 s: a worker that waited for its handlers' 60 s sleeps
    # would outlive this wait.
    code = await asyncio.to_thread(child.wait, 20)
    print(f"stopped {time.monotonic() - told:.1f} s after SIGTERM")
    assert code == 0, child.output()
    assert {(await engine.get(x)).state for x in ids} == {"cancelled"}  # noqa: C416
    assert not any(alive(p) for p in pids), child.output()



async def test_children_started_with_spawn_run_as_forkserver_ones_do(
    redis: Any, redis_url: str
) -> None:
    cfg = make_settings(redis_url, child_start="spawn")
    engine = Engine(redis, PROCESS, cfg)
    async with running_worker(redis, cfg, registry=PROCESS) as worker:
        done = await run(engine, "proc.shout", {"text": "spawned", "reports": 2})
        pool = worker.runtime.children.pools["proc.shout"]
    assert done.state == "succeeded" and done.output["text"] == "SPAWNED!"
    assert pool.mp.get_start_method() == "spawn"


async def test_a_worker_killed_outright_leaves_no_child_behind(
    proc_engine: Engine, redis: Any, worker_process: Any
) -> None:
    child, _, pids = await stuck_in_children(proc_engine, redis, worker_process)
    child.kill(signal.SIGKILL)
    await asyncio.to_thread(child.wait, 20)

    async def orphans_gone() -> bool:  # each sees its pipe close, and exits
        return not any(alive(p) for p in pids)

    assert await until(orphans_gone, timeout=10)
