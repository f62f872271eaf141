"""The peers scenario's pure parts: the line protocol its side scripts speak, the gate, and
how its figures become rows beside the best peer. Nothing here installs a venv, starts a
peer or reaches the network (the quick run does what can run here, `test_harness`)."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import pytest

from bench import peers
from bench.peers import wire


def test_a_side_line_is_read_as_its_object_and_anything_else_is_skipped() -> None:
    assert wire.parse(b'{"done": 3, "last": 1.5}\n') == {"done": 3, "last": 1.5}
    assert wire.parse('  {"loaded": true}  ') == {"loaded": True}
    assert wire.parse("[2026-12-01][taskiq][INFO] listening") is None
    assert wire.parse("{not json") is None
    assert wire.parse(b"") is None


async def test_a_producer_says_it_loaded_waits_for_the_gate_then_says_its_span(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    gate = tmp_path / "gate"
    monkeypatch.setenv(wire.GATE_ENV, str(gate))
    enqueued: list[int] = []

    async def enqueue() -> None:
        enqueued.append(1)

    producing = asyncio.create_task(wire.produce(50, enqueue, tasks=4))
    await asyncio.sleep(0.05)  # time passes: the gate holds it
    assert not enqueued, "it enqueued before the gate opened"
    gate.touch()
    await asyncio.wait_for(producing, 5)

    lines = [wire.parse(line) for line in capsys.readouterr().out.splitlines()]
    assert lines[0] == {"loaded": True}
    closing = lines[-1]
    assert closing is not None and closing["enqueued"] == 50 == len(enqueued)
    assert closing["t1"] >= closing["t0"]


async def test_pickup_latencies_skip_the_warm_up_jobs_and_are_in_milliseconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(wire, "PICKUP_GAP", (0.0, 0.0))
    calls: list[int] = []

    async def started_of_one() -> float:
        calls.append(1)
        return wire.time.time() + 0.002

    found = await wire.pickup_latencies(4, 7, started_of_one)
    assert len(calls) == 4 + wire.PICKUP_WARM
    assert len(found) == 4
    assert all(1.5 < v < 50 for v in found), found


def test_a_worker_reports_its_tally_as_one_json_line(capsys: pytest.CaptureFixture[str]) -> None:
    tally = wire.Tally()
    tally.finish()
    tally.finish()
    wire.say(done=tally.done, last=tally.last)
    line = json.loads(capsys.readouterr().out)
    assert line["done"] == 2 and line["last"] > 0


def test_rates_and_the_best_peer_ignore_what_was_not_measured() -> None:
    assert wire.rate(1000, 10.0, 12.0) == 500
    assert math.isnan(wire.rate(10, 5.0, 5.0))
    values = {"a": 100.0, "b": 300.0, "c": float("nan")}
    assert wire.best(values, higher_is_better=True) == "b"
    assert wire.best(values, higher_is_better=False) == "a"
    assert wire.best({"c": float("nan")}, higher_is_better=True) is None


def test_each_figure_is_a_row_per_peer_with_the_best_peer_marked() -> None:
    figures = {
        peers.OURS: {peers.DRAIN_1.name: 900.0, peers.PICKUP_50.name: 2.0},
        "SAQ": {peers.DRAIN_1.name: 1200.0, peers.PICKUP_50.name: 4.0},
        "arq": {peers.DRAIN_1.name: 800.0, peers.PICKUP_50.name: float("nan")},
    }
    rows = peers.rows_of(figures)
    drain = {r.baseline_name: r for r in rows if r.metric == peers.DRAIN_1.name}
    assert set(drain) == {"SAQ (best peer)", "arq"}
    assert drain["SAQ (best peer)"].ratio == pytest.approx(0.75)
    assert drain["arq"].ratio == pytest.approx(1.125)
    pickup = [r for r in rows if r.metric == peers.PICKUP_50.name]
    assert [(r.baseline_name, r.higher_is_better) for r in pickup] == [("SAQ (best peer)", False)]
    assert all(r.scenario == "peers" for r in rows)


def test_a_venv_counts_as_installed_only_with_exactly_its_pins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(peers, "VENVS", tmp_path)
    peer = peers.Peer("saq", "SAQ", ("saq[redis]==0.26.4",))
    assert not peers.installed(peer)
    (peer.venv / "bin").mkdir(parents=True)
    peer.python.touch()
    (peer.venv / peers.PINS_FILE).write_text(json.dumps(["saq[redis]==0.25.0"]))
    assert not peers.installed(peer)
    (peer.venv / peers.PINS_FILE).write_text(json.dumps(list(peer.pins)))
    assert peers.installed(peer)


def test_every_peer_has_its_side_script() -> None:
    for peer in peers.PEERS:
        assert peer.script.exists(), peer.script
    assert (peers.HERE / "majordomus_side.py").exists()


def test_every_side_leads_a_round_in_turn_and_a_figure_is_its_rounds_median() -> None:
    sides = ["ours", "arq", "saq"]
    orders = [peers.rotated(sides, turn) for turn in range(3)]  # type: ignore[arg-type]
    assert orders == [["ours", "arq", "saq"], ["arq", "saq", "ours"], ["saq", "ours", "arq"]]
    assert {order[0] for order in orders} == set(sides)
    rounds = [
        {peers.DRAIN_1.name: 900.0, peers.PICKUP_50.name: float("nan")},
        {peers.DRAIN_1.name: 3000.0, peers.PICKUP_50.name: 2.0},
        {peers.DRAIN_1.name: 1000.0, peers.PICKUP_50.name: 4.0},
    ]
    median = peers.medians(rounds)
    assert median[peers.DRAIN_1.name] == 1000.0  # one slow minute does not move it
    assert median[peers.PICKUP_50.name] == 3.0  # a round without the figure is left out
    assert math.isnan(peers.medians([{peers.PICKUP_50.name: float("nan")}])[peers.PICKUP_50.name])
