"""Debounce and throttle (`majordomus.flow`, issue 35 point 3): the starts of one key within
a window collapse into one execution. Throttle: the window's first start runs, with its
input, and every other start of the window answers it. Debounce: one execution runs once
the key has been quiet for the window, with the last start's input. Every start's answer is
the execution that carries it, which counts the collapsed ones; keys are independent; on
several partitions a key's executions share one."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from typing import Any

import msgspec
import pytest

from majordomus.builtins.capabilities import view_of
from majordomus.declarations import declaration_of, published
from majordomus.docs import how_it_runs
from majordomus.engine import Engine
from majordomus.errors import MajordomusError
from majordomus.flow import REPLACED_CODE, Debounce, PerKey, Throttle
from majordomus.model import ExecutionSnapshot
from majordomus.registry import REGISTRY, Registry, RegistryError, capability
from majordomus.schemas import Secret
from majordomus.start_options import StartOptions
from tests.capabilities import Slept
from tests.conftest import make_settings, running_worker, until, wait_for_workers

THROTTLED, DEBOUNCED = "tests.throttled", "tests.debounced"


def _ms(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000


async def executions_of(engine: Engine, capability: str) -> list[ExecutionSnapshot]:
    """Every execution of a capability, oldest first."""
    ids = [i for i, _ in await engine.store.ids_newest_first(1000)]
    snaps = [await engine.get(i) for i in reversed(ids)]
    return [s for s in snaps if s.capability == capability]


async def finished(engine: Engine, execution_id: str) -> ExecutionSnapshot:
    async def ended() -> ExecutionSnapshot | None:
        snap = await engine.get(execution_id)
        return snap if snap.state in ("succeeded", "failed", "cancelled") else None

    snap: ExecutionSnapshot = await until(ended, timeout=20)
    return snap


# -- declaration ---------------------------------------------------------------------------


class In(msgspec.Struct):
    tenant: str
    secret: Secret = ""
    seconds: float = 1.0


@pytest.mark.parametrize(
    ("collapse", "says"),
    [
        (Debounce("customer", 1.0), "not a member of its input"),
        (Throttle("secret", 1.0), "sensitive"),
        (Debounce("seconds", 1.0), "must be a string, an integer or a boolean"),
        (Throttle("tenant", 0), "at least 0.001"),
        (Debounce("tenant", float("inf")), "at least 0.001"),
        (Throttle("tenant", True), "must be a number"),  # type: ignore[arg-type]
        (PerKey("tenant", 1), "must be a Debounce"),
    ],
)
def test_a_collapse_declared_wrongly_is_refused_at_declaration(collapse: Any, says: str) -> None:
    with pytest.raises(RegistryError, match=says):
        capability("t.collapsed", input=In, output=Slept, collapse=collapse, registry=Registry())(
            lambda ctx, inp: Slept(0)
        )


def test_a_collapse_names_the_member_the_limits_per_key_name() -> None:
    class Two(msgspec.Struct):
        tenant: str
        region: str

    with pytest.raises(RegistryError, match="one member"):
        capability(
            "t.two",
            input=Two,
            output=Slept,
            per_key=PerKey("region", 1),
            collapse=Throttle("tenant", 1.0),
            registry=Registry(),
        )(lambda ctx, inp: Slept(0))
    capability(
        "t.one",
        input=Two,
        output=Slept,
        per_key=PerKey("tenant", 1),
        collapse=Throttle("tenant", 1.0),
        registry=Registry(),
    )(lambda ctx, inp: Slept(0))


def test_a_collapse_is_declared_once_and_shown_on_every_surface() -> None:
    for cap_id, kind in ((THROTTLED, "throttle"), (DEBOUNCED, "debounce")):
        cap = REGISTRY.require(cap_id)
        view = view_of(cap).collapse
        assert view is not None and (view.kind, view.member) == (kind, "tenant")
        assert view.seconds == cap.collapse.seconds  # type: ignore[union-attr]
        assert f"{kind}d per `tenant`" in how_it_runs(cap)
        # A producer that does not import the module collapses its starts the same way.
        again = published(declaration_of(cap))
        assert again is not None and again.collapse == cap.collapse


# -- throttle -------------------------------------------------------------------------------


async def test_a_throttle_makes_one_execution_of_a_windows_starts_each_answered_with_it(
    engine: Engine,
) -> None:
    answers = await asyncio.gather(
        *(engine.start(THROTTLED, {"tenant": "acme", "n": n}) for n in range(20))
    )
    carrier = {a.id for a in answers}
    assert len(carrier) == 1
    # One start made it (its answer counts none collapsed); each other was told it was
    # collapsed (its answer counts it, and maybe others made meanwhile).
    assert sorted(a.collapsed > 0 for a in answers) == [False] + [True] * 19
    first = next(a for a in answers if a.collapsed == 0)
    snap = await engine.get(first.id)
    assert snap.collapsed == 19 and snap.input["n"] == first.input["n"]
    assert [s.id for s in await executions_of(engine, THROTTLED)] == [first.id]
    # Another key has a window of its own.
    other = await engine.start(THROTTLED, {"tenant": "globex"})
    assert other.id != first.id and other.collapsed == 0
    # Once the window is over, the next start of the key makes another.
    await asyncio.sleep(2.05)
    after = await engine.start(THROTTLED, {"tenant": "acme", "n": 99})
    assert after.id != first.id and after.collapsed == 0 and after.input["n"] == 99
    assert len(await executions_of(engine, THROTTLED)) == 3


async def test_an_idempotency_key_is_checked_before_the_window_then_held_by_its_execution(
    engine: Engine,
) -> None:
    first = await engine.start(THROTTLED, {"tenant": "acme", "n": 1})
    keyed = StartOptions(idempotency_key="k-1")
    collapsed = await engine.start(THROTTLED, {"tenant": "acme", "n": 2}, options=keyed)
    assert collapsed.id == first.id and collapsed.collapsed == 1
    # The same start again: its key answers it, and it is not counted twice.
    again = await engine.start(THROTTLED, {"tenant": "acme", "n": 2}, options=keyed)
    assert again.id == first.id and again.collapsed == 1
    # The key with another input is refused, as an idempotency key always is.
    with pytest.raises(MajordomusError) as refused:
        await engine.start(THROTTLED, {"tenant": "acme", "n": 3}, options=keyed)
    assert refused.value.code == "refused"


async def test_a_throttled_execution_runs_once_with_its_windows_first_input(
    engine: Engine, redis: Any, settings: Any
) -> None:
    answers = [await engine.start(THROTTLED, {"tenant": "acme", "n": n}) for n in range(5)]
    async with running_worker(redis, settings):
        snap = await finished(engine, answers[0].id)
        late = await engine.start(THROTTLED, {"tenant": "acme", "n": 9})
    assert snap.state == "succeeded" and snap.output == {"n": 0, "token": ""}
    # Still the window's, though it has run: a start answers it (ended) until the window ends.
    assert late.id == snap.id and late.state == "succeeded" and late.collapsed == 5


# -- debounce -------------------------------------------------------------------------------


async def test_a_debounce_runs_once_the_key_is_quiet_with_the_last_input(
    engine: Engine, redis: Any, settings: Any
) -> None:
    async with running_worker(redis, settings):
        answers: list[ExecutionSnapshot] = []
        for n in range(7):  # a start every 0.3 s for 2 s, on a 1 s window
            if n:
                await asyncio.sleep(0.3)
            last_ms = time.time() * 1000
            answers.append(
                await engine.start(DEBOUNCED, {"tenant": "acme", "n": n, "token": f"t{n}"})
            )
        carrier = answers[0].id
        assert {a.id for a in answers} == {carrier}
        assert [a.collapsed for a in answers] == list(range(7))
        assert all(a.state == "queued" for a in answers)
        # Each answer is due a window after its own start.
        dues = [_ms(a.due_at) for a in answers]  # type: ignore[arg-type]
        assert dues == sorted(dues) and dues[-1] >= last_ms + 1000 - 5
        snap = await finished(engine, carrier)
    assert snap.state == "succeeded" and snap.output == {"n": 6, "token": "t6"}
    # It started after the quiet window that followed the last start, and ran once.
    assert _ms(snap.started_at) >= last_ms + 1000 - 5  # type: ignore[arg-type]
    assert [s.id for s in await executions_of(engine, DEBOUNCED)] == [carrier]
    # The snapshot shows the last input, its secret redacted as always, and the history says
    # each replacement.
    assert snap.input == {"tenant": "acme", "n": 6, "token": "«redacted»"}
    replaced = [d for d in snap.diagnostics if d.code == REPLACED_CODE]
    assert len(replaced) == 6 and "carries 7 starts" in replaced[-1].summary
    assert snap.collapsed == 6
    # Found by its last input's searchable member, no longer by its first's.
    found = await engine.store.ids_newest_first(10, search=[(DEBOUNCED, "n", "6")])
    assert [i for i, _ in found] == [carrier]
    assert await engine.store.ids_newest_first(10, search=[(DEBOUNCED, "n", "0")]) == []


async def test_a_start_after_a_debounced_execution_began_opens_a_new_window(
    engine: Engine, redis: Any, settings: Any
) -> None:
    first = await engine.start(DEBOUNCED, {"tenant": "acme", "n": 1})
    async with running_worker(redis, settings):
        snap = await finished(engine, first.id)
        second = await engine.start(DEBOUNCED, {"tenant": "acme", "n": 2})
        assert second.id != first.id and second.collapsed == 0
        done = await finished(engine, second.id)
    assert snap.output == {"n": 1, "token": ""} and done.output == {"n": 2, "token": ""}


async def test_a_cancelled_debounced_execution_leaves_its_key_a_new_window(engine: Engine) -> None:
    first = await engine.start(DEBOUNCED, {"tenant": "acme", "n": 1})
    await engine.cancel(first.id)
    second = await engine.start(DEBOUNCED, {"tenant": "acme", "n": 2})
    assert second.id != first.id and second.state == "queued"


async def test_debounced_keys_are_independent(engine: Engine, redis: Any, settings: Any) -> None:
    answers = {
        tenant: [await engine.start(DEBOUNCED, {"tenant": tenant, "n": n}) for n in range(3)]
        for tenant in ("acme", "globex", "initech")
    }
    carriers = {tenant: {a.id for a in got} for tenant, got in answers.items()}
    assert all(len(ids) == 1 for ids in carriers.values())
    assert len(set.union(*carriers.values())) == 3
    async with running_worker(redis, settings):
        for ids in carriers.values():
            snap = await finished(engine, next(iter(ids)))
            assert snap.output == {"n": 2, "token": ""} and snap.collapsed == 2


# -- several partitions, real worker processes --------------------------------------------


async def test_on_several_partitions_a_keys_executions_share_its_partition(
    redis: Any, redis_url: str
) -> None:
    settings = make_settings(redis_url, partitions=3)
    engine = Engine(redis, REGISTRY, settings)
    keys = engine.store.keys
    tenants = [f"tenant-{i}" for i in range(6)]
    throttled = {
        t: [await engine.start(THROTTLED, {"tenant": t, "n": n}) for n in range(4)] for t in tenants
    }
    debounced = {
        t: [await engine.start(DEBOUNCED, {"tenant": t, "n": n}) for n in range(4)] for t in tenants
    }
    for cap_id, answers in ((THROTTLED, throttled), (DEBOUNCED, debounced)):
        for tenant, got in answers.items():
            assert len({a.id for a in got}) == 1
            assert keys.partition_of(got[0].id) is keys.partition_of_collapse(cap_id, tenant)
    # The keys spread over the partitions.
    assert len({keys.partition_of(got[0].id).index for got in throttled.values()}) > 1
    async with running_worker(redis, settings):
        for tenant in tenants:
            assert (await finished(engine, throttled[tenant][0].id)).output["n"] == 0
            assert (await finished(engine, debounced[tenant][0].id)).output["n"] == 3


async def test_real_workers_run_each_window_once(
    engine: Engine, redis: Any, worker_process: Any
) -> None:
    worker_process()
    worker_process()
    await wait_for_workers(redis, 2)
    tenants = ("acme", "globex")
    starts = [
        engine.start(cap_id, {"tenant": tenant, "n": n})
        for n in range(10)
        for tenant in tenants
        for cap_id in (THROTTLED, DEBOUNCED)
    ]
    answers = await asyncio.gather(*starts)
    by_key: dict[tuple[str, str], set[str]] = {}
    for a in answers:
        by_key.setdefault((a.capability, a.input["tenant"]), set()).add(a.id)
    assert all(len(ids) == 1 for ids in by_key.values()) and len(by_key) == 4
    for ids in by_key.values():
        snap = await finished(engine, next(iter(ids)))
        assert snap.state == "succeeded" and snap.collapsed == 9
        assert snap.output == {"n": snap.input["n"], "token": ""}
    assert len(await executions_of(engine, THROTTLED)) == 2
    assert len(await executions_of(engine, DEBOUNCED)) == 2
