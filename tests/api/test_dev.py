"""`majordomus dev`: the API and a worker in one process on an embedded Redis it starts and
stops itself, saying where everything is; Ctrl-C stops all of it."""

from __future__ import annotations

import os
import re
import socket

import httpx
import pytest

from tests.api.conftest import start, wait_final
from tests.conftest import ROOT, running_dev

pytestmark = pytest.mark.usefixtures("spawns")  # it starts child processes of its own


def test_dev_runs_api_and_worker_on_an_embedded_redis_and_stops_it_all_on_ctrl_c() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAJORDOMUS_")}
    env["PYTHONPATH"] = str(ROOT)
    with running_dev(env) as dev:
        banner = dev.output()
        for line in (f"{dev.url}/docs", f"{dev.url}/events", f"{dev.url}/openapi.json", "MCP"):
            assert line in banner
        redis_line = re.search(r"Redis\s+redis://127\.0\.0\.1:(\d+)/0, embedded", banner)
        assert redis_line, banner
        redis_port = int(redis_line.group(1))
        with httpx.Client(base_url=dev.url, timeout=20) as client:
            snapshot = start(client, "executions.demonstrate", steps=2)
            assert wait_final(client, snapshot["id"])["state"] == "succeeded"
            assert client.get("/api/v1/ready").json()["workers"] == 1
    with socket.socket() as probe:  # the embedded Redis is gone with it
        assert probe.connect_ex(("127.0.0.1", redis_port)) != 0
