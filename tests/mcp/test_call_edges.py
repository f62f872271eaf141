"""Two edges of a tool call, through the official client against a real API process: its
progress notifications only ever grow (MCP requires it), in both protocol eras; and a call
whose execution outlasts `mcp_call_seconds` answers that it is still running, with its id,
before the client's own request timeout would cut it (here the bound is 1 s and the
client's timeout 5 s, for the 50 s and 60 s of a real deployment and the MCP Inspector).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any, cast

import msgspec
import pytest
from mcp import Client

from majordomus.api.mcp.server import ProgressForwarder
from majordomus.model import ExecutionEvent
from tests.conftest import _redis_url
from tests.mcp.conftest import MODES, ApiProcess, call, until_state
from tests.mcp.test_tasks import CreateTaskResult, start_task, tasks_client, until_done

DEMO = "majordomus_demonstrate_execution"
BOUND_S = 1.0
CLIENT_TIMEOUT_S = 5.0
"""The client's own request timeout in these tests: the bound's answer must come first."""

Note = tuple[float, float | None, str | None]


def strictly_increasing(values: list[float]) -> bool:
    return all(a < b for a, b in zip(values, values[1:], strict=False))


class Notes:
    """A `progress_callback` that keeps what it is sent."""

    def __init__(self) -> None:
        self.seen: list[Note] = []

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.seen.append((progress, total, message))

    @property
    def values(self) -> list[float]:
        return [p for p, _, _ in self.seen]


@pytest.fixture(scope="module")
def bounded_api() -> Iterator[ApiProcess]:
    """An API process whose tool calls wait at most `BOUND_S` for their execution."""
    api = ApiProcess(_redis_url(), MAJORDOMUS_MCP_CALL_SECONDS=f"{BOUND_S:g}")
    yield api
    api.stop()
    api.log.close()


# -- progress only grows ------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_a_calls_progress_notifications_only_grow_and_keep_the_executions_total(
    api: ApiProcess, worker: Any, mode: str
) -> None:
    notes = Notes()
    async with Client(api.url, mode=mode) as client:
        out = await call(
            client,
            DEMO,
            {"steps": 5, "delay_ms": 50, "log_lines": 3},
            progress_callback=notes,
        )
    assert out["steps"] == 5
    assert len(notes.seen) > 10, notes.seen  # the steps and log lines came, not only reports
    assert strictly_increasing(notes.values), notes.seen
    for step in range(1, 6):  # every report of the execution, as it made it
        assert (float(step), 5.0, f"{step}/5 step {step} of 5") in notes.seen
    assert any(m and m.startswith("log: step 4: line 3 of 3") for _, _, m in notes.seen)
    assert notes.seen[-1] == (5.5, None, "succeeded")  # the end, past the total, without it
    for progress, total, _ in notes.seen:
        assert total is None or progress <= total == 5.0


@pytest.mark.parametrize("mode", MODES)
async def test_following_an_execution_with_the_wait_tool_sends_growing_progress(
    api: ApiProcess, worker: Any, mode: str
) -> None:
    notes = Notes()
    async with Client(api.url, mode=mode) as client:
        started = await call(
            client,
            "majordomus_execution_start",
            {"capability": "executions.demonstrate", "input": {"steps": 4, "delay_ms": 100}},
        )
        done = await call(
            client,
            "majordomus_execution_wait",
            {"id": started["id"], "timeout_ms": 20_000},
            progress_callback=notes,
        )
    assert done["state"] == "succeeded"
    assert strictly_increasing(notes.values), notes.seen
    assert (4.0, 4.0, "4/4 step 4 of 4") in notes.seen


def event(sequence: int, type_: str, data: Any = None) -> ExecutionEvent:
    raw = {
        "type": type_,
        "schema_version": "1",
        "event_id": f"e{sequence}",
        "execution_id": "x",
        "sequence": sequence,
        "timestamp": "2026-01-01T00:00:00Z",
    }
    if data is not None:
        raw["data"] = data
    return msgspec.convert(raw, ExecutionEvent)  # type: ignore[arg-type]


async def test_a_report_that_goes_back_or_repeats_never_makes_progress_go_back() -> None:
    # A retried attempt starts its progress over, and a handler may report the same value
    # twice or pass its own total: the notifications still only grow.
    sent: list[Note] = []

    async def report_progress(progress: float, total: float | None, message: str | None) -> None:
        sent.append((progress, total, message))

    forward = ProgressForwarder(
        cast(Any, SimpleNamespace(session=SimpleNamespace(report_progress=report_progress)))
    )
    reports = [(1, 3), (1, 3), (2, 3), (1, 3), (3, 3), (4, 3), (1, 6), (5, 6)]
    for seq, (current, total) in enumerate(reports, start=1):
        await forward(event(seq, "execution.progress", {"current": current, "total": total}))
        await forward(event(100 + seq, "execution.log", {"stream": "handler", "message": "l"}))
    assert strictly_increasing([p for p, _, _ in sent]), sent
    # Each report that grows is sent as it was made, with its total unless it passes it.
    for shown in [(1.0, 3.0, "1/3"), (2.0, 3.0, "2/3"), (3.0, 3.0, "3/3"), (4.0, None, "4/3")]:
        assert shown in sent
    assert (5.0, 6.0, "5/6") in sent
    # One that went back, or repeated, is sent with its message just past the highest one.
    went_back = [(p, m) for p, _, m in sent if m in ("1/3", "1/6")]
    assert [m for _, m in went_back] == ["1/3", "1/3", "1/3", "1/6"]
    assert 1 < went_back[1][0] < 2 and 2 < went_back[2][0] < 3 and 4 < went_back[3][0] < 5
    # A total is never below the value it is sent with: past it, the value goes alone.
    assert all(total is None or p <= total for p, total, _ in sent)
    assert [m for _, _, m in sent].count("log: l") == len(reports)
    assert (3.5, None, "log: l") in sent


# -- a call that outlasts its bound -------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_a_call_outlasting_its_bound_answers_still_running_before_the_client_gives_up(
    bounded_api: ApiProcess, worker: Any, mode: str
) -> None:
    async with Client(bounded_api.url, mode=mode) as client:
        began = time.monotonic()
        result = await client.call_tool(
            DEMO,
            {"steps": 3, "delay_ms": 1000},
            read_timeout_seconds=CLIENT_TIMEOUT_S,  # the client's own timeout: never reached
        )
        # Answered (the client did not give up), saying its bound (below), not the output.
        print(f"answered after {time.monotonic() - began:.2f} s (bound {BOUND_S} s)")
        assert result.is_error and result.structured_content is None  # not its output
        meta = result.meta["majordomus"]  # type: ignore[index]
        execution = meta["execution"]
        assert execution["state"] in ("queued", "running")
        assert meta["error"]["code"] == "unavailable"
        assert meta["error"]["correlation_id"] == execution["id"]
        assert execution["links"]["live"] == f"/events?execution={execution['id']}"
        said = result.content[0].text  # type: ignore[union-attr]
        assert said.startswith(
            f"unavailable: executions.demonstrate is still {execution['state']} as "
            f"{execution['id']} after 1 s; it goes on"
        )
        told = result.content[1].text  # type: ignore[union-attr]
        assert f"{execution['id']} has not failed" in told
        assert "Do not call the tool again" in told and "majordomus_execution_wait" in told
        # It went on, and the id it gave is how to find its output.
        done = await until_state(client, execution["id"], {"succeeded", "failed", "cancelled"})
    assert done["state"] == "succeeded" and done["output"]["steps"] == 3


@pytest.mark.parametrize("mode", MODES)
async def test_the_wait_tool_waits_no_longer_than_a_calls_bound(
    bounded_api: ApiProcess, worker: Any, mode: str
) -> None:
    async with Client(bounded_api.url, mode=mode) as client:
        started = await call(
            client,
            "majordomus_execution_start",
            {"capability": "executions.demonstrate", "input": {"steps": 5, "delay_ms": 1000}},
        )
        for asked in ({"timeout_ms": 60_000}, {}):  # the bound, and the 30 s default
            began = time.monotonic()
            snap = await call(
                client,
                "majordomus_execution_wait",
                {"id": started["id"], **asked},
                read_timeout_seconds=CLIENT_TIMEOUT_S,
            )
            # Answered before the client gave up, the execution still going: a wait of the
            # time asked would have outlived the client's timeout.
            print(f"{asked}: answered after {time.monotonic() - began:.2f} s (bound {BOUND_S} s)")
            assert snap["state"] in ("queued", "running")
        quick = await call(
            client, "majordomus_execution_wait", {"id": started["id"], "timeout_ms": 0}
        )
        assert quick["id"] == started["id"]


async def test_a_client_of_the_tasks_extension_still_gets_a_task(
    bounded_api: ApiProcess, worker: Any
) -> None:
    async with tasks_client(bounded_api.url) as client:
        created = await start_task(client, DEMO, {"steps": 3, "delay_ms": 600})
        assert isinstance(created, CreateTaskResult) and created.status == "working"
        _, done = await until_done(client, created.task_id)
    assert done["status"] == "completed"
    result = done["result"]
    assert result["structuredContent"]["steps"] == 3
    assert json.loads(result["content"][0]["text"]) == result["structuredContent"]
