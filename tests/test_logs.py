"""Logs an operator can use: one format for every process (text, or JSON lines with
`MAJORDOMUS_LOG_FORMAT=json`), `MAJORDOMUS_LOG_LEVEL`, an access line per HTTP request that
`MAJORDOMUS_ACCESS_LOG=0` turns off, and an execution's id as a field of every line about it.
The formatters are checked in-process; the API and the worker as real processes, over a real
socket and a real Redis."""

from __future__ import annotations

import io
import json
import logging
import re
import signal
import time
import warnings
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import httpx
import pytest

from majordomus.config import Settings
from majordomus.logs import LIBRARY_LOGGERS, configure
from tests.api.conftest import TOKEN, ApiProcess
from tests.conftest import wait_for_workers

TEXT_LINE = re.compile(
    r"^(?P<time>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) (?P<level>[A-Z]+) (?P<logger>\S+) "
    r"(?P<message>.*)$"
)


@pytest.fixture
def restored_logging() -> Iterator[None]:
    """The process's logging as it was before the test configured its own."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    libraries = {
        name: (list(logging.getLogger(name).handlers), logging.getLogger(name).propagate)
        for name in LIBRARY_LOGGERS
    }
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        for name, (kept, propagate) in libraries.items():
            logging.getLogger(name).handlers[:] = kept
            logging.getLogger(name).propagate = propagate
        logging.captureWarnings(False)


def written(stream: io.StringIO) -> list[str]:
    return stream.getvalue().splitlines()


# -- the formats ----------------------------------------------------------------------------


def test_a_json_line_is_one_object_with_time_level_logger_message_and_its_fields(
    restored_logging: None,
) -> None:
    out = io.StringIO()
    configure("json", stream=out)
    log = logging.getLogger("majordomus.worker")
    try:
        raise ValueError("it broke\non two lines")
    except ValueError:
        log.exception("execution_id=%s failed", "x-1", extra={"execution_id": "x-1", "attempt": 2})
    [line] = written(out)
    record = json.loads(line)
    assert record["level"] == "ERROR"
    assert record["logger"] == "majordomus.worker"
    assert record["message"] == "execution_id=x-1 failed"
    assert record["execution_id"] == "x-1" and record["attempt"] == 2
    assert "Traceback" in record["exception"] and "it broke\non two lines" in record["exception"]
    stamp = datetime.fromisoformat(record["time"].replace("Z", "+00:00"))
    assert stamp.utcoffset() is not None and stamp.utcoffset().total_seconds() == 0
    assert abs(stamp.timestamp() - time.time()) < 60
    assert set(record) == {
        "time",
        "level",
        "logger",
        "message",
        "execution_id",
        "attempt",
        "exception",
    }


def test_a_field_json_cannot_encode_is_written_as_its_text(restored_logging: None) -> None:
    out = io.StringIO()
    configure("json", stream=out)
    logging.getLogger("majordomus").info("odd", extra={"where": io, "errors": {ValueError("x")}})
    record = json.loads(written(out)[0])
    assert record["message"] == "odd"
    assert "module 'io'" in record["where"]


def test_a_text_line_is_time_level_logger_and_message(restored_logging: None) -> None:
    out = io.StringIO()
    configure("text", stream=out)
    logging.getLogger("majordomus.sweeper").warning("execution_id=%s: lost", "x-2")
    [line] = written(out)
    matched = TEXT_LINE.match(line)
    assert matched is not None, line
    assert (matched["level"], matched["logger"]) == ("WARNING", "majordomus.sweeper")
    assert matched["message"] == "execution_id=x-2: lost"


def test_the_level_setting_leaves_out_what_is_less_severe(restored_logging: None) -> None:
    out = io.StringIO()
    configure("text", "WARNING", stream=out)
    log = logging.getLogger("majordomus.worker")
    log.info("not this")
    log.debug("nor this")
    log.warning("this")
    log.error("and this")
    assert [TEXT_LINE.match(line)["message"] for line in written(out)] == ["this", "and this"]  # type: ignore[index]


def test_a_library_logger_with_a_handler_of_its_own_writes_through_the_one_format(
    restored_logging: None,
) -> None:
    own = logging.StreamHandler(io.StringIO())
    logging.getLogger("uvicorn.error").addHandler(own)
    logging.getLogger("uvicorn.error").propagate = False
    out = io.StringIO()
    configure("json", stream=out)
    logging.getLogger("uvicorn.error").info("Started server process [1]")
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("a deprecation", DeprecationWarning, stacklevel=1)
    records = [json.loads(line) for line in written(out)]
    assert [r["logger"] for r in records] == ["uvicorn.error", "py.warnings"]
    assert "color_message" not in records[0]


def test_the_settings_read_level_and_format_whatever_their_case() -> None:
    given = Settings.from_env(
        {
            "MAJORDOMUS_LOG_LEVEL": "debug",
            "MAJORDOMUS_LOG_FORMAT": "JSON",
            "MAJORDOMUS_ACCESS_LOG": "0",
        }
    )
    assert (given.log_level, given.log_format, given.access_log) == ("DEBUG", "json", False)
    assert (Settings().log_level, Settings().log_format, Settings().access_log) == (
        None,
        "text",
        True,
    )
    with pytest.raises(SystemExit, match="bad configuration"):
        Settings.from_env({"MAJORDOMUS_LOG_LEVEL": "loud"})


# -- the API, over a real socket ------------------------------------------------------------


def json_lines(output: str) -> list[dict[str, Any]]:
    """Every line of a process's output, each of which must be a JSON object."""
    records = []
    for line in output.splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            raise AssertionError(f"a line that is no JSON: {line!r}\n{output}") from None
    return records


