"""Ctrl-C in `majordomus dev`, as a terminal sends it: SIGINT to the whole foreground process
group. The API and the worker stop first, the embedded Redis last (it is in a session of
its own, so the signal never reaches it), with no traceback, and nothing is left running."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import httpx
import psutil
import pytest

from majordomus.store.embedded import SERVER_NAMES, free_port
from tests.conftest import ROOT

pytestmark = [pytest.mark.process, pytest.mark.slow]

STOP_BOUND_SECONDS = 10
"""Failure detection only: the stop takes well under it (the figure is printed)."""


def test_ctrl_c_stops_the_api_and_worker_then_the_embedded_redis_without_a_traceback() -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAJORDOMUS_")}
    env["PYTHONPATH"] = str(ROOT)
    with tempfile.TemporaryFile() as log:
        dev = subprocess.Popen(
            [sys.executable, "-m", "majordomus.cli", "dev", "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a group of its own, as a terminal's foreground job
        )

        def output() -> str:
            log.seek(0)
            return log.read().decode(errors="replace")

        try:
            base = f"http://127.0.0.1:{port}"
            with httpx.Client(base_url=base, timeout=10) as client:
                _wait_until_live(client, dev, output)
                [server] = [
                    p for p in psutil.Process(dev.pid).children() if p.name() in SERVER_NAMES
                ]
                [redis_port] = [
                    c.laddr.port for c in server.net_connections("tcp") if c.status == "LISTEN"
                ]
                # An execution in flight: stopping it writes its last events to the Redis.
                running = _start_running(client)
            started = time.monotonic()
            os.killpg(dev.pid, signal.SIGINT)
            code = dev.wait(STOP_BOUND_SECONDS)
            elapsed = time.monotonic() - started
        finally:
            if dev.poll() is None:
                os.killpg(dev.pid, signal.SIGKILL)
                dev.wait(10)
        print(f"Ctrl-C to exit: {elapsed:.2f} s (execution {running} in flight)")
        text = output()
    assert code == 0, text
    assert "Traceback" not in text, text
    assert "majordomus dev stopped" in text
    assert not server.is_running(), f"{server.name()} {server.pid} outlived dev"
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", redis_port)) != 0


def _wait_until_live(
    client: httpx.Client, dev: subprocess.Popen[bytes], output: Callable[[], str]
) -> None:
    deadline = time.monotonic() + 30
    while True:
        assert dev.poll() is None and time.monotonic() < deadline, output()
        try:
            if client.get("/api/v1/live").status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)


def _start_running(client: httpx.Client) -> str:
    answer = client.post(
        "/api/v1/executions/start",
        json={"capability": "executions.demonstrate", "input": {"steps": 30, "delay_ms": 1000}},
    )
    assert answer.status_code == 200, answer.text
    execution = answer.json()["id"]
    deadline = time.monotonic() + 10
    while (
        client.get("/api/v1/executions/get", params={"id": execution}).json()["state"] != "running"
    ):
        assert time.monotonic() < deadline, "the execution never started running"
        time.sleep(0.05)
    return execution
