"""The process commands refuse a bad or unreachable Redis with a sentence, never a traceback,
and `serve` and `dev` refuse to listen beyond loopback with no token unless told plainly."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time

import httpx
import pytest

from majordomus.cli.processes import is_loopback
from majordomus.errors import EXIT_CODE
from majordomus.local.embedded import free_port
from tests.cli.conftest import child_env
from tests.conftest import ROOT

pytestmark = pytest.mark.usefixtures("spawns")  # it starts child processes of its own


def _run(command: str, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "majordomus.cli", command],
        cwd=ROOT,
        env=child_env(url),
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("command", ["worker", "serve"])
def test_an_unreachable_redis_stops_the_process_with_a_sentence(command: str) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    done = _run(command, url)
    assert done.returncode == EXIT_CODE["unavailable"]
    assert f"Redis at {url} is unreachable" in done.stderr
    assert "MAJORDOMUS_REDIS_URL" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout


@pytest.mark.parametrize("command", ["worker", "serve"])
def test_a_redis_url_that_is_no_url_is_named(command: str) -> None:
    done = _run(command, "http://127.0.0.1:6379/0")
    assert done.returncode == EXIT_CODE["invalid_input"]
    assert "'http://127.0.0.1:6379/0' is not a Redis URL" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("localhost", True),
        ("::1", True),
        ("[::1]", True),
        ("0.0.0.0", False),
        ("::", False),
        ("", False),
        ("192.168.1.5", False),
        ("api.example.com", False),
    ],
)
def test_loopback_is_told_from_every_other_interface(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def _beyond_loopback(
    command: str, redis_url: str, port: int, *flags: str, **env: str
) -> subprocess.Popen[str]:
    """`majordomus <command> --host 0.0.0.0 --port <port>`, on the suite's Redis."""
    return subprocess.Popen(
        [sys.executable, "-m", "majordomus.cli", command, "--host", "0.0.0.0"]
        + ["--port", str(port), *flags],
        cwd=ROOT,
        env=child_env(redis_url, **env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize("command", ["serve", "dev"])
def test_beyond_loopback_without_a_token_the_server_refuses_to_start(
    command: str, redis_url: str
) -> None:
    process = _beyond_loopback(command, redis_url, free_port())
    out, err = process.communicate(timeout=60)
    assert process.returncode == EXIT_CODE["refused"] == 5
    assert f"majordomus: refused: {command} will not listen on 0.0.0.0:" in err
    assert "no MAJORDOMUS_API_TOKEN set" in err  # what
    assert "anyone who reaches that address could start" in err  # why
    assert "Set MAJORDOMUS_API_TOKEN" in err and "--insecure-no-token" in err  # how to fix
    assert "Traceback" not in out + err


@pytest.mark.parametrize(
    ("flags", "env", "warned"),
    [
        (("--insecure-no-token",), {}, True),
        ((), {"MAJORDOMUS_API_TOKEN": "s3cret"}, False),
    ],
    ids=["said plainly", "with a token"],
)
def test_beyond_loopback_serve_starts_when_told_plainly_or_with_a_token(
    flags: tuple[str, ...], env: dict[str, str], warned: bool, redis_url: str
) -> None:
    port = free_port()
    process = _beyond_loopback("serve", redis_url, port, *flags, **env)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, process.communicate()
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/api/v1/live", timeout=1).is_success:
                    break
            assert time.monotonic() < deadline, "the API did not answer"
            time.sleep(0.05)
    finally:
        process.terminate()
        _, err = process.communicate(timeout=20)
    assert ("(--insecure-no-token): anyone who reaches it" in err) is warned, err
