"""The store against a real Redis: atomic moves, dense sequences, the 500-entry cap, paging."""

from __future__ import annotations

import asyncio
import json
import time

import msgspec
import pytest

from majordomus.clock import now_stamp
from majordomus.config import LIMITS
from majordomus.engine import Engine
from majordomus.errors import MajordomusError
from majordomus.start_options import StartOptions
from majordomus.states import STATES, may_move_to
from majordomus.store.executions import IdTaken, encode

FAILED = encode({"error": {"code": "internal", "message": "x", "correlation_id": "c"}})
EVENT_FOR = {
    "running": ("execution.started", b""),
    "cancelling": ("execution.cancelling", b'{"by":"test"}'),
    "succeeded": ("execution.completed", b'{"output":{"ok":true}}'),
    "failed": ("execution.failed", FAILED),
    "cancelled": ("execution.cancelled", b""),
}
PATH_TO = {
    "queued": [],
    "running": ["running"],
    "cancelling": ["running", "cancelling"],
    "succeeded": ["running", "succeeded"],
    "failed": ["failed"],
    "cancelled": ["cancelled"],
}
LOG = ("execution.log", b'{"stream":"handler","message":"hello"}')


async def queued(engine: Engine) -> str:
    return (await engine.start("tests.noop", {})).id


async def bring_to(engine: Engine, state: str) -> str:
    xid = await queued(engine)
    for step in PATH_TO[state]:
        result = await engine.store.append(xid, [EVENT_FOR[step]])
        assert result.complete, (state, step, result)
    return xid


@pytest.mark.parametrize("current", STATES)
async def test_every_move_is_allowed_or_refused_as_the_table_says(engine: Engine, current: str) -> None:
    for target, event in EVENT_FOR.items():
        xid = await bring_to(engine, current)
        before = await engine.get(xid)
        result = await engine.store.append(xid, [event])
        after = await engine.get(xid)
        if may_move_to(current, target):
            assert result.complete and after.state == target
            assert after.last_sequence == before.last_sequence + 1
        else:
            assert not result.complete and after.state == current
            assert after.last_sequence == before.last_sequence  # no sequence consumed


@pytest.mark.parametrize("final", ["succeeded", "failed", "cancelled"])
async def test_a_final_state_never_moves_again_and_takes_no_event(engine: Engine, final: str) -> None:
    xid = await bring_to(engine, final)
    before = await engine.get(xid)
    for event in [*EVENT_FOR.values(), LOG, ("execution.progress", b'{"current":1}')]:
        result = await engine.store.append(xid, [event])
        assert result.applied == 0
    after = await engine.get(xid)
    assert after.state == final and after.last_sequence == before.last_sequence
    history = await engine.events(xid)
    assert [e.sequence for e in history.events] == list(range(1, before.last_sequence + 1))


async def test_a_snapshot_never_reads_succeeded_without_output_nor_failed_without_error(
    engine: Engine,
) -> None:
    ok = await bring_to(engine, "succeeded")
    bad = await bring_to(engine, "failed")
    assert (await engine.get(ok)).output == {"ok": True}
    assert (await engine.get(bad)).error.code == "internal"  # type: ignore[union-attr]


async def test_300_rounds_of_cancel_racing_completion_leave_only_legal_histories(
    engine: Engine,
) -> None:
    outcomes = {"succeeded": 0, "cancelling->succeeded": 0}
    for _ in range(300):
        xid = await bring_to(engine, "running")
        cancel, finish = await asyncio.gather(
            engine.cancel(xid, by="test"),
            engine.store.append(xid, [EVENT_FOR["succeeded"]]),
        )
        history = await engine.events(xid)
        types = [type(e).__name__ for e in history.events]
        seqs = [e.sequence for e in history.events]
        assert seqs == list(range(1, len(seqs) + 1))
        assert finish.complete  # completion is legal from running and from cancelling
        assert history.state == "succeeded"
        if types[3:] == ["ExecutionCompleted"]:
            assert cancel.outcome == "already_finished"
            outcomes["succeeded"] += 1
        else:
            assert types[3:] == ["ExecutionCancelling", "ExecutionCompleted"]
            assert cancel.outcome == "requested"
            outcomes["cancelling->succeeded"] += 1
    assert sum(outcomes.values()) == 300


