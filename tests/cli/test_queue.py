"""`majordomus queue` and `majordomus workers`: the backlog, what runs where, the workers and
their beats (a killed one marked silent), recent failures, live with `--watch`."""

from __future__ import annotations

import signal
import time
from typing import Any

from tests.cli.conftest import Cli


def until(probe: Any, timeout: float = 20, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s (last: {value!r})")
        time.sleep(interval)


def start(cli: Cli, capability: str, input: str) -> str:
    result = cli("run", capability, "--detach", "--input", input)
    assert result.exit_code == 0, result.output
    return str(result.stdout.strip())


def test_queue_shows_the_backlog_and_what_runs_on_which_worker_and_marks_a_killed_worker_silent(
    workers: Any, cli: Cli
) -> None:
    first, second = workers.start(2, MAJORDOMUS_MAX_JOBS="1")
    ids = [start(cli, "tests.sleepy", '{"seconds": 60}') for _ in range(5)]

    report = until(lambda: (r := cli.json("queue"))["running"] == 2 and r)
    assert report["queued"] == 3
    [group] = report["queued_by_capability"]
    assert group["capability"] == "tests.sleepy" and group["count"] == 3
    assert group["oldest"] == ids[2] and group["oldest_wait_seconds"] >= 0
    running = {r["id"]: r["worker"] for r in report["running_executions"]}
    assert set(running) == set(ids[:2])
    by_pid = {w["pid"]: w for w in report["workers"]}
    assert set(by_pid) == {first.pid, second.pid}
    assert all(not w["silent"] and w["running"] == 1 for w in report["workers"])
    assert set(running.values()) == {w["id"] for w in report["workers"]}

    text = cli("queue")
    assert text.exit_code == 0, text.output
    assert "3 queued, 2 running, 2 workers" in text.stdout
    for execution_id, worker_id in running.items():
        line = next(line for line in text.stdout.splitlines() if execution_id in line)
        assert worker_id in line and "running" in line and "tests.sleepy" in line

    # SIGKILL the worker running ids[0]: it stops beating, its lease lapses, it is silent;
    # the other worker's sweeper fails the execution it held as `unavailable`.
    victim = next(w for w in report["workers"] if w["id"] == running[ids[0]])
    process = first if victim["pid"] == first.pid else second
    process.send_signal(signal.SIGKILL)
    process.wait(10)
    report = until(
        lambda: (
            (r := cli.json("queue"))
            and any(w["silent"] for w in r["workers"])
            and r["recent_failures"]
            and r
        )
    )
    silent = {w["id"] for w in report["workers"] if w["silent"]}
    assert silent == {victim["id"]}
    [failure] = report["recent_failures"]
    assert failure["id"] == ids[0] and failure["code"] == "unavailable"

    text = cli("queue")
    victim_line = next(
        line for line in text.stdout.splitlines() if line.startswith(f"│ {victim['id']}")
    )
    assert "silent" in victim_line and str(victim["pid"]) in victim_line
    assert "recent failures" in text.stdout and "unavailable" in text.stdout
    assert "(1 silent)" in text.stdout

    table = cli("workers")
    assert table.exit_code == 0
    assert "silent" in table.stdout and victim["id"] in table.stdout
    assert [w["id"] for w in cli.json("workers")["workers"]] == [w["id"] for w in report["workers"]]


def test_queue_watch_redraws_live_until_ctrl_c(flushed: Any, terminal: Any, cli: Cli) -> None:
    term = terminal("queue", "--watch", "--interval", "0.2")
    term.read_until(lambda s: "nothing queued" in s and "no worker has reported" in s)
    # No worker runs: a start stays queued, and the next redraw shows it.
    start(cli, "tests.noop", "{}")
    term.read_until(lambda s: "1 queued" in s and "tests.noop" in s)
    term.interrupt()
    assert term.wait() == 0
    assert "Traceback" not in term.screen


def test_queue_json_is_one_report_of_every_section(flushed: Any, cli: Cli) -> None:
    report = cli.json("queue")
    assert set(report) == {
        "taken_at",
        "queued",
        "running",
        "queued_by_capability",
        "running_executions",
        "workers",
        "recent_failures",
        "lease_seconds",
    }
    assert report["queued"] == 0 and report["workers"] == [] and report["lease_seconds"] == 3


def test_queue_through_an_unreachable_api_is_one_line_and_unavailable(
    flushed: Any, cli: Cli
) -> None:
    result = cli("queue", "--api", "http://127.0.0.1:9")
    assert result.exit_code == 7
    assert result.stderr.count("\n") == 1
    assert "cannot reach the API at http://127.0.0.1:9" in result.stderr
