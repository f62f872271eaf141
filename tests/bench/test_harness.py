"""The benchmark harness runs, so it cannot rot: a `--quick` smoke run of every scenario
against the suite's real Redis, and the figures and table it prints.

This checks that each scenario measures majordomus and its baseline and reports a finite
figure for both; it never checks how fast anything is (benchmarks say that, not tests).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from bench.__main__ import SCENARIOS, markdown
from bench.harness import Row, percentile
from bench.peers import NOT_RUN
from tests.conftest import ROOT


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


def test_the_quick_run_measures_every_scenario_beside_its_baseline(
    redis_url: str, tmp_path: Path
) -> None:
    out = tmp_path / "rows.json"
    table = tmp_path / "table.md"
    run = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--redis-url", redis_url,
         "--json", str(out), "--markdown", str(table)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    rows = json.loads(out.read_text())
    scenarios = {r["scenario"] for r in rows}
    # The peers run from venvs that only a full run installs; without them the quick run
    # says so rather than passing silently.
    expected = set(SCENARIOS) - ({"peers"} if NOT_RUN in table.read_text() else set())
    assert scenarios == expected, f"scenarios without figures: {expected - scenarios}"
    for r in rows:
        assert math.isfinite(r["ours"]) and r["ours"] >= 0, r
    for name in expected:
        with_baseline = [r for r in rows if r["scenario"] == name and r["baseline"] is not None]
        assert with_baseline, f"{name} printed no baseline figure"
        assert all(math.isfinite(r["baseline"]) and r["baseline"] >= 0 for r in with_baseline)
    assert "quick (smoke) run" in table.read_text()
