"""The testing kit's pytest plugin: a suite gets `majordomus_env` by installing majordomus,
configured by a marker or its ini options, and hears nothing of it otherwise."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.testing.capabilities import KIT

ROOT = Path(__file__).resolve().parents[2]

CAPABILITY = '''
"""A user's capability, for the plugin's suite."""
import msgspec
from majordomus import Context, capability


class Name(msgspec.Struct):
    name: str


class Greeting(msgspec.Struct):
    message: str


@capability("plugged.hello", input=Name, output=Greeting)
async def hello(ctx: Context, inp: Name) -> Greeting:
    ctx.log(f"greeting {inp.name}")
    return Greeting(f"Hello, {inp.name}!")
'''

SUITE = '''
from datetime import timedelta

import pytest


@pytest.mark.majordomus(lease_seconds=5)
async def test_a_greeting_an_hour_later(majordomus_env):
    execution = await majordomus_env.client.start(
        "plugged.hello", {"name": "Ada"}, delay=timedelta(hours=1)
    )
    await majordomus_env.skip(hours=1)
    assert await execution.result(timeout=5) == {"message": "Hello, Ada!"}
    assert majordomus_env.settings.lease_seconds == 5
    assert majordomus_env.redis_kind == "fake"
'''


def _pytest_in(folder: Path, ini: str) -> subprocess.CompletedProcess[str]:
    (folder / "pytest.ini").write_text(textwrap.dedent(ini))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rN"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "HOME": str(folder)},
    )


@pytest.mark.majordomus(KIT, workers=2, lease_seconds=4)
async def test_the_fixture_runs_what_the_marker_names(majordomus_env: Any) -> None:
    assert len(majordomus_env.live_workers) == 2
    assert majordomus_env.settings.lease_seconds == 4
    execution = await majordomus_env.client.start("kit.note", {}, delay=timedelta(days=1))
    await majordomus_env.skip(days=1)
    assert (await execution.refresh()).state == "succeeded"


@pytest.mark.process
@pytest.mark.slow
def test_a_suite_gets_the_fixture_by_installing_majordomus(tmp_path: Path) -> None:
    (tmp_path / "plugged.py").write_text(CAPABILITY)
    (tmp_path / "test_plugged.py").write_text(SUITE)
    ran = _pytest_in(
        tmp_path,
        """
        [pytest]
        asyncio_mode = auto
        asyncio_default_fixture_loop_scope = function
        majordomus_capabilities = plugged
        """,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "majordomus.testing: plugged, on in-process fakeredis" in ran.stdout
    assert "1 passed" in ran.stdout
    assert "majordomus.testing: 1 environment on in-process fakeredis" in ran.stdout


@pytest.mark.process
@pytest.mark.slow
def test_a_suite_that_does_not_use_it_hears_nothing_of_it(tmp_path: Path) -> None:
    (tmp_path / "test_plain.py").write_text("def test_nothing():\n    assert True\n")
    ran = _pytest_in(tmp_path, "[pytest]\n")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "majordomus.testing" not in ran.stdout + ran.stderr  # (pytest lists it among plugins)


@pytest.mark.usefixtures("spawns")
def test_loading_the_plugin_imports_nothing_heavy() -> None:
    heavy = ("majordomus.engine", "majordomus.workers", "majordomus.testing.environment",
             "arq", "fakeredis", "redis", "msgspec")
    probe = (
        "import sys, majordomus.testing.plugin; "
        f"print([m for m in {heavy!r} if m in sys.modules])"
    )
    ran = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "[]"
