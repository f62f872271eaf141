"""Schedules ticked by real worker processes, beside real API processes, on a real Redis:
every second for 6 s is exactly 6 executions however many processes tick, pause and
resume, and the `schedules.*` capabilities over HTTP and the CLI.

The processes live for the module (starting them is most of its time); each test has a
schedule of its own and counts only the executions that name it.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
import redis as redis_sync

from majordomus.engine import Engine
from majordomus.registry import REGISTRY
from majordomus.store.connect import connect
from tests.api.conftest import ApiProcess, WorkerChild, api_env, flush
from tests.conftest import ROOT, _redis_url, make_settings

pytestmark = [pytest.mark.process, pytest.mark.slow]

EVERY_SECOND = "* * * * * *"
WORKERS = 3
SECONDS = 6
"""How long a schedule of every second runs: that many executions, exactly."""


@pytest.fixture(scope="module")
def url() -> str:
    return _redis_url()


@pytest.fixture(scope="module")
def workers(spawns: None, url: str) -> Iterator[list[WorkerChild]]:
    """Three `majordomus worker` processes, each with its ticker, once they all report."""
    flush(url)
    started = [WorkerChild(url) for _ in range(WORKERS)]
    client = redis_sync.Redis.from_url(url)
    deadline = time.monotonic() + 60
    try:
        while client.zcard("md:workers") < WORKERS:
            dead = [w for w in started if w.process.poll() is not None]
            assert not dead and time.monotonic() < deadline, "\n".join(w.output() for w in started)
            time.sleep(0.05)
        yield started
    finally:
        client.close()
        for worker in started:
            worker.stop()


@pytest.fixture(scope="module")
def apis(url: str, workers: list[WorkerChild]) -> Iterator[list[ApiProcess]]:
    """Two `majordomus serve` processes beside the workers (an API does not tick)."""
    servers = [ApiProcess(url), ApiProcess(url)]
    with ThreadPoolExecutor(len(servers)) as pool:  # side by side: half the wait
        list(pool.map(ApiProcess.start, servers))
    yield servers
    for server in servers:
        server.close()


def at_a_third_past_the_second() -> None:
    """Sleep to 0.3 s past a second: the ticks fall well clear of a create or a pause."""
    time.sleep((1.3 - time.time() % 1) % 1)


def named(executions: list[dict[str, Any]], schedule_id: str) -> list[dict[str, Any]]:
    return [e for e in executions if e.get("schedule") == schedule_id]


def tick_of(snapshot: dict[str, Any]) -> int:
    return int(snapshot["idempotency_key"].rsplit(":", 1)[1])


def consecutive_seconds(ticks: list[int]) -> bool:
    return ticks == [ticks[0] + 1000 * i for i in range(len(ticks))]


async def test_every_second_for_six_seconds_with_three_workers_starts_exactly_six(
    url: str, workers: list[WorkerChild]
) -> None:
    client = connect(url)
    engine = Engine(client, REGISTRY, make_settings(url))
    try:
        await asyncio.to_thread(at_a_third_past_the_second)
        made = await engine.invoke(
            "schedules.create", {"capability": "tests.noop", "cron": EVERY_SECOND, "name": "six"}
        )
        await asyncio.sleep(SECONDS)
        await engine.invoke("schedules.pause", {"id": made.id})
        await asyncio.sleep(1.2)  # a tick after the pause would be started by now
        started = [
            s
            for s in (await engine.list(capability="tests.noop")).executions
            if s.schedule == made.id
        ]
        assert len(started) == SECONDS, [s.idempotency_key for s in started]
        ticks = sorted(int(str(s.idempotency_key).rsplit(":", 1)[1]) for s in started)
        assert consecutive_seconds(ticks), ticks
        finals = [await engine.wait(s.id, 10_000) for s in started]
        assert {f.state for f in finals} == {"succeeded"}
        assert len({f.worker for f in finals}) >= 1
    finally:
        await client.aclose()


def test_every_second_for_six_seconds_beside_two_apis_starts_exactly_six(
    apis: list[ApiProcess],
) -> None:
    first, second = apis
    with first.client() as a, second.client() as b:
        at_a_third_past_the_second()
        made = a.post(
            "/api/v1/schedules/create",
            json={"capability": "tests.noop", "cron": EVERY_SECOND, "name": "beside-apis"},
        )
        assert made.status_code == 200, made.text
        schedule_id = made.json()["id"]
        time.sleep(SECONDS)
        paused = b.post("/api/v1/schedules/pause", json={"id": schedule_id})
        assert paused.status_code == 200 and paused.json()["schedule"]["paused"], paused.text
        time.sleep(1.2)  # ticks come and go: time passes
        listed = b.get("/api/v1/executions", params={"capability": "tests.noop"}).json()
        started = named(listed["executions"], schedule_id)
        assert len(started) == SECONDS, [s["idempotency_key"] for s in started]
        assert consecutive_seconds(sorted(tick_of(s) for s in started))
        shown = b.get("/api/v1/schedules").json()
        mine = next(s for s in shown["schedules"] if s["id"] == schedule_id)
        assert mine["last_execution"] in {s["id"] for s in started}


def test_a_paused_schedule_starts_nothing_until_resumed(apis: list[ApiProcess]) -> None:
    with apis[0].client() as http:
        at_a_third_past_the_second()
        made = http.post(
            "/api/v1/schedules/create",
            json={"capability": "tests.noop", "cron": EVERY_SECOND, "name": "pausing"},
        ).json()
        time.sleep(2.0)  # ticks come and go: time passes
        http.post("/api/v1/schedules/pause", json={"id": made["id"]}).raise_for_status()
        paused_ms = time.time() * 1000
        time.sleep(2.0)  # ticks come and go: time passes
        resumed = http.post("/api/v1/schedules/resume", json={"id": made["id"]})
        assert resumed.status_code == 200 and resumed.json()["changed"], resumed.text
        resumed_ms = time.time() * 1000
        time.sleep(2.0)  # ticks come and go: time passes
        http.post("/api/v1/schedules/pause", json={"id": made["id"]}).raise_for_status()
        time.sleep(1.2)  # ticks come and go: time passes
        listed = http.get("/api/v1/executions", params={"capability": "tests.noop"}).json()
        ticks = sorted(tick_of(s) for s in named(listed["executions"], made["id"]))
        assert len(ticks) == 4, ticks  # two before the pause, two after the resume
        assert not [t for t in ticks if paused_ms < t < resumed_ms], ticks


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"cron": "every second"}, "not 5 or 6"),
        ({"cron": "61 * * * *"}, "not valid"),
        ({"cron": "* * * * *", "timezone": "Europe/Atlantis"}, "not a time zone"),
        ({"cron": "* * * * *", "execution_input": {"nothing": True}}, "does not fit tests.noop"),
    ],
)
def test_a_bad_cron_or_time_zone_is_invalid_input_over_http(
    apis: list[ApiProcess], body: dict[str, Any], says: str
) -> None:
    with apis[1].client() as http:
        answer = http.post("/api/v1/schedules/create", json={"capability": "tests.noop", **body})
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["code"] == "invalid_input" and says in error["message"], error
    assert error["suggestion"]


def cli(url: str, *args: str) -> Any:
    done = subprocess.run(
        [sys.executable, "-m", "majordomus.cli", *args, "--format", "json"],
        cwd=ROOT,
        env=api_env(url),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_schedules_capabilities_are_commands_of_the_cli(
    url: str, apis: list[ApiProcess]
) -> None:
    made = cli(
        url,
        "schedules",
        "create",
        "--capability",
        "tests.noop",
        "--cron",
        "0 3 * * *",
        "--timezone",
        "Asia/Tokyo",
        "--name",
        "from-the-cli",
    )
    assert made["id"] == "tests.noop:from-the-cli" and made["next_tick_at"]
    listed = cli(url, "schedules", "list", "--api", apis[0].url)
    assert "tests.noop:from-the-cli" in {s["id"] for s in listed["schedules"]}
    paused = cli(url, "schedules", "pause", "tests.noop:from-the-cli")
    assert paused["schedule"]["paused"] is True
    deleted = httpx.post(
        apis[0].url + "/api/v1/schedules/delete", json={"id": "tests.noop:from-the-cli"}
    )
    assert deleted.status_code == 200, deleted.text
