"""What `pip install majordomus` puts in an application's environment.

The repository keeps `api/` and `workers/` at its top level, but an install must not: an
application with a package of its own named `api` would get one of the two at random. They
install as `majordomus.api` and `majordomus.workers` (links inside the package). And an
application that only starts and follows executions installs no web framework, MCP SDK or
CLI library (those are `majordomus[server]`) and imports none of them.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SERVER_ONLY = ("litestar", "mcp", "typer", "rich", "uvicorn", "arq", "fakeredis")
"""What the API, the workers and the CLI need, and a producer does not."""
NOT_IMPORTED = tuple(m for m in SERVER_ONLY if m != "rich")
"""What a producer's process must not import. Not `rich`: httpx imports it for its own
command line when it happens to be installed (here, beside the server), and a producer's
install has none."""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    source = tmp_path_factory.mktemp("source")
    for name in ("majordomus", "api", "workers"):
        shutil.copytree(
            ROOT / name, source / name, symlinks=True,
            ignore=shutil.ignore_patterns("__pycache__"),
        )  # fmt: skip
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    out = tmp_path_factory.mktemp("wheel")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    [path] = out.glob("majordomus-*.whl")
    return zipfile.ZipFile(path)


@pytest.mark.usefixtures("spawns")
def test_the_wheel_installs_one_top_level_name(wheel: zipfile.ZipFile) -> None:
    names = wheel.namelist()
    tops = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith(".dist-info")}
    assert tops == {"majordomus"}
    for module in ("majordomus/api/app.py", "majordomus/workers/worker.py",
                   "majordomus/api/console/static/app.js", "majordomus/store/lua/take.lua",
                   "majordomus/client/client.py", "majordomus/py.typed"):  # fmt: skip
        assert module in names, module
    [metadata] = [n for n in names if n.endswith(".dist-info/METADATA")]
    text = wheel.read(metadata).decode()
    required = [
        Requirement(line.split(":", 1)[1].strip())
        for line in text.splitlines()
        if line.startswith("Requires-Dist:")
    ]
    unconditional = {r.name for r in required if r.marker is None}
    assert not unconditional & set(SERVER_ONLY), unconditional
    server = {r.name for r in required if r.marker is not None and "server" in str(r.marker)}
    assert set(SERVER_ONLY) <= server


def test_the_extras_that_run_servers_bring_the_server_dependencies() -> None:
    extras = PYPROJECT["project"]["optional-dependencies"]
    for extra in ("dev", "test", "bench"):
        assert "majordomus[server]" in extras[extra], extra


@pytest.mark.usefixtures("spawns")
def test_no_top_level_api_or_workers_module_is_imported_anywhere() -> None:
    """Everything imports `majordomus.api` and `majordomus.workers`; were one module to
    import `api` from the repository's root, it would be a second copy of it."""
    done = subprocess.run(
        [sys.executable, "-c",
         "import sys, majordomus.api.app, majordomus.workers.worker, majordomus.cli.processes;"
         "print(sorted(m for m in sys.modules if m.split('.')[0] in ('api', 'workers')))"],
        capture_output=True, text=True, cwd="/", timeout=120, check=True,
    )  # fmt: skip
    assert done.stdout.strip() == "[]"


PRODUCER = """
import sys, time
began = time.perf_counter()
import majordomus
client = majordomus.SyncClient(sys.argv[1])
imported = time.perf_counter() - began
execution = client.start("executions.demonstrate", {"steps": 3})
snapshot = execution.refresh()
client.close()
heavy = sorted({m.split(".")[0] for m in sys.modules} & set(sys.argv[2].split(",")))
print(snapshot.capability, heavy)
"""


@pytest.mark.parametrize("transport", ["redis", "http"])
@pytest.mark.usefixtures("spawns")
def test_a_producer_imports_no_web_framework_mcp_sdk_cli_or_worker(
    transport: str, redis_url: str
) -> None:
    url = redis_url if transport == "redis" else "http://127.0.0.1:9"
    code = PRODUCER if transport == "redis" else PRODUCER.replace(
        'execution = client.start("executions.demonstrate", {"steps": 3})\n'
        "snapshot = execution.refresh()\n",
        "try:\n    client.get('x-20261206T000000Z-00000000')\nexcept majordomus.MajordomusError:\n"
        "    pass\nsnapshot = type('S', (), {'capability': 'executions.demonstrate'})\n",
    )
    done = subprocess.run(
        [sys.executable, "-c", code, url, ",".join(NOT_IMPORTED)],
        capture_output=True, text=True, cwd="/", timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["executions.demonstrate", "[]"], done.stdout
