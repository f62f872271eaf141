"""`majordomus queue` and `majordomus workers` are capabilities like the others (`queue.show`,
`queue.workers`): run as child processes, with `MAJORDOMUS_API_URL` set they go through a
real `majordomus serve` and answer what they answer straight from Redis, a recent
cancellation listed among the failures by its code."""

from __future__ import annotations

import json
import signal
import subprocess
from typing import Any

import httpx

from tests.cli.conftest import Cli, child_env, majordomus_argv
from tests.cli.test_queue import start, until
from tests.conftest import ROOT

MOMENTARY = {
    "taken_at",
    "oldest_wait_seconds",
    "running_seconds",
    "seconds_since_beat",
    "last_beat",
}
"""Members that change from one reading to the next, whichever way it is read."""


def majordomus(redis_url: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`majordomus ARGS` as a child process, as a user types it, on the suite's Redis."""
    return subprocess.run(
        majordomus_argv(*args),
        cwd=ROOT,
        env=child_env(redis_url, COLUMNS="200", **env),
        capture_output=True,
        text=True,
        timeout=60,
    )


def report(redis_url: str, *args: str, **env: str) -> Any:
    done = majordomus(redis_url, *args, "--format", "json", **env)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return json.loads(done.stdout)


def steady(value: Any) -> Any:
    """A report without the members that change between two readings."""
    if isinstance(value, dict):
        return {k: steady(v) for k, v in value.items() if k not in MOMENTARY}
    if isinstance(value, list):
        return [steady(v) for v in value]
    return value


def test_queue_through_the_api_answers_as_redis_does_and_lists_a_recent_cancellation(
    workers: Any, cli: Cli, api_server: str, redis_url: str
) -> None:
    [worker] = workers.start(1, MAJORDOMUS_MAX_JOBS="1")
    running = start(cli, "tests.sleepy", '{"seconds": 60}')
    waiting = start(cli, "tests.sleepy", '{"seconds": 60}')
    cancelled = start(cli, "tests.sleepy", '{"seconds": 60}')
    assert cli.json("executions", "cancel", cancelled)["outcome"] == "requested"
    until(lambda: cli.json("executions", "show", running)["state"] == "running")

    direct = report(redis_url, "queue")
    through_env = report(redis_url, "queue", MAJORDOMUS_API_URL=api_server)
    through_flag = report(redis_url, "queue", "--api", api_server)
    route = httpx.get(f"{api_server}/api/v1/queue", timeout=10)
    assert route.status_code == 200, route.text
    assert steady(direct) == steady(through_env) == steady(through_flag) == steady(route.json())

    assert (through_env["queued"], through_env["running"]) == (1, 1)
    assert through_env["queued_by_capability"][0]["oldest"] == waiting
    assert [r["id"] for r in through_env["running_executions"]] == [running]
    assert [w["pid"] for w in through_env["workers"]] == [worker.pid]
    [recent] = through_env["recent_failures"]
    assert recent["id"] == cancelled and recent["code"] == "cancelled"
    assert recent["capability"] == "tests.sleepy"

    shown = majordomus(redis_url, "queue", MAJORDOMUS_API_URL=api_server)
    assert shown.returncode == 0, shown.stderr
    assert shown.stderr == ""
    text = shown.stdout
    assert "1 queued, 1 running, 1 workers" in text
    assert "recent failures and cancellations" in text and "by code: cancelled 1" in text
    line = next(line for line in text.splitlines() if cancelled in line)
    assert "cancelled" in line.replace(cancelled, "") and "tests.sleepy" in line
    straight = majordomus(redis_url, "queue").stdout
    assert next(line for line in straight.splitlines() if cancelled in line) == line


def test_workers_through_the_api_answers_as_redis_does(
    workers: Any, api_server: str, redis_url: str
) -> None:
    started = workers.start(2)
    direct = report(redis_url, "workers")
    remote = report(redis_url, "workers", MAJORDOMUS_API_URL=api_server)
    assert steady(direct) == steady(remote)
    assert sorted(w["pid"] for w in remote["workers"]) == sorted(p.pid for p in started)
    assert all(not w["silent"] and w["accepting"] for w in remote["workers"])

    shown = majordomus(redis_url, "workers", MAJORDOMUS_API_URL=api_server)
    assert shown.returncode == 0, shown.stderr
    for w in remote["workers"]:
        row = next(line for line in shown.stdout.splitlines() if w["id"] in line)
        assert str(w["pid"]) in row and "ok" in row


def test_queue_watch_through_the_api_prints_one_report_per_line(
    flushed: Any, api_server: str, redis_url: str
) -> None:
    watching = subprocess.Popen(
        majordomus_argv("queue", "--watch", "--interval", "0.2", "--format", "json"),
        cwd=ROOT,
        env=child_env(redis_url, MAJORDOMUS_API_URL=api_server),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert watching.stdout is not None
    try:
        reports = [json.loads(watching.stdout.readline()) for _ in range(3)]
    finally:
        watching.send_signal(signal.SIGINT)  # Ctrl-C
        _, errors = watching.communicate(timeout=20)
    assert watching.returncode == 0, errors
    assert len({r["taken_at"] for r in reports}) == 3
    assert all(r["queued"] == 0 and r["lease_seconds"] == 3 for r in reports)
