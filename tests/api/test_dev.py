"""`majordomus dev`: the API and a worker in one process on an embedded Redis it starts and
stops itself, saying where everything is; Ctrl-C stops all of it."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

import httpx

from majordomus.store.embedded import free_port
from tests.api.conftest import start, wait_final
from tests.conftest import ROOT


def test_dev_runs_api_and_worker_on_an_embedded_redis_and_stops_it_all_on_ctrl_c() -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAJORDOMUS_")}
    env["PYTHONPATH"] = str(ROOT)
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "majordomus.cli", "dev", "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )

        def output() -> str:
            log.seek(0)
            return log.read().decode(errors="replace")

        try:
            deadline = time.monotonic() + 30
            while "Ctrl-C stops everything" not in output():
                assert process.poll() is None and time.monotonic() < deadline, output()
                time.sleep(0.05)
            banner = output()
            base = f"http://127.0.0.1:{port}"
            for line in (f"{base}/docs", f"{base}/events", f"{base}/openapi.json", "MCP"):
                assert line in banner
            redis_line = re.search(r"Redis\s+redis://127\.0\.0\.1:(\d+)/0, embedded", banner)
            assert redis_line, banner
            redis_port = int(redis_line.group(1))
            with httpx.Client(base_url=base, timeout=20) as client:
                snapshot = start(client, "executions.demonstrate", steps=2)
                assert wait_final(client, snapshot["id"])["state"] == "succeeded"
                assert client.get("/api/v1/ready").json()["workers"] == 1
        finally:
            process.send_signal(signal.SIGINT)
            code = process.wait(30)
        assert code == 0, output()
        assert "majordomus dev stopped" in output()
        with socket.socket() as probe:  # the embedded Redis is gone with it
            assert probe.connect_ex(("127.0.0.1", redis_port)) != 0
