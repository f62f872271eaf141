"""The quick loop (`-m "not slow"`) holds no test that starts a child process: such a test
is slow by the fixtures it uses (`spawns`, asked for by every fixture that starts one), and
one that starts a child without it fails (tests/conftest.py)."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
from typing import Any

import pytest

import tests.conftest as suite


def test_a_quick_test_is_watched_for_children() -> None:
    assert suite._unsaid_children == []


@pytest.mark.usefixtures("spawns")
def test_a_test_that_says_it_spawns_is_process_and_slow(request: Any) -> None:
    assert request.node.get_closest_marker("process") is not None
    assert request.node.get_closest_marker("slow") is not None
    assert suite._unsaid_children is None  # not watched: it may start children


def test_every_way_to_start_a_child_is_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    monkeypatch.setattr(suite, "_unsaid_children", seen)
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    child = multiprocessing.get_context("fork").Process(target=int, name="probe")
    child.start()
    child.join(10)
    assert seen[0] == f"{sys.executable} -c pass"
    assert seen[1] == "multiprocessing probe"
    with pytest.raises(pytest.fail.Exception, match="started 2 child process"):
        suite._children_said()
    seen.clear()  # what this test started is said: it does not fail at its teardown
