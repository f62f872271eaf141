"""A `majordomus dev` running in one terminal is found by the CLI in another, by itself.

With neither `--api`/`MAJORDOMUS_API_URL` nor `MAJORDOMUS_REDIS_URL`, a command reads the
record `dev` keeps (`$XDG_RUNTIME_DIR/majordomus/dev.json` here, a folder of the test's own)
and goes through that dev's API, which reaches its Redis whatever it is, in-process
fakeredis included; it says so in one line on stderr, never on `--format json`'s stdout.
The record is gone once dev stops; a record whose dev is gone is passed over, and the
fallback to the default Redis is named as such when it fails. The 'no worker' warning names
the Redis or the API it looked at.

Each process is started as a user starts it: `python -m majordomus.cli ...` in a shell of
its own environment, with no `MAJORDOMUS_*` URL unless the test says so."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from majordomus.local.dev_record import DevRecord, dev_record_path, write_dev_record
from majordomus.local.embedded import free_port
from tests.cli.conftest import child_env, majordomus_argv
from tests.cli.test_dev_servers import RUN_THE_CLI
from tests.conftest import HIDE_THE_WHEEL, ROOT, running_dev

pytestmark = [pytest.mark.process, pytest.mark.slow]

UNREACHABLE_DEFAULT = """
import majordomus.store.connect as connect
connect.DEFAULT_URL = "redis://127.0.0.1:{port}/0"
"""
"""Run first in a CLI child: its default Redis is a free port, so the fallback fails (the
machine's own redis://127.0.0.1:6379/0 is never touched)."""


def user_env(runtime: Path, **extra: str) -> dict[str, str]:
    """A shell's environment with no majordomus URL in it, its runtime folder `runtime`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAJORDOMUS_")}
    env.update({"XDG_RUNTIME_DIR": str(runtime), "PYTHONPATH": str(ROOT), "COLUMNS": "200"})
    env.update(extra)
    return env


@contextlib.contextmanager
def dev(runtime: Path, *, without_a_server: bool = False) -> Iterator[str]:
    """`majordomus dev --port P` in its own session until its banner is out; its base URL.
    Ctrl-C on leaving, which must stop it cleanly. `without_a_server`: no redis-server or
    valkey-server anywhere, so it runs on in-process fakeredis."""
    env = user_env(runtime)
    argv = None
    with tempfile.TemporaryDirectory() as empty:
        if without_a_server:
            env["PATH"] = empty
            argv = [sys.executable, "-c", HIDE_THE_WHEEL + RUN_THE_CLI]
        with running_dev(env, argv) as running:
            if without_a_server:
                assert "in-process fakeredis" in running.output()
            yield running.url


def majordomus(
    runtime: Path, *args: str, program: str | None = None
) -> subprocess.CompletedProcess[str]:
    """`majordomus ARGS` from a second terminal: the same runtime folder, no majordomus URL."""
    argv = majordomus_argv(*args)
    if program is not None:
        argv = [sys.executable, "-c", program + RUN_THE_CLI, *args]
    return subprocess.run(
        argv, cwd=ROOT, env=user_env(runtime), capture_output=True, text=True, timeout=60
    )


def record_in(runtime: Path) -> Path:
    return runtime / "majordomus" / "dev.json"


@pytest.mark.parametrize("without_a_server", [False, True], ids=["embedded-server", "fakeredis"])
def test_run_and_queue_in_another_terminal_reach_the_running_dev_by_themselves(
    tmp_path: Path, without_a_server: bool
) -> None:
    with dev(tmp_path, without_a_server=without_a_server) as base:
        record = json.loads(record_in(tmp_path).read_text())
        assert record["api_url"] == base
        assert "password" not in json.dumps(record)
        found = f"majordomus: using the majordomus dev API at {base} (pid {record['pid']}"

        ran = majordomus(tmp_path, "run", "executions.demonstrate", "--steps", "2")
        assert ran.returncode == 0, ran.stderr + ran.stdout
        assert found in ran.stderr
        assert "no worker is taking work" not in ran.stderr

        queue = majordomus(tmp_path, "queue", "--format", "json")
        assert queue.returncode == 0, queue.stderr + queue.stdout
        report = json.loads(queue.stdout)  # stdout is the answer alone
        assert any(w["accepting"] and not w["silent"] for w in report["workers"]), report
        assert found in queue.stderr
    assert not record_in(tmp_path).exists()


def test_a_record_whose_dev_is_gone_is_passed_over_and_the_default_named_when_it_fails(
    tmp_path: Path,
) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    write_dev_record(
        DevRecord(api_url=f"http://127.0.0.1:{free_port()}", pid=gone.pid, redis="gone"),
        record_in(tmp_path),
    )
    port = free_port()
    queue = majordomus(
        tmp_path, "queue", "--format", "json", program=UNREACHABLE_DEFAULT.format(port=port)
    )
    assert queue.returncode == 7, queue.stderr + queue.stdout
    assert "using the majordomus dev API" not in queue.stderr
    said = " ".join(queue.stderr.split())
    assert f"cannot reach Redis at redis://127.0.0.1:{port}/0 (the default:" in said
    assert f"the majordomus dev recorded in {record_in(tmp_path)}, pid {gone.pid}, is gone" in said
    assert json.loads(queue.stdout)["error"]["code"] == "unavailable"


def start_without_a_worker(env: dict[str, str]) -> str:
    """`majordomus run executions.demonstrate` with no worker anywhere: what it says on stderr
    until the 'no worker' warning (it would wait for ever: it is stopped there)."""
    process = subprocess.Popen(
        majordomus_argv("run", "executions.demonstrate", "--steps", "1"),
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    said = ""
    try:
        assert process.stderr is not None
        deadline = time.monotonic() + 30
        while "no worker" not in said and time.monotonic() < deadline:
            line = process.stderr.readline()
            if not line:
                break
            said += line
    finally:
        process.kill()
        process.wait(10)
    return " ".join(said.split())


def test_the_no_worker_warning_names_the_redis_it_looked_at(flushed: Any, redis_url: str) -> None:
    said = start_without_a_worker(child_env(redis_url, COLUMNS="200"))
    assert f"no worker is taking work on Redis at {redis_url}:" in said, said


def test_the_no_worker_warning_names_the_api_it_looked_at(
    flushed: Any, redis_url: str, api_server: str
) -> None:
    said = start_without_a_worker(
        child_env(redis_url, COLUMNS="200", MAJORDOMUS_API_URL=api_server)
    )
    assert f"no worker is taking work on the API at {api_server}:" in said, said


def test_the_record_is_per_user_in_the_runtime_folder_else_the_cache() -> None:
    assert dev_record_path({"XDG_RUNTIME_DIR": "/run/user/7"}) == Path(
        "/run/user/7/majordomus/dev.json"
    )
    # A relative folder is no folder (as XDG has it): the cache is used instead.
    assert dev_record_path({"XDG_RUNTIME_DIR": "run", "XDG_CACHE_HOME": "/c"}) == Path(
        "/c/majordomus/dev.json"
    )
    assert dev_record_path({}) == Path.home() / ".cache" / "majordomus" / "dev.json"