async def test_cancel_racing_a_pickup_never_runs_a_cancelled_execution(engine: Engine) -> None:
    for _ in range(100):
        xid = await queued(engine)
        cancel, (claim, _) = await asyncio.gather(
            engine.cancel(xid, by="test"), engine.store.claim(xid, "w-test")
        )
        snap = await engine.get(xid)
        if claim.complete:
            assert snap.state == "cancelling" and cancel.outcome == "requested"
        else:
            assert snap.state == "cancelled" and snap.attempt == 0


async def test_eight_concurrent_writers_leave_dense_gap_free_sequences(engine: Engine) -> None:
    xid = await bring_to(engine, "running")

    async def writer(n: int) -> None:
        for i in range(20):
            line = encode({"stream": "handler", "message": f"w{n} {i}"})
            await engine.store.append(xid, [("execution.log", line)] * 3)

    await asyncio.gather(*(writer(n) for n in range(8)))
    history = await engine.events(xid)
    seqs = [e.sequence for e in history.events]
    assert seqs == list(range(1, 3 + 8 * 20 * 3 + 1))
    per_writer: dict[str, list[int]] = {}
    for event in history.events[3:]:
        who, i = event.data.message.split()  # type: ignore[union-attr]
        per_writer.setdefault(who, []).append(int(i))
    assert all(order == sorted(order) for order in per_writer.values())


async def test_the_501st_event_drops_the_1st_and_pages_say_truncated(engine: Engine) -> None:
    xid = await bring_to(engine, "running")  # 3 events
    await engine.store.append(xid, [LOG] * 497)  # 500 events
    page = await engine.events(xid)
    assert [e.sequence for e in page.events] == list(range(1, 501)) and not page.truncated
    await engine.store.append(xid, [LOG])  # the 501st
    assert await engine.redis.xlen(engine.store.keys.events(xid)) == 500
    page = await engine.events(xid)
    assert page.events[0].sequence == 2 and page.events[-1].sequence == 501
    assert page.truncated and not page.more and page.last_sequence == 501
    assert not (await engine.events(xid, after=1)).truncated
    snap = await engine.get(xid)
    # event_count counts every event ever appended, retained or not (SPEC: the snapshot).
    assert snap.events_truncated and snap.event_count == 501 and snap.last_sequence == 501


async def test_paging_by_cursor_walks_every_retained_event_once(engine: Engine) -> None:
    xid = await bring_to(engine, "running")
    await engine.store.append(xid, [LOG] * 200)
    seen, after, pages = [], 0, 0
    while True:
        page = await engine.events(xid, after=after, limit=64)
        seen += [e.sequence for e in page.events]
        after = page.last_sequence
        pages += 1
        if not page.more:
            break
    assert seen == list(range(1, 204)) and pages == 4
    empty = await engine.events(xid, after=500)
    assert empty.events == [] and empty.last_sequence == 500 and not empty.more
    assert (await engine.events(xid, after=0, limit=0)).more
    assert len((await engine.events(xid, limit=10_000)).events) == 203  # clamped to 500


async def test_a_page_as_stored_passes_the_stored_events_through_and_says_what_the_typed_one_says(
    engine: Engine,
) -> None:
    xid = await bring_to(engine, "running")
    await engine.store.append(xid, [LOG] * 3 + [EVENT_FOR["succeeded"]])
    stored_entries = await engine.redis.xrange(engine.store.keys.events(xid))
    stored = await engine.stored_events(xid, after=1)
    assert [bytes(e) for e in stored.events] == [f[b"e"] for _, f in stored_entries[1:]]
    typed = await engine.events(xid, after=1)
    assert msgspec.json.decode(msgspec.json.encode(stored)) == msgspec.to_builtins(typed)
    # The capability: typed for whoever wants values (MCP, the CLI), as stored for a caller
    # that only encodes the answer (the HTTP route).
    assert await engine.invoke("executions.events", {"id": xid, "after": 1}) == typed
    called = await engine.call("executions.events", {"id": xid, "after": 1}, typed=False)
    assert called.output == stored
    empty = await engine.stored_events(xid, after=99)
    assert (empty.events, empty.last_sequence) == ([], 99)


