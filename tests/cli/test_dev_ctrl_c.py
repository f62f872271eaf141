"""Ctrl-C in `majordomus dev`, as a terminal sends it: SIGINT to the whole foreground process
group. The API and the worker stop first, the embedded Redis last (it is in a session of
its own, so the signal never reaches it), with no traceback, and nothing is left running."""

from __future__ import annotations

import os
import socket
import time

import httpx
import psutil
import pytest

from majordomus.local.embedded import SERVER_NAMES
from tests.conftest import ROOT, DevProcess

pytestmark = [pytest.mark.process, pytest.mark.slow]

STOP_BOUND_SECONDS = 10
"""Failure detection only: the stop takes well under it (the figure is printed)."""


@pytest.mark.parametrize("presses", [1, 2], ids=["once", "twice"])
def test_ctrl_c_stops_the_api_and_worker_then_the_embedded_redis_without_a_traceback(
    presses: int,
) -> None:
    """Twice (the impatient user), the second skips the wait for connections to close, never
    the stop itself."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAJORDOMUS_")}
    env["PYTHONPATH"] = str(ROOT)
    dev = DevProcess(env)
    try:
        dev.wait_for_banner()
        [server] = [p for p in psutil.Process(dev.pid).children() if p.name() in SERVER_NAMES]
        [redis_port] = [c.laddr.port for c in server.net_connections("tcp") if c.status == "LISTEN"]
        with httpx.Client(base_url=dev.url, timeout=10) as client:
            # An execution in flight: stopping it writes its last events to the Redis.
            running = _start_running(client)
        started = time.monotonic()
        code = dev.ctrl_c(presses, STOP_BOUND_SECONDS)
        elapsed = time.monotonic() - started
        text = dev.output()
    finally:
        dev.close()
    print(f"Ctrl-C x{presses} to exit: {elapsed:.2f} s (execution {running} in flight)")
    assert code == 0, text
    assert "Traceback" not in text, text
    assert "majordomus dev stopped" in text
    assert not server.is_running(), f"{server.name()} {server.pid} outlived dev"
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", redis_port)) != 0


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
