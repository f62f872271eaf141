"""The wire types against the original design's JSON Schemas, and the pure rules."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import msgspec
import pytest

from majordomus.errors import ExecutionError
from majordomus.ids import event_id, is_execution_id, new_execution_id, require_execution_id
from majordomus.model import (
    EVENT_TYPES,
    CancellingData,
    CompletedData,
    CreatedData,
    EventHistory,
    ExecutionCancelled,
    ExecutionCancelling,
    ExecutionCompleted,
    ExecutionCreated,
    ExecutionDiagnostic,
    ExecutionDiagnosticEvent,
    ExecutionFailed,
    ExecutionLog,
    ExecutionProgress,
    ExecutionQueued,
    ExecutionStarted,
    ExecutionStepCompleted,
    ExecutionStepStarted,
    FailedData,
    LogData,
    ProgressView,
    QueuedData,
    StepCompletedData,
    StepStartedData,
)
from majordomus.states import FINAL, STATES, TRANSITIONS, may_move_to

SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"
HISTORY = json.loads((SCHEMAS / "EventHistory.schema.json").read_text())
EVENT_SCHEMA = {"$ref": "#/$defs/ExecutionEvent", "$defs": HISTORY["$defs"]}

XID = "x-20260908T010203Z-0a1b2c3d"


def envelope(seq: int) -> dict[str, object]:
    return {
        "schema_version": "1",
        "event_id": event_id(XID, seq),
        "execution_id": XID,
        "sequence": seq,
        "timestamp": "2026-09-08T01:02:03.004Z",
    }


def every_event() -> list[object]:
    error = ExecutionError("internal", "it broke", XID, "look at the log")
    return [
        ExecutionCreated(**envelope(1), data=CreatedData("executions.demonstrate", "Demo", {"steps": 3})),
        ExecutionQueued(**envelope(2), data=QueuedData(0)),
        ExecutionStarted(**envelope(3)),
        ExecutionProgress(**envelope(4), data=ProgressView(1, 3, "one of three")),
        ExecutionProgress(**envelope(5), data=ProgressView(2)),
        ExecutionStepStarted(**envelope(6), data=StepStartedData("fetch", "Fetch it")),
        ExecutionStepCompleted(**envelope(7), data=StepCompletedData("fetch", True)),
        ExecutionStepCompleted(**envelope(8), data=StepCompletedData("fetch", False, "no")),
        ExecutionLog(**envelope(9), data=LogData("stderr", "a line")),
        ExecutionDiagnosticEvent(
            **envelope(10), data=ExecutionDiagnostic("warning", "w1", "look", None, "fix it")
        ),
        ExecutionCancelling(**envelope(11), data=CancellingData("http")),
        ExecutionCancelled(**envelope(12)),
        ExecutionCompleted(**envelope(13), data=CompletedData({"answer": 42})),
        ExecutionFailed(**envelope(14), data=FailedData(error)),
    ]


def test_every_event_type_validates_against_the_original_schema() -> None:
    validator = jsonschema.Draft202012Validator(EVENT_SCHEMA)
    seen = set()
    for event in every_event():
        doc = json.loads(msgspec.json.encode(event))
        validator.validate(doc)
        seen.add(doc["type"])
    assert seen == set(EVENT_TYPES)
    assert len(EVENT_TYPES) == 12


def test_a_whole_history_page_validates_against_the_root_schema() -> None:
    page = EventHistory(XID, "failed", every_event(), 14, False, True)  # type: ignore[arg-type]
    jsonschema.Draft202012Validator(HISTORY).validate(json.loads(msgspec.json.encode(page)))


def test_an_event_round_trips_through_the_tagged_union() -> None:
    from majordomus.model import event_decoder, event_type_of

    for event in every_event():
        back = event_decoder.decode(msgspec.json.encode(event))
        assert back == event
        assert event_type_of(back) == json.loads(msgspec.json.encode(event))["type"]


@pytest.mark.parametrize("current", STATES)
@pytest.mark.parametrize("target", STATES)
def test_the_table_of_moves_is_the_spec(current: str, target: str) -> None:
    allowed = {
        ("queued", "running"),
        ("queued", "cancelled"),
        ("queued", "failed"),
        ("running", "succeeded"),
        ("running", "failed"),
        ("running", "cancelling"),
        ("cancelling", "cancelled"),
        ("cancelling", "succeeded"),
        ("cancelling", "failed"),
    }
    assert may_move_to(current, target) == ((current, target) in allowed)


def test_a_final_state_has_no_move_at_all() -> None:
    for state in FINAL:
        assert TRANSITIONS[state] == frozenset()


def test_execution_ids_have_the_documented_shape_and_differ() -> None:
    ids = {new_execution_id() for _ in range(1000)}
    assert len(ids) == 1000
    assert all(is_execution_id(i) for i in ids)
    assert is_execution_id(XID)
    for bad in ["", "x-1", "X-20260908T010203Z-0a1b2c3d", "x-20260908T010203Z-0A1B2C3D", 7, None]:
        assert not is_execution_id(bad)


def test_a_malformed_id_is_refused_as_invalid_input_before_any_lookup() -> None:
    from majordomus.errors import MajordomusError

    with pytest.raises(MajordomusError) as info:
        require_execution_id("../../etc/passwd")
    assert info.value.code == "invalid_input"
    assert info.value.suggestion
