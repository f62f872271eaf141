"""`majordomus.Client` and `SyncClient` straight to Redis: typed starts from a declaration,
starts by id from the declarations the workers publish, outcomes, errors, cancels and
following, against the suite's real Redis and an in-process worker."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest

from majordomus import Client, Execution, MajordomusError, Pending, SyncClient
from majordomus.client.transports import RedisTransport
from majordomus.engine import Engine
from majordomus.model import ExecutionEvent, event_type_of
from majordomus.registry import REGISTRY
from tests.capabilities import (
    Count,
    Counted,
    Credentials,
    Done,
    Echo,
    Empty,
    Sleep,
    boom,
    login,
    noop,
    plain,
    refuse,
    sleepy,
)
from tests.conftest import builtins_only, until


@pytest.fixture
async def client(engine: Engine) -> Any:
    async with Client.from_engine(engine) as c:
        yield c


@pytest.fixture
async def producer(redis: Any, settings: Any) -> Any:
    """A client of a process that imports none of the suite's capabilities: it knows them
    only by what the workers publish."""
    transport = RedisTransport(Engine(redis, builtins_only(), settings), "Redis (a producer)")
    transport.owns_engine = False
    async with Client(transport=transport) as c:
        yield c


async def test_a_declaration_starts_and_answers_its_declared_output_type(
    client: Client, worker: Any
) -> None:
    execution = await noop.start(client, Empty())
    assert isinstance(execution, Execution)
    assert execution.snapshot.state == "queued" and execution.snapshot.capability == "tests.noop"
    output = await execution.result(timeout=10)
    assert output == Done(ok=True) and isinstance(output, Done)
    assert (await client.call(plain, Count(events=3), timeout=10)) == Counted(3)
    assert (await plain.call(client, Count(events=2))) == Counted(2)


async def test_a_capability_started_by_id_answers_plain_json(client: Client, worker: Any) -> None:
    execution = await client.start("tests.plain", {"events": 2})
    assert await execution.result(timeout=10) == {"events": 2}
    assert await client.call("tests.noop") == {"ok": True}


async def test_a_failure_raises_its_error_with_the_execution_as_correlation_id(
    client: Client, worker: Any
) -> None:
    execution = await boom.start(client, Empty())
    with pytest.raises(MajordomusError) as failed:
        await execution.result(timeout=10)
    assert failed.value.code == "internal" and failed.value.correlation_id == execution.id
    assert failed.value.message.endswith("ValueError: secret internals that must not leak")
    with pytest.raises(MajordomusError) as refused:
        await refuse.call(client, Empty(), timeout=10)
    assert (refused.value.code, refused.value.suggestion) == ("refused", "try tomorrow")
    assert "not today" in refused.value.message


async def test_a_bad_input_is_invalid_input_and_creates_nothing(client: Client) -> None:
    with pytest.raises(MajordomusError) as bad:
        await client.start("tests.plain", {"events": "many"})
    assert bad.value.code == "invalid_input" and "/events" in bad.value.message
    with pytest.raises(MajordomusError) as unknown:
        await client.start("tests.nothing", {})
    assert unknown.value.code == "not_found"
    assert (await client.list()).count == 0


async def test_start_options_reach_the_execution(client: Client) -> None:
    later = await client.start(
        "tests.noop", {}, delay=timedelta(hours=1), priority="high", idempotency_key="k-1"
    )
    snap = later.snapshot
    assert snap.priority == "high" and snap.idempotency_key == "k-1"
    due = datetime.fromisoformat(str(snap.due_at).replace("Z", "+00:00"))
    assert timedelta(minutes=59) < due - datetime.now(UTC) <= timedelta(hours=1)
    again = await client.start(
        "tests.noop", {}, delay=timedelta(hours=1), priority="high", idempotency_key="k-1"
    )
    assert again.id == later.id  # a start sent again with its key answers the first
    at = datetime.now(UTC) + timedelta(days=1)
    assert (await client.start("tests.noop", {}, start_at=at)).snapshot.due_at
    with pytest.raises(MajordomusError) as naive:
        await client.start("tests.noop", {}, start_at=datetime.now())
    assert naive.value.code == "invalid_input"


async def test_a_cancel_ends_it_and_its_result_raises_cancelled(
    client: Client, worker: Any
) -> None:
    execution = await sleepy.start(client, Sleep(seconds=30))
    await until(lambda: _running(client, execution.id))
    answer = await execution.cancel()
    assert answer.outcome == "requested"
    with pytest.raises(MajordomusError) as cancelled:
        await execution.result(timeout=10)
    assert cancelled.value.code == "cancelled"
    assert (await client.get(execution.id)).state == "cancelled"


async def _running(client: Client, execution_id: str) -> bool:
    return (await client.get(execution_id)).state == "running"


async def test_a_bounded_wait_on_a_running_execution_is_pending_not_a_failure(
    client: Client, worker: Any
) -> None:
    execution = await sleepy.start(client, Sleep(seconds=30))
    with pytest.raises(Pending) as pending:
        await execution.result(timeout=0.3)
    assert pending.value.execution.id == execution.id
    assert pending.value.execution.state not in ("failed", "cancelled", "succeeded")
    assert (await client.wait(execution.id, timeout=0.2)).state in ("queued", "running")
    await execution.cancel()


async def test_following_yields_every_event_once_in_order_and_resumes_from_a_cursor(
    client: Client, worker: Any
) -> None:
    execution = await client.start("tests.plain", {"events": 5})
    seen = [m async for m in execution.follow() if isinstance(m, ExecutionEvent)]
    sequences = [e.sequence for e in seen]
    assert sequences == list(range(1, len(seen) + 1))
    assert event_type_of(seen[-1]) == "execution.completed"
    logs = [e.data.message for e in seen if event_type_of(e) == "execution.log"]
    assert logs == [f"line {i}" for i in range(5)]
    resumed = [m async for m in client.follow(execution.id, after=3)]
    assert [e.sequence for e in resumed if isinstance(e, ExecutionEvent)] == sequences[3:]
    page = await execution.events(after=0, limit=2)
    assert [e.sequence for e in page.events] == [1, 2] and page.more


async def test_a_producer_without_the_module_starts_by_id_as_the_api_would(
    client: Client, producer: Client, worker: Any
) -> None:
    """The workers published the declarations; a start by id is validated (the schema's
    problems, worded as the API words them), its defaults filled and its secrets redacted
    as a start by a process that imports the capability."""
    given = {"user": "ada", "token": "s3cret-token", "tokens": ["abc-secret"]}
    await until(lambda: _published(producer, "tests.login"))
    by_id = await producer.start("tests.login", given)
    typed = await login.start(client, msgspec.convert(given, Credentials))
    assert by_id.snapshot.input == typed.snapshot.input
    assert by_id.snapshot.input["token"] == "«redacted»"
    assert by_id.snapshot.input["password"] == "not-a-secret-by-name"  # a default, filled
    assert (by_id.snapshot.title, by_id.snapshot.cancellable) == (
        typed.snapshot.title, typed.snapshot.cancellable,
    )
    assert await by_id.result(timeout=10) == msgspec.to_builtins(Echo("ada", 12))
    refusals = []
    for c in (client, producer):
        with pytest.raises(MajordomusError) as bad:
            await c.start("tests.login", {"user": 5, "token": "s3cret-token"})
        refusals.append((bad.value.code, bad.value.message))
    assert refusals[0] == refusals[1] and refusals[0][0] == "invalid_input"
    assert "s3cret-token" not in refusals[0][1]


async def _published(client: Client, cap_id: str) -> bool:
    transport = client.transport
    assert isinstance(transport, RedisTransport)
    return await transport.engine.declarations.read(cap_id) is not None


async def test_a_capability_no_worker_published_is_not_found(producer: Client) -> None:
    with pytest.raises(MajordomusError) as unknown:
        await producer.start("tests.plain", {})
    assert unknown.value.code == "not_found" and "MAJORDOMUS_CAPABILITIES" in str(
        unknown.value.suggestion
    )


async def test_redis_unreachable_is_unavailable(settings: Any) -> None:
    async with Client("redis://127.0.0.1:1/0", settings=settings) as c:
        with pytest.raises(MajordomusError) as away:
            await c.start("tests.noop", {})
    assert away.value.code == "unavailable" and "127.0.0.1:1" in away.value.message


async def test_the_sync_client_is_the_same_interface_without_await(
    redis_url: str, worker: Any
) -> None:
    def django_view() -> tuple[Any, ...]:
        with SyncClient(redis_url) as c:
            execution = noop.start(c, Empty())
            done = execution.result(timeout=10)
            counted = c.call(plain, Count(events=2), timeout=10)
            events = [event_type_of(m) for m in c.follow(execution.id)]
            snap = c.get(execution.id)
            with pytest.raises(MajordomusError) as failed:
                boom.call(c, Empty(), timeout=10)
            return done, counted, events, snap.state, failed.value.code

    # The worker runs on this test's loop, so the synchronous code runs in a thread.
    done, counted, events, state, code = await asyncio.to_thread(django_view)
    assert done == Done() and counted == Counted(2) and state == "succeeded"
    assert events[0] == "execution.created" and events[-1] == "execution.completed"
    assert code == "internal"


def test_the_registry_keeps_the_handler_and_the_declaration_stays_callable() -> None:
    cap = REGISTRY.require("tests.noop")
    assert cap.handler is noop.handler and noop.capability is cap
    assert noop.__name__ == "noop" and noop.__doc__ == noop.handler.__doc__
    assert noop.id == "tests.noop" and noop.output_type is Done


async def test_a_unit_test_calls_the_declaration_as_its_handler() -> None:
    class Silent:
        def log(self, line: str) -> None:
            self.lines = [*getattr(self, "lines", []), line]

    ctx = Silent()
    assert plain(ctx, Count(events=2)) == Counted(2)
    assert ctx.lines == ["line 0", "line 1"]
    assert await noop(ctx, Empty()) == Done()
