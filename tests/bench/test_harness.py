"""The benchmark harness runs, so it cannot rot: a `--quick` smoke run of every scenario
against the suite's real Redis, and the figures and table it prints.

This checks that each scenario measures majordomus and its baseline and reports a finite
figure for both; it never checks how fast anything is (benchmarks say that, not tests).
"""

from __future__ import annotations

import contextlib
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from bench.__main__ import SCENARIOS, markdown
from bench.harness import Row, percentile
from bench.peers import NOT_RUN
from majordomus.local.embedded import EmbeddedRedis
from tests.conftest import ROOT

pytestmark = pytest.mark.usefixtures("spawns")  # it starts child processes of its own


def test_percentiles_interpolate_between_closest_ranks() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == pytest.approx(50.5)
    assert percentile(values, 99) == pytest.approx(99.01)
    assert percentile([7.0], 99) == 7.0
    assert math.isnan(percentile([], 50))


def test_a_row_reports_its_ratio_and_the_table_says_when_a_goal_is_missed() -> None:
    rows = [
        Row("pickup", "p99", 30.0, "ms", baseline=10.0, baseline_name="arq", goal="< 25 ms", met=False),
        Row("memory", "RSS at start", 80.0, "MiB"),
    ]
    assert rows[0].ratio == pytest.approx(3.0)
    assert rows[1].ratio is None
    text = markdown(rows, "header")
    assert "| pickup | p99 | 30.0 ms | 10.0 ms | arq | 3.00x | < 25 ms | MISSED |" in text
    assert "| memory | RSS at start | 80.0 MiB | - | - | - | - |  |" in text


PARTS = (
    ("schedules", "console", "events", "peers", "sealing", "audience", "rollup"),
    ("over_time", "live", "cli", "pickup", "history", "client", "bulk"),
    ("throughput", "redis_cost", "mcp_tasks", "memory", "shards", "isolation", "flow"),
)
"""The quick run in three parts of about equal length (the schedules' ticks and the console's
browser wait more than they work), run at once, each on a redis-server of its own: the same
scenarios in a third of the wall time."""


def test_the_parts_of_the_quick_run_are_every_scenario_once() -> None:
    assert sorted(n for part in PARTS for n in part) == sorted(SCENARIOS)


def test_the_quick_run_measures_every_scenario_beside_its_baseline(tmp_path: Path) -> None:
    with contextlib.ExitStack() as servers:
        runs = []
        for index, part in enumerate(PARTS):
            server = servers.enter_context(EmbeddedRedis())
            runs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "bench", "--quick", "--only", ",".join(part),
                     "--redis-url", server.url, "--json", str(tmp_path / f"rows-{index}.json"),
                     "--markdown", str(tmp_path / f"table-{index}.md")],
                    cwd=ROOT,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )  # fmt: skip
            )
        outputs = [run.communicate(timeout=300)[0] for run in runs]
    for run, output in zip(runs, outputs, strict=True):
        assert run.returncode == 0, output[-6000:]
    rows = [r for i in range(len(PARTS)) for r in json.loads((tmp_path / f"rows-{i}.json").read_text())]
    tables = "".join((tmp_path / f"table-{i}.md").read_text() for i in range(len(PARTS)))
    scenarios = {r["scenario"] for r in rows}
    # The peers run from venvs that only a full run installs; without them the quick run
    # says so rather than passing silently.
    expected = set(SCENARIOS) - ({"peers"} if NOT_RUN in tables else set())
    assert scenarios == expected, f"scenarios without figures: {expected - scenarios}"
    for r in rows:
        assert math.isfinite(r["ours"]) and r["ours"] >= 0, r
    for name in expected:
        with_baseline = [r for r in rows if r["scenario"] == name and r["baseline"] is not None]
        assert with_baseline, f"{name} printed no baseline figure"
        assert all(math.isfinite(r["baseline"]) and r["baseline"] >= 0 for r in with_baseline)
    assert tables.count("quick (smoke) run") == len(PARTS)