def access_of(records: list[dict[str, Any]], path: str) -> list[dict[str, Any]]:
    return [r for r in records if r["logger"] == "majordomus.access" and r["path"] == path]


def stopped(api: ApiProcess) -> str:
    api.stop()
    return api.output()


@pytest.mark.slow
def test_the_api_logs_one_json_line_per_request_and_uvicorn_writes_the_same_format(
    redis_url: str,
) -> None:
    api = ApiProcess(redis_url, MAJORDOMUS_LOG_FORMAT="json", MAJORDOMUS_API_TOKEN=TOKEN).start()
    try:
        with api.client(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
            assert http.get("/api/v1/capabilities").status_code == 200
            assert http.get("/no/such/route?key=hidden").status_code == 404
        assert httpx.get(api.url + "/api/v1/capabilities").status_code == 401
        output = stopped(api)
    finally:
        api.close()
    records = json_lines(output)
    listed = access_of(records, "/api/v1/capabilities")
    assert [(r["status"], r["actor"]) for r in listed] == [(200, "token"), (401, "anonymous")]
    for record in listed:
        assert record["method"] == "GET" and record["level"] == "INFO"
        assert isinstance(record["duration_ms"], float) and record["duration_ms"] >= 0
        assert record["client"].startswith("127.0.0.1:")
    [missing] = access_of(records, "/no/such/route")
    assert missing["status"] == 404 and "hidden" not in missing["message"]
    uvicorn = [r["message"] for r in records if r["logger"] == "uvicorn.error"]
    assert any(m.startswith("Started server process") for m in uvicorn), output
    assert not any(r["logger"] == "uvicorn.access" for r in records)


@pytest.mark.slow
def test_the_live_channel_is_logged_once_when_it_ends(redis_url: str) -> None:
    api = ApiProcess(redis_url, MAJORDOMUS_LOG_FORMAT="json").start()
    try:
        with api.client() as http, http.stream("GET", "/events") as live:
            assert live.status_code == 200
            time.sleep(0.3)  # the channel stays open a while
            assert not access_of(json_lines(api.output()), "/events"), "logged while open"
        # The client went away: the channel ends at its next heartbeat (1 s here).
        deadline = time.monotonic() + 10
        while not access_of(json_lines(api.output()), "/events") and time.monotonic() < deadline:
            time.sleep(0.1)
        output = stopped(api)
    finally:
        api.close()
    [line] = access_of(json_lines(output), "/events")
    assert line["status"] == 200 and line["duration_ms"] >= 300


@pytest.mark.slow
def test_the_access_log_turned_off_writes_no_request_line(redis_url: str) -> None:
    api = ApiProcess(redis_url, MAJORDOMUS_LOG_FORMAT="json", MAJORDOMUS_ACCESS_LOG="0").start()
    try:
        assert httpx.get(api.url + "/api/v1/capabilities").status_code == 200
        output = stopped(api)
    finally:
        api.close()
    records = json_lines(output)
    assert not [r for r in records if r["logger"] in ("majordomus.access", "uvicorn.access")]
    assert any(r["logger"] == "uvicorn.error" for r in records), output


@pytest.mark.slow
def test_in_text_every_line_of_the_api_shares_one_format(redis_url: str) -> None:
    api = ApiProcess(redis_url).start()
    try:
        assert httpx.get(api.url + "/api/v1/capabilities").status_code == 200
        output = stopped(api)
    finally:
        api.close()
    lines = [TEXT_LINE.match(line) for line in output.splitlines() if line.strip()]
    assert all(lines), output
    shown = [(m["logger"], m["message"]) for m in lines if m]
    assert any(
        n == "majordomus.access" and m.startswith("GET /api/v1/capabilities 200 ") for n, m in shown
    )
    assert any(n == "uvicorn.error" and m.startswith("Started server process") for n, m in shown)
    assert any(n == "majordomus.launch" and m.startswith("majordomus API on") for n, m in shown)


# -- the worker -----------------------------------------------------------------------------


@pytest.mark.slow
async def test_a_workers_lines_about_an_execution_carry_its_id_as_a_field(
    redis: Any, engine: Any, worker_process: Any
) -> None:
    worker = worker_process(MAJORDOMUS_LOG_FORMAT="json", MAJORDOMUS_LOG_LEVEL="DEBUG")
    await wait_for_workers(redis, 1)
    started = await engine.start("tests.boom", {})
    final = await engine.wait(started.id, 10_000)
    assert final.state == "failed"
    worker.kill(signal.SIGTERM)
    worker.wait(20)
    records = json_lines(worker.output())
    about = [r for r in records if r.get("execution_id") == started.id]
    assert {r["level"] for r in about} >= {"DEBUG", "ERROR"}, about
    [failed] = [r for r in about if r["level"] == "ERROR"]
    assert failed["logger"] == "majordomus.worker"
    assert f"execution_id={started.id}" in failed["message"]
    assert "ValueError" in failed["exception"]
    assert [r["message"] for r in about if r["level"] == "DEBUG"] == [
        f"execution_id={started.id}: running tests.boom",
        f"execution_id={started.id}: ended failed",
    ]
