"""Schemathesis over `/openapi.json`: generated requests for every operation, fitting the
document and not, find no 5xx, no response that breaks the document (status, content type,
schema) and no request outside it that is accepted. The server runs the
built-in capabilities and a worker on a Redis of their own, so nothing the fuzzer starts
reaches another test."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import positive_data_acceptance
from schemathesis.generation import GenerationMode

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


def test_generated_requests_find_no_server_error_and_no_schema_violation(
    fuzzed_api: ApiProcess,
) -> None:
    schema = schemathesis.openapi.from_url(fuzzed_api.url + "/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {op.label for op in operations} >= {
        "POST /api/v1/executions/start",
        "GET /api/v1/executions/events",
        "GET /api/v1/executions/wait",
    }
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
            # A request that fits the schema may still name an execution or capability that
            # does not exist (404) or an id of the wrong shape (400): those are answers the
            # document lists, so "valid input must be accepted" does not apply.
            case.call_and_validate(excluded_checks=[positive_data_acceptance])

        exercise()
