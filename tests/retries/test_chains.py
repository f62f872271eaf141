"""Retry chains on real workers: each attempt an execution of its own, linked both ways,
the history saying what happened, the chain's last one carrying the outcome."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from majordomus.engine import Engine
from majordomus.errors import MajordomusError
from majordomus.retries import RETRY_EXHAUSTED, RETRY_SCHEDULED
from tests.retries.conftest import attempts_in, chain_of, history
from tests.retries.workload import FLAKY, PATIENT

pytestmark = [pytest.mark.slow, pytest.mark.process]


def at(stamp: Any) -> datetime:
    assert isinstance(stamp, str), stamp
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


async def test_a_chain_of_three_with_backoff_is_linked_both_ways_and_its_history_says_so(
    engine: Engine, http: httpx.Client, marker: Path
) -> None:
    first = await engine.start(
        FLAKY, {"marker": str(marker), "fail_times": 2, "token": "s3cr3t-token"}, actor="cli"
    )
    chain = await chain_of(engine, first.id)

    assert [s.state for s in chain] == ["failed", "failed", "succeeded"]
    assert [s.attempt for s in chain] == [1, 2, 3]
    assert chain[-1].output == {"attempts": 3}
    a, b, c = chain
    assert (a.retried_as, b.retry_of, b.retried_as, c.retry_of) == (b.id, a.id, c.id, b.id)
    assert not isinstance(a.retry_of, str) and not isinstance(c.retried_as, str)
    assert {s.actor for s in chain} == {"cli"}
    assert isinstance(b.due_at, str) and isinstance(c.due_at, str)
    # Each retry was due its delay (200 ms, then 400 ms) after the attempt before it had
    # started at least, and started no earlier than due.
    for before, retry, delay in ((a, b, 200), (b, c, 400)):
        assert isinstance(before.started_at, str) and isinstance(retry.started_at, str)
        due = at(retry.due_at)
        assert due >= at(before.started_at) + timedelta(milliseconds=delay)
        assert at(retry.started_at) >= due
    # Every attempt ran with the whole input, secret and all; none shows it.
    assert [line[1] for line in attempts_in(marker)] == ["s3cr3t-token"] * 3
    assert all(s.input["token"] != "s3cr3t-token" for s in chain)

    for attempt, (snap, delay) in enumerate(zip(chain[:2], (200, 400), strict=True), start=1):
        events = history(http, snap.id)
        types = [e["type"] for e in events]
        assert types[-2:] == ["execution.diagnostic", "execution.failed"], types
        diag = events[-2]["data"]
        assert diag["code"] == RETRY_SCHEDULED and diag["severity"] == "info"
        assert chain[attempt].id in diag["summary"]
        assert f"attempt {attempt + 1} of 3" in diag["summary"]
        assert f"in {delay} ms" in diag["summary"]
        assert events[-1]["data"]["error"]["code"] == "internal"  # its own error, unchanged
    got = http.get("/api/v1/executions/get", params={"id": a.id}).json()
    assert got["retried_as"] == b.id and got["attempt"] == 1
    later = history(http, c.id)
    assert [e["type"] for e in later][:2] == ["execution.created", "execution.queued"]
    assert "due_at" in later[1]["data"]


def test_the_capabilitys_own_route_answers_the_final_output_of_its_chain(
    http: httpx.Client, marker: Path
) -> None:
    response = http.post("/api/v1/retries/flaky", json={"marker": str(marker), "fail_times": 2})
    assert response.status_code == 200, response.text
    assert response.json() == {"attempts": 3}
    last = http.get(
        "/api/v1/executions/get", params={"id": response.headers["Majordomus-Execution"]}
    ).json()
    assert last["state"] == "succeeded" and last["attempt"] == 3 and "retry_of" in last
    described = http.get("/api/v1/capability", params={"id": FLAKY}).json()
    assert described["retry"]["attempts"] == 3 and described["retry"]["retry_on"] == ["RuntimeError"]


@pytest.mark.parametrize("error", ["value", "refused"])
async def test_an_error_the_policy_does_not_name_is_not_retried(
    engine: Engine, marker: Path, error: str
) -> None:
    first = await engine.start(FLAKY, {"marker": str(marker), "fail_times": 1, "error": error})
    chain = await chain_of(engine, first.id)
    assert [s.state for s in chain] == ["failed"]
    assert not isinstance(chain[0].retried_as, str)
    assert not [d for d in chain[0].diagnostics if d.code.startswith("retry.")]
    assert len(attempts_in(marker)) == 1


async def test_one_of_our_codes_the_policy_names_is_retried(engine: Engine, marker: Path) -> None:
    first = await engine.start(
        FLAKY, {"marker": str(marker), "fail_times": 1, "error": "unavailable"}
    )
    chain = await chain_of(engine, first.id)
    assert [s.state for s in chain] == ["failed", "succeeded"]
    assert chain[0].error.code == "unavailable"  # type: ignore[union-attr]


async def test_a_chain_that_runs_out_ends_failed_and_its_call_raises_the_last_error(
    engine: Engine, marker: Path
) -> None:
    with pytest.raises(MajordomusError) as raised:
        await engine.call(FLAKY, {"marker": str(marker), "fail_times": 9}, wait_ms=20_000)
    last_id = raised.value.correlation_id
    assert raised.value.code == "internal" and last_id
    last = await engine.get(last_id)
    assert last.state == "failed" and last.attempt == 3
    assert not isinstance(last.retried_as, str)
    # What failed it (`execution.exception`: `RuntimeError: attempt 3 failed`), then why
    # nothing more runs.
    assert [d.code for d in last.diagnostics] == ["execution.exception", RETRY_EXHAUSTED]
    assert last.diagnostics[0].summary == "RuntimeError: attempt 3 failed"
    assert len(attempts_in(marker)) == 3
    # Back along the chain, every attempt failed and named the next.
    second = await engine.get(str(last.retry_of))
    first = await engine.get(str(second.retry_of))
    assert (first.attempt, second.attempt) == (1, 2)
    assert not isinstance(first.retry_of, str)


async def test_a_cancel_during_the_backoff_ends_the_chain_and_holds_no_worker(
    engine: Engine, http: httpx.Client, marker: Path
) -> None:
    first = await engine.start(PATIENT, {"marker": str(marker)})
    failed = await engine.wait(first.id, 10_000)
    assert failed.state == "failed" and isinstance(failed.retried_as, str)
    waiting = await engine.get(failed.retried_as)
    assert waiting.state == "queued" and isinstance(waiting.due_at, str)
    assert "in 60000 ms" in failed.diagnostics[-1].summary

    # The worker runs one execution at a time, and the waiting retry is not it.
    other = await engine.call("tests.noop", {}, wait_ms=10_000)
    assert other.output is not None and not other.pending

    # A cancel of the failed first attempt goes to the chain's live one.
    answer = http.post("/api/v1/executions/cancel", json={"id": first.id})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["outcome"] == "requested"
    assert body["execution"]["id"] == waiting.id and body["execution"]["state"] == "cancelled"
    assert body["execution"]["retry_of"] == first.id
    again = http.post("/api/v1/executions/cancel", json={"id": first.id}).json()
    assert again["outcome"] == "already_finished" and again["execution"]["id"] == waiting.id
    await asyncio.sleep(0.5)  # time passes: a run that should not happen would show
    assert len(attempts_in(marker)) == 1  # nothing ran after the first attempt
    assert (await engine.get(waiting.id)).attempt == 1  # its one attempt before, never its own
