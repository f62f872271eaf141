"""The "Testing your capabilities" tutorial's example (docs/tutorial/testing.md), run as a
user's suite runs it: the tutorials' `greetings.py` and `test_greetings.py` in an empty folder, `python -m pytest`
there, the kit's fixture coming from the installed plugin alone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.examples import marked_block

pytestmark = [pytest.mark.process]


@pytest.mark.usefixtures("spawns")
def test_the_readme_test_of_greetings_passes_in_a_suite_of_its_own(tmp_path: Path) -> None:
    (tmp_path / "greetings.py").write_text(marked_block("greetings.py"))
    (tmp_path / "test_greetings.py").write_text(marked_block("test_greetings.py"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAJORDOMUS_")}
    env["PYTHONPATH"] = str(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_greetings.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 passed" in done.stdout, done.stdout
    assert "majordomus.testing: 3 environments on in-process fakeredis" in done.stdout, done.stdout
