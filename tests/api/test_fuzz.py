"""Schemathesis over `/openapi.json`: generated requests for every operation, fitting the
document and not, find no 5xx, no response that breaks the document (status, content type,
schema), no request outside it that is accepted, and no request it accepts that the server
refuses for its shape (`400 invalid_input`, `413`): the schemas say exactly what the server
takes. The server runs the built-in capabilities and a worker on a Redis of their own, so
nothing the fuzzer starts reaches another test."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.config._checks import POSITIVE_DATA_ACCEPTANCE_EXPECTED_STATUSES
from schemathesis.generation import GenerationMode

from majordomus.registry import REGISTRY
from majordomus.store.embedded import EmbeddedRedis
from tests.api.conftest import ApiProcess, WorkerChild

EXAMPLES = 25
# Bounds on what a generated request may make the server wait for, so the run stays short.
WAIT_BOUNDS = {"delay_ms": 5, "timeout_ms": 50}


@pytest.fixture(scope="module")
def fuzzed_api() -> Iterator[ApiProcess]:
    with EmbeddedRedis() as redis_server:
        worker = WorkerChild(redis_server.url)
        server = ApiProcess(redis_server.url, MAJORDOMUS_CAPABILITIES="").start()
        try:
            with server.client() as client:
                for _ in range(300):  # ready once the worker beats
                    if client.get("/api/v1/ready").status_code == 200:
                        break
                    time.sleep(0.05)
            yield server
        finally:
            server.close()
            worker.stop()


def bounded(case: Any) -> None:
    if case.operation.label == "GET /api/v1/executions/demonstrate" and case.query:
        # `fail_at` asks the demonstration to fail unexpectedly, which is `internal` (500)
        # by design; that one is shown by test_http, not fuzzed.
        case.query.pop("fail_at", None)
    for part in (case.query, case.body):
        if isinstance(part, dict):
            for name, bound in WAIT_BOUNDS.items():
                if isinstance(part.get(name), int):
                    part[name] = min(part[name], bound)
    if isinstance(case.body, dict) and isinstance(case.body.get("input"), dict):
        bounded_input = case.body["input"]
        for name, bound in WAIT_BOUNDS.items():
            if isinstance(bounded_input.get(name), int):
                bounded_input[name] = min(bounded_input[name], bound)
    fitted_start(case)


def fitted_start(case: Any) -> None:
    """A request to start a capability the server has, fitting the document, is given an
    input that capability takes.

    The schema of `executions.start` says its `input` is an object; which object is the
    named capability's own input schema (`capabilities.describe`), checked when the start
    is, so an object the capability refuses is a 400 that no schema of `executions.start`
    alone could foresee. A negative case is left alone: it must still be refused.
    """
    body = case.body
    if case.operation.label != "POST /api/v1/executions/start" or not isinstance(body, dict):
        return
    if case.meta is None or not case.meta.generation.mode.is_positive:
        return
    cap = next((c for c in REGISTRY if c.id == body.get("capability")), None)
    given = body.get("input")
    if cap is not None and isinstance(given, dict):
        if not jsonschema.Draft202012Validator(cap.input_schema).is_valid(given):
            body["input"] = {}


ACCEPTED = [*POSITIVE_DATA_ACCEPTANCE_EXPECTED_STATUSES, "422"]
"""What a request that fits the document may be answered, beside a success: schemathesis's
own list (404 is an id or capability that does not exist, 5xx is another check's
business) and `422 refused`, which is understood and declined (`episodes.attach` over plain
HTTP, `executions.start` of a capability that answers directly), never a matter of shape.
`400` (`invalid_input`) and `413` stay failures."""


def test_generated_requests_find_no_server_error_and_no_schema_violation(
    fuzzed_api: ApiProcess,
) -> None:
    schema = schemathesis.openapi.from_url(fuzzed_api.url + "/openapi.json")
    schema.config.checks.positive_data_acceptance.expected_statuses = ACCEPTED
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {op.label for op in operations} >= {
        "POST /api/v1/executions/start",
        "GET /api/v1/executions/events",
        "GET /api/v1/executions/wait",
    }
    counted: Counter[str] = Counter()
    for operation in operations:

        @given(
            case=operation.as_strategy(GenerationMode.POSITIVE)
            | operation.as_strategy(GenerationMode.NEGATIVE)
        )
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def exercise(case: Any) -> None:
            bounded(case)
            counted[case.meta.generation.mode.value if case.meta else "unknown"] += 1
            # Every built-in check, `positive_data_acceptance` among them.
            case.call_and_validate()

        exercise()
    # Shown with `-s`: the figures a note about a run quotes.
    print(f"schemathesis: {len(operations)} operations, cases by mode {dict(counted)}")
    assert counted["positive"] > 0 and counted["negative"] > 0
