"""`majordomus run` follows a retry chain to its last attempt: a failed attempt that was
retried is said in one line, and the run goes on with the next, exiting as the chain ends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.retries.conftest import Stack, attempts_in
from tests.retries.workload import FLAKY


@pytest.mark.usefixtures("spawns")
def test_run_follows_the_chain_to_the_attempt_that_succeeds(stack: Stack, marker: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAJORDOMUS_")}
    env["PYTHONPATH"] = str(ROOT)
    given = json.dumps({"marker": str(marker), "fail_times": 1})
    done = subprocess.run(
        [sys.executable, "-m", "majordomus.cli", "run", FLAKY, "--input", given,
         "--api", stack.api.url, "--format", "json"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    final = json.loads(done.stdout)
    assert (final["state"], final["attempt"]) == ("succeeded", 2)
    assert "retry_of" in final
    assert f"retried as {final['id']}" in done.stderr
    assert len(attempts_in(marker)) == 2
