"""`majordomus serve` listens before it loads the app: a client that connects while the API
starts (or restarts: an EventSource reconnecting after the process was replaced) waits and
is answered, instead of being refused for the seconds the app and its MCP server take to
load. A port already taken stops it with one line."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import httpx
import pytest

from majordomus.local.embedded import free_port
from tests.api.conftest import ApiProcess, api_env
from tests.conftest import ROOT


@pytest.mark.usefixtures("spawns")
def test_a_request_sent_while_the_api_starts_is_answered_not_refused(
    suite_redis_url: str,
) -> None:
    port = free_port()
    began = time.monotonic()
    server = subprocess.Popen(
        [sys.executable, "-m", "majordomus.cli", "serve", "--port", str(port)],
        cwd=ROOT,
        env=api_env(suite_redis_url),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        connected_after = None
        while connected_after is None:
            assert server.poll() is None, "the API exited at start"
            assert time.monotonic() - began < 30, "the API never listened"
            try:
                probe = socket.create_connection(("127.0.0.1", port), timeout=1)
            except OSError:
                time.sleep(0.01)
                continue
            connected_after = time.monotonic() - began
            probe.close()
        # Sent at once, long before the app has loaded: it waits in the queue.
        answer = httpx.get(f"http://127.0.0.1:{port}/api/v1/live", timeout=30)
        answered_after = time.monotonic() - began
        assert answer.status_code == 200
        print(
            f"listening {connected_after:.2f} s after the start; the first request, sent "
            f"then, answered {answered_after:.2f} s after it"
        )
    finally:
        server.terminate()
        server.wait(15)


@pytest.mark.usefixtures("spawns")
def test_a_port_in_use_stops_serve_with_one_line(suite_redis_url: str) -> None:
    taken = ApiProcess(suite_redis_url).start()
    try:
        second = subprocess.run(
            [sys.executable, "-m", "majordomus.cli", "serve", "--port", str(taken.port)],
            cwd=ROOT,
            env=api_env(suite_redis_url),
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        taken.close()
    assert second.returncode == 2
    assert f"cannot listen on 127.0.0.1:{taken.port}" in second.stderr
    assert "Traceback" not in second.stderr + second.stdout
