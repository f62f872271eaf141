"""Finding executions (issue 36, point 4): a search by the value of an input member its
capability declares searchable, read from an index the start writes (never a scan), kept
within the retention; a time range; sorting by creation, duration and state; the count of
a filter. Real Redis; the executions that must end run on a real in-process worker.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

import msgspec
import pytest

from majordomus.engine import Engine
from majordomus.errors import MajordomusError
from majordomus.matching import Match
from majordomus.registry import REGISTRY, Registry, RegistryError, capability
from majordomus.schemas import Secret
from majordomus.start_options import StartOptions
from majordomus.store.keys import slot_of
from tests.conftest import builtins_only, make_settings, running_worker
from tests.majordomus.test_partitions import SlotSpy


def _now_ms() -> int:
    return int(datetime.now().timestamp() * 1000)


LATER = StartOptions(start_at_ms=_now_ms() + 3_600_000)
"""Due in an hour: the execution stays queued, with no worker needed."""


async def _orders(engine: Engine, *customers: str, **input: Any) -> list[str]:
    ids = []
    for customer in customers:
        snap = await engine.start("tests.order", {"customer": customer, **input}, options=LATER)
        ids.append(snap.id)
        await asyncio.sleep(
            0.002
        )  # a millisecond of its own: newest first is exact across partitions
    return ids


def _ids(listed: Any) -> list[str]:
    return [x.id for x in listed.executions]


async def test_a_search_finds_the_executions_of_a_members_value_from_its_index(
    engine: Engine, redis: Any
) -> None:
    acme = await _orders(engine, "acme", "acme")
    globex = await _orders(engine, "globex")
    acme += await _orders(engine, "acme", quantity=3, rush=True)
    await engine.start("tests.noop", {}, options=LATER)

    found = await engine.list(match=Match(capability="tests.order", search="customer=acme"))
    assert _ids(found) == acme[::-1]  # newest first
    assert (
        _ids(await engine.list(match=Match(capability="tests.order", search="customer=globex")))
        == globex
    )
    assert (
        _ids(await engine.list(match=Match(capability="tests.order", search="customer=nobody")))
        == []
    )
    # An integer and a boolean member, by their text.
    assert _ids(await engine.list(match=Match(capability="tests.order", search="quantity=3"))) == [
        acme[-1]
    ]
    assert _ids(await engine.list(match=Match(capability="tests.order", search="rush=true"))) == [
        acme[-1]
    ]
    assert (
        len(_ids(await engine.list(match=Match(capability="tests.order", search="rush=false"))))
        == 3
    )

    # The index is what is read: with every execution gone from the list of all of them,
    # the search still finds its own.
    part = engine.store.keys.partitions[0]
    await redis.delete(part.all)
    assert _ids(await engine.list()) == []
    assert (
        _ids(await engine.list(match=Match(capability="tests.order", search="customer=acme")))
        == acme[::-1]
    )

    # The search combines with the other filters.
    assert await engine.count(
        Match(capability="tests.order", search="customer=acme", state="queued")
    ) == (await engine.count(Match(capability="tests.order", search="customer=acme")))


class _Invoice(msgspec.Struct):
    customer: str
    amount: int = 0


async def test_a_search_without_a_capability_reads_every_capability_declaring_the_member(
    redis: Any, settings: Any
) -> None:
    registry = builtins_only()
    registry.add(REGISTRY.require("tests.order"))

    @capability(
        "t.invoice", input=_Invoice, output=_Invoice, searchable=("customer",), registry=registry
    )
    async def invoice(ctx: Any, inp: _Invoice) -> _Invoice:
        return inp

    engine = Engine(redis, registry, settings)
    order = await engine.start("tests.order", {"customer": "acme"}, options=LATER)
    await asyncio.sleep(0.002)
    bill = await engine.start("t.invoice", {"customer": "acme", "amount": 5}, options=LATER)
    await engine.start("t.invoice", {"customer": "globex"}, options=LATER)
    assert _ids(await engine.list(match=Match(search="customer=acme"))) == [bill.id, order.id]
    assert _ids(await engine.list(match=Match(capability="t.invoice", search="customer=acme"))) == [
        bill.id
    ]
    assert (await engine.count(Match(search="customer=acme"))).matching == 2


async def test_a_search_by_a_member_no_capability_indexes_is_not_found(engine: Engine) -> None:
    await _orders(engine, "acme")
    with pytest.raises(MajordomusError) as undeclared:
        await engine.list(match=Match(capability="tests.order", search="note=x"))
    assert undeclared.value.code == "not_found"
    assert "customer, quantity, rush" in undeclared.value.message
    with pytest.raises(MajordomusError) as nowhere:
        await engine.list(match=Match(search="note=x"))
    assert nowhere.value.code == "not_found"
    with pytest.raises(MajordomusError) as shapeless:
        await engine.list(match=Match(capability="tests.order", search="customer"))
    assert shapeless.value.code == "invalid_input"
    with pytest.raises(MajordomusError) as unknown:
        await engine.list(match=Match(capability="tests.nothing", search="a=b"))
    assert unknown.value.code == "not_found"


class _Form(msgspec.Struct):
    name: str
    token: Secret = ""
    tags: list[str] = []
    ratio: float = 0.5


@pytest.mark.parametrize(
    ("member", "why"),
    [
        ("token", "sensitive"),
        ("tags", "must be a string"),
        ("ratio", "must be a string"),
        ("nope", "not a member"),
    ],
)
def test_a_declaration_refuses_a_searchable_member_that_cannot_be_indexed(
    member: str, why: str
) -> None:
    with pytest.raises(RegistryError, match=why):

        @capability("t.form", input=_Form, output=_Form, searchable=(member,), registry=Registry())
        async def form(ctx: Any, inp: _Form) -> _Form:
            return inp


def test_the_searchable_members_are_shown_with_the_capability() -> None:
    from majordomus.builtins.capabilities import view_of
    from majordomus.declarations import declaration_of, published

    cap = REGISTRY.require("tests.order")
    assert view_of(cap).searchable == ["customer", "quantity", "rush"]
    again = published(declaration_of(cap))
    assert again is not None and again.searchable == cap.searchable


async def test_a_long_value_is_indexed_under_its_hash_and_found_by_it(
    engine: Engine, redis: Any
) -> None:
    long = "a" * 500
    [made] = await _orders(engine, long)
    assert _ids(
        await engine.list(match=Match(capability="tests.order", search="customer=" + long))
    ) == [made]
    names = [k.decode() async for k in redis.scan_iter(match="*idx:in:*")]
    assert len(names) == 3 and all(len(n) < 150 for n in names)


async def test_an_execution_leaves_the_search_index_with_the_retention(
    redis: Any, redis_url: str
) -> None:
    settings = make_settings(redis_url, retain_seconds=1)
    engine = Engine(redis, REGISTRY, settings)
    async with running_worker(redis, settings):
        snap = await engine.start("tests.order", {"customer": "acme"})
        assert (await engine.wait(snap.id, timeout_ms=20_000)).state == "succeeded"
    assert [k async for k in redis.scan_iter(match="*idx:in:*")]
    await asyncio.sleep(1.1)
    assert await engine.store.prune() == 1
    assert [k async for k in redis.scan_iter(match="*idx:in*")] == []


async def test_search_indexes_are_written_in_the_executions_slot_and_merged_across_partitions(
    redis: Any, redis_url: str
) -> None:
    spy = SlotSpy(redis)
    try:
        engine = Engine(redis, REGISTRY, make_settings(redis_url, partitions=3))
        keys = engine.store.keys
        acme = await _orders(engine, *["acme"] * 12)
        for _ in range(100):  # an id picks its partition at random: one more until all three
            if {keys.partition_of(i).index for i in acme} == {0, 1, 2}:
                break
            acme += await _orders(engine, "acme")
        assert {keys.partition_of(i).index for i in acme} == {0, 1, 2}
        await _orders(engine, *["globex"] * 3)
        found = await engine.list(
            match=Match(capability="tests.order", search="customer=acme"), limit=5
        )
        assert _ids(found) == acme[::-1][:5]
        older = await engine.list(
            match=Match(capability="tests.order", search="customer=acme"),
            before=found.executions[-1].id,
        )
        assert _ids(older) == acme[::-1][5:]
        assert (
            await engine.count(Match(capability="tests.order", search="customer=globex"))
        ).matching == 3
        for name in [k.decode() async for k in redis.scan_iter(match="*idx:in:*")]:
            assert slot_of(name) in {slot_of(p.tag) for p in keys.partitions}
        assert spy.calls and spy.crossing() == []
    finally:
        redis.evalsha = spy.original


async def test_a_time_range_is_a_range_of_the_order_of_creation(engine: Engine) -> None:
    made = []
    for _ in range(6):
        made.append(await engine.start("tests.noop", {}, options=LATER))
        await asyncio.sleep(0.003)  # a millisecond of its own each
    moments = [datetime.fromisoformat(x.created_at.replace("Z", "+00:00")) for x in made]
    between = Match(created_after=moments[1], created_before=moments[4])
    assert _ids(await engine.list(match=between)) == [made[3].id, made[2].id, made[1].id]
    assert _ids(await engine.list(match=Match(created_after=moments[4]))) == [
        made[5].id,
        made[4].id,
    ]
    assert _ids(await engine.list(match=Match(created_before=moments[1]))) == [made[0].id]
    assert (await engine.count(between)).matching == 3
    # Oldest first: the same executions the other way round.
    assert _ids(await engine.list(match=between, order="asc")) == [
        made[1].id,
        made[2].id,
        made[3].id,
    ]


async def test_a_list_sorts_by_duration_and_by_state(
    engine: Engine, redis: Any, settings: Any
) -> None:
    async with running_worker(redis, settings):
        runs = [await engine.start("tests.sleepy", {"seconds": s}) for s in (0.05, 0.4, 0.2)]
        failed = await engine.start("tests.boom", {})
        for x in [*runs, failed]:
            await engine.wait(x.id, timeout_ms=20_000)
        queued = await engine.start("tests.noop", {}, options=LATER)
        cancelled = await engine.start("tests.noop", {}, options=LATER)
        await engine.cancel(cancelled.id)
        longest = await engine.list(match=Match(capability="tests.sleepy"), sort="duration")
        assert _ids(longest) == [runs[1].id, runs[2].id, runs[0].id]
        durations = [x.duration_ms for x in longest.executions]
        assert durations == sorted(durations, reverse=True)
        shortest = await engine.list(
            match=Match(capability="tests.sleepy"), sort="duration", order="asc"
        )
        assert _ids(shortest) == [runs[0].id, runs[2].id, runs[1].id]
        # Without a duration yet (queued), last either way.
        assert _ids(await engine.list(sort="duration"))[-1] == queued.id
        assert _ids(await engine.list(sort="duration", order="asc"))[-1] == queued.id
        by_state = await engine.list(sort="state", order="asc")
        states = [x.state for x in by_state.executions]
        assert states == ["queued", "succeeded", "succeeded", "succeeded", "failed", "cancelled"]
        assert [x.state for x in (await engine.list(sort="state")).executions] == states[::-1]
        assert (await engine.list(sort="state", limit=2)).count == 2


async def test_a_count_says_what_each_bulk_action_would_act_on(
    engine: Engine, redis: Any, settings: Any
) -> None:
    async with running_worker(redis, settings):
        done = [await engine.start("tests.noop", {}) for _ in range(2)]
        boom = [await engine.start("tests.boom", {}) for _ in range(3)]
        for x in [*done, *boom]:
            await engine.wait(x.id, timeout_ms=20_000)
    waiting = [await engine.start("tests.noop", {}, options=LATER) for _ in range(4)]
    await engine.cancel(waiting[0].id)
    counted = await engine.count(Match())
    assert (counted.matching, counted.cancellable, counted.retryable) == (9, 3, 4)
    assert (await engine.count(Match(state="failed"))).retryable == 3
    assert (await engine.count(Match(capability="tests.noop", state="queued"))).cancellable == 3
