"""Schemathesis with every check over `/openapi.json`, as a user would run it: the CLI,
against a real API process and a worker over a real socket, on one fixed seed, with the
repository's `schemathesis.toml`. Generated requests, fitting the document and not, find no
5xx, no answer that breaks the document, no request outside it that is accepted, and none
it describes that is refused for its shape: the schema is what is accepted
(`executions.start`'s input per capability, `schedules.create`'s cron and time zone, no
operation that needs an MCP connection). The server runs the built-ins on a Redis of its
own, so the schedules and executions the fuzzer makes reach no other test."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from majordomus.local.embedded import EmbeddedRedis
from tests.api.conftest import ApiProcess, WorkerChild
from tests.conftest import ROOT

SEEDS = [int(seed) for seed in os.environ.get("MAJORDOMUS_SCHEMATHESIS_SEEDS", "36").split(",")]
"""One seed in the suite; `MAJORDOMUS_SCHEMATHESIS_SEEDS=36,7,2026` runs each (as a release
check does)."""
EXAMPLES = 25
"""Per operation and phase: about 4,000 requests, well under a minute on two cores."""

BOUNDS = """
# Only for the test's time, beside the repository's settings: the long polls and the
# demonstration's steps kept short, so no request holds the run for seconds.
[[operations]]
include-operation-id = "executions.wait"
parameters = { "query.timeout_ms" = 50 }

[[operations]]
include-operation-id = "executions.demonstrate"
parameters = { "query.fail_at" = 1000, "query.delay_ms" = 5, "header.Prefer" = "wait=1" }
"""


@pytest.fixture(scope="module")
def api_server(spawns: None) -> Iterator[ApiProcess]:
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


def config_for_the_test() -> Path:
    """The repository's `schemathesis.toml`, its `executions.demonstrate` entry replaced by
    the test's bounds (one entry per operation: schemathesis takes the first that matches)."""
    text = (ROOT / "schemathesis.toml").read_text()
    kept = text.split("[[operations]]", 1)[0]
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write(kept + BOUNDS)
    return Path(f.name)


@pytest.mark.parametrize("seed", SEEDS)
def test_schemathesis_with_every_check_finds_nothing(api_server: ApiProcess, seed: int) -> None:
    config = config_for_the_test()
    cli = Path(sys.executable).with_name("schemathesis")
    try:
        run = subprocess.run(
            [
                str(cli),
                "--config-file",
                str(config),
                "--no-color",
                "run",
                f"{api_server.url}/openapi.json",
                "--checks",
                "all",
                "--seed",
                str(seed),
                "--max-examples",
                str(EXAMPLES),
                "--workers",
                "2",
            ],
            cwd=ROOT,
            env={**os.environ, "SCHEMATHESIS_HOOKS": ""},
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        config.unlink()
    said = run.stdout + run.stderr
    print(said[-700:])  # shown with -s: the figures a note about a run quotes
    assert run.returncode == 0, said[-6000:]
    assert "Selected: " in said and "passed" in said, said[-3000:]
    assert "/api/v1/episodes/attach" not in said  # needs an MCP connection: not published
