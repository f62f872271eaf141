"""`--api` and straight-to-Redis give the same answers, and `--format json` is exactly what
the HTTP API answers for the same call. A real `majordomus serve` and a real worker run on
the suite's Redis."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import httpx
import pytest

from majordomus.errors import EXIT_CODE
from tests.cli.conftest import Cli
from tests.cli.test_queue import until


@pytest.fixture
def finished(workers: Any, cli: Cli) -> dict[str, Any]:
    """One demonstration run to its end (so nothing about it changes any more)."""
    workers.start()
    snap = cli.json("run", "executions.demonstrate", "--input", '{"steps": 3, "log_lines": 2}')
    assert snap["state"] == "succeeded"
    return dict(snap)


def both(cli: Cli, api: str, *args: str) -> tuple[Any, Any]:
    return cli.json(*args), cli.json(*args, "--api", api)


def test_format_json_is_what_the_http_api_answers(
    finished: dict[str, Any], cli: Cli, api_server: str
) -> None:
    xid = finished["id"]
    calls = [
        (("executions", "show", xid), "/api/v1/executions/get", {"id": xid}),
        (
            ("executions", "events", xid, "--after", "3", "--limit", "4"),
            "/api/v1/executions/events",
            {"id": xid, "after": "3", "limit": "4"},
        ),
        (
            ("executions", "list", "--state", "succeeded"),
            "/api/v1/executions",
            {"state": "succeeded"},
        ),
        (("executions", "wait", xid), "/api/v1/executions/wait", {"id": xid}),
        (
            ("capabilities", "describe", "executions.demonstrate"),
            "/api/v1/capability",
            {"id": "executions.demonstrate"},
        ),
    ]
    for args, path, params in calls:
        answer = httpx.get(api_server + path, params=params, timeout=30)
        assert answer.status_code == 200, (path, answer.text)
        direct, remote = both(cli, api_server, *args)
        assert direct == answer.json(), args
        assert remote == answer.json(), args


def test_run_through_the_api_follows_the_live_channel_to_the_end(
    workers: Any, cli: Cli, api_server: str
) -> None:
    workers.start()
    result = cli("run", "executions.demonstrate", "--input", '{"steps": 2}', "--api", api_server)
    assert result.exit_code == 0, result.output
    assert "step done: step-2" in result.stdout and "succeeded in" in result.stdout
    failed = cli("run", "executions.demonstrate", "--input", '{"fail_at": 1}', "--api", api_server)
    assert failed.exit_code == EXIT_CODE["internal"]
    snap = cli.json("run", "executions.demonstrate", "--api", api_server)
    assert snap == cli.json("executions", "show", snap["id"])


def test_cancel_through_either_path_answers_alike(workers: Any, cli: Cli, api_server: str) -> None:
    workers.start(MAJORDOMUS_MAX_JOBS="1")
    ids = [
        cli("run", "tests.sleepy", "--detach", "--input", '{"seconds": 30}').stdout.strip()
        for _ in range(2)
    ]
    direct = cli.json("executions", "cancel", ids[0])
    remote = cli.json("executions", "cancel", ids[1], "--api", api_server)
    assert direct["outcome"] == remote["outcome"] == "requested"
    again_direct = cli.json("executions", "cancel", ids[1])
    again_remote = cli.json("executions", "cancel", ids[1], "--api", api_server)
    assert again_direct["outcome"] == again_remote["outcome"]


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (("executions", "show", "nope"), "invalid_input"),
        (("executions", "show", "x-20260101T000000Z-00000000"), "not_found"),
        (("run", "nope.nothing"), "not_found"),
        (("run", "executions.demonstrate", "--input", '{"steps": "many"}'), "invalid_input"),
    ],
)
def test_refusals_are_the_same_line_and_code_either_way(
    flushed: Any, cli: Cli, api_server: str, args: tuple[str, ...], code: str
) -> None:
    direct = cli(*args)
    remote = cli(*args, "--api", api_server)
    assert direct.exit_code == remote.exit_code == EXIT_CODE[code]
    assert direct.stderr == remote.stderr


class Recorder(BaseHTTPRequestHandler):
    """A stand-in API that answers every GET with an empty execution list and keeps the
    headers it was sent."""

    seen: ClassVar[list[dict[str, str]]] = []

    def do_GET(self) -> None:
        self.seen.append(dict(self.headers))
        body = b'{"count": 0, "active": 0, "queued": 0, "executions": []}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_through_the_api_the_cli_names_itself_on_every_request(cli: Cli) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        listed = cli.json("executions", "list", "--api", url)
        assert listed["count"] == 0
    finally:
        server.shutdown()
        server.server_close()
    [headers] = Recorder.seen
    assert {k.lower(): v for k, v in headers.items()}["majordomus-actor"] == "cli"


def test_a_run_and_a_cancel_through_the_api_are_attributed_to_the_cli(
    workers: Any, cli: Cli, api_server: str
) -> None:
    workers.start()
    snap = cli.json("run", "executions.demonstrate", "--steps", "1", "--api", api_server)
    assert snap["state"] == "succeeded"
    assert snap["actor"] == "cli"
    started = cli.json("run", "tests.sleepy", "--seconds", "30", "--detach", "--api", api_server)
    assert started["actor"] == "cli"
    until(lambda: cli.json("executions", "show", started["id"])["state"] == "running")
    cli.json("executions", "cancel", started["id"], "--api", api_server)
    events = cli.json("executions", "events", started["id"])["events"]
    [cancelling] = [e for e in events if e["type"] == "execution.cancelling"]
    assert cancelling["data"]["by"] == "cli"