async def test_an_unknown_or_malformed_execution_is_typed(engine: Engine) -> None:
    with pytest.raises(MajordomusError) as info:
        await engine.get("x-20260908T010203Z-0a1b2c3d")
    assert info.value.code == "not_found"
    with pytest.raises(MajordomusError) as info:
        await engine.events("nope")
    assert info.value.code == "invalid_input"


async def test_a_refused_start_creates_nothing(engine: Engine) -> None:
    for cap, raw, code in [
        ("no.such", {}, "not_found"),
        ("executions.demonstrate", {"steps": "many"}, "invalid_input"),
        ("executions.get", {"id": "x"}, "refused"),
    ]:
        with pytest.raises(MajordomusError) as info:
            await engine.start(cap, raw)
        assert info.value.code == code
    assert await engine.redis.dbsize() == 0


async def test_a_start_answers_the_queued_snapshot_and_two_events(engine: Engine) -> None:
    snap = await engine.start("executions.demonstrate", {"steps": 2}, actor="cli")
    assert snap.state == "queued" and snap.last_sequence == 2 and snap.actor == "cli"
    assert snap.links.events.endswith(f"?id={snap.id}")
    history = await engine.events(snap.id)
    created, queued_event = history.events
    assert created.data.capability == "executions.demonstrate"  # type: ignore[union-attr]
    assert queued_event.data.ahead == 0  # type: ignore[union-attr]
    second = await engine.start("tests.noop", {})
    assert (await engine.events(second.id)).events[1].data.ahead == 1  # type: ignore[union-attr]
    assert msgspec.json.decode(msgspec.json.encode(await engine.get(snap.id)))["state"] == "queued"


async def test_an_end_or_a_claim_by_append_clears_the_queue_entries_append_names_itself(
    engine: Engine,
) -> None:
    """append.lua is not sent idx:queued, the queue and the delayed set (a worker's end never
    needs them): it names them from the partition's base. An end of a queued execution, ready
    or due later, and a claim by append leave no entry behind in any of them."""
    part = engine.store.keys.partitions[0]
    ready = await queued(engine)
    later = (await engine.start("tests.noop", {}, options=StartOptions(start_at_ms=int(time.time() * 1000) + 60_000))).id
    claimed = await queued(engine)
    assert await engine.redis.zscore(part.queue, ready) is not None
    assert await engine.redis.zscore(part.delayed, later) is not None
    for xid in (ready, later):
        assert (await engine.store.append(xid, [EVENT_FOR["cancelled"]])).complete
    assert (await engine.store.append(claimed, [EVENT_FOR["running"]], worker="w1")).complete
    for xid in (ready, later, claimed):
        for index in (part.queue, part.delayed, part.queued):
            assert await engine.redis.zscore(index, xid) is None, (xid, index)
    assert await engine.redis.zscore(part.running, claimed) is not None
    assert await engine.redis.sismember(part.worker_running("w1"), claimed)
    assert {m.decode() for m in await engine.redis.zrange(part.finished, 0, -1)} == {ready, later}


async def test_the_unredacted_input_is_only_in_the_worker_key(engine: Engine) -> None:
    raw = {"user": "ada", "token": "t0ps3cret", "tokens": ["t0ps3cret"]}
    snap = await engine.start("tests.login", raw)
    assert snap.input["token"] == "«redacted»"
    keys = engine.store.keys
    dump = []
    for key in await engine.redis.keys("*"):
        kind = (await engine.redis.type(key)).decode()
        if key.decode() == keys.secret_input(snap.id):
            assert b"t0ps3cret" in await engine.redis.get(key)
            continue
        if kind == "string":
            dump.append(await engine.redis.get(key))
        elif kind == "hash":
            dump.append(json.dumps({k.decode(): v.decode() for k, v in (await engine.redis.hgetall(key)).items()}).encode())
        elif kind == "stream":
            dump.append(repr(await engine.redis.xrange(key)).encode())
    assert dump and not any(b"t0ps3cret" in d for d in dump)  # arq's job included


async def test_listing_is_newest_first_with_filters(engine: Engine) -> None:
    a = await engine.start("tests.noop", {})
    b = await engine.start("executions.demonstrate", {})
    c = await bring_to(engine, "failed")
    listed = await engine.list()
    assert [s.id for s in listed.executions] == [c, b.id, a.id]
    assert listed.count == 3 and listed.queued == 2 and listed.active == 2
    assert [s.id for s in (await engine.list(state="failed")).executions] == [c]
    only_demo = await engine.list(capability="executions.demonstrate")
    assert [s.id for s in only_demo.executions] == [b.id]
    assert (await engine.list(limit=1)).count == 1


async def test_pages_by_the_last_id_seen_miss_nothing_and_repeat_nothing(engine: Engine) -> None:
    started = [(await engine.start("tests.noop", {})).id for _ in range(250)]
    newest_first = started[::-1]
    first = await engine.list(limit=100)
    assert [s.id for s in first.executions] == newest_first[:100]
    late = (await engine.start("tests.noop", {})).id  # created between two pages
    seen = [s.id for s in first.executions]
    while True:
        page = await engine.list(limit=100, before=seen[-1])
        if not page.executions:
            break
        seen += [s.id for s in page.executions]
    assert seen == newest_first and late not in seen  # beyond the 200 of one answer
    noop = await engine.list(capability="tests.noop", limit=5, before=newest_first[10])
    assert [s.id for s in noop.executions] == newest_first[11:16]
    with pytest.raises(MajordomusError) as gone:
        await engine.list(before="x-20200101T000000Z-00000000")
    assert gone.value.code == "not_found"
    with pytest.raises(MajordomusError) as bad:
        await engine.list(before="nope")
    assert bad.value.code == "invalid_input"


async def test_retention_keeps_the_newest_finished_and_never_an_active_one(
    redis: object, settings: object
) -> None:
    from majordomus.registry import REGISTRY

    cfg = msgspec.structs.replace(settings, retain_executions=2)  # type: ignore[type-var]
    engine = Engine(redis, REGISTRY, cfg)  # type: ignore[arg-type]
    active = await queued(engine)
    done = []
    for _ in range(4):
        done.append(await bring_to(engine, "succeeded"))
        await asyncio.sleep(0.005)  # distinct finish times, so "oldest" is well defined
    assert await engine.store.prune() == 2
    kept = {s.id for s in (await engine.list()).executions}
    assert kept == {active, done[2], done[3]}
    finished_ttl = await engine.redis.ttl(engine.store.keys.snapshot(done[3]))
    assert 0 < finished_ttl <= cfg.retain_seconds
    assert await engine.redis.ttl(engine.store.keys.snapshot(active)) == -1


async def test_a_snapshot_keeps_the_first_200_steps_and_counts_the_rest(engine: Engine) -> None:
    xid = await bring_to(engine, "running")
    for i in range(250):
        name = f'{{"name":"s{i}","title":"Step {i}"}}'.encode()
        done = f'{{"name":"s{i}","ok":true}}'.encode()
        await engine.store.append(
            xid, [("execution.step.started", name), ("execution.step.completed", done)]
        )
    snap = await engine.get(xid)
    assert len(snap.steps) == LIMITS.steps == 200
    assert snap.steps[-1].name == "s199" and snap.steps[-1].state == "completed"
    assert snap.steps_dropped == 50
    assert snap.event_count == snap.last_sequence == 3 + 500


async def test_a_start_that_draws_a_taken_id_draws_another_and_the_taken_one_is_untouched(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ids carry 32 random bits a second: thousands of starts a second meet now and then,
    # even within one millisecond (which is no sign of the same call sent again).
    instant = now_stamp()
    monkeypatch.setattr("majordomus.store.executions.now_stamp", lambda: instant)
    taken = await queued(engine)
    fresh = "x-20261204T000000Z-0000abcd"
    draws = iter([taken, taken, fresh])
    monkeypatch.setattr(engine.store, "new_id", lambda **_: next(draws))
    started = await engine.start("tests.noop", {})
    assert started.id == fresh and started.state == "queued"
    snapshot = await engine.store.snapshot(taken)
    assert snapshot is not None and snapshot[b"state"] == b"queued" and snapshot[b"last_seq"] == b"2"
    monkeypatch.setattr(engine.store, "new_id", lambda **_: taken)
    with pytest.raises(IdTaken):  # never a second execution under one id
        await engine.start("tests.noop", {})
