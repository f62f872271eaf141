"""A command imports what it needs, and `majordomus --help` little more than typer and rich.

A regression guard, read from `python -X importtime` (every module a process imported, in
the order it did), never from a clock: the help imports neither the registry nor a
built-in's declaration (the tree is mounted from the built-ins' outlines, as written, which
must be current and mount the same tree as the registry), nor anything only running a
command needs (the engine, the Redis client, httpx, asyncio, the loggers...); a command
that reaches Redis imports the Redis client without PyJWT and cryptography, which it
imports for a kind of authentication no command uses.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

NOT_FOR_THE_HELP = (
    # what declaring the capabilities imports: the tree is mounted from their outlines
    "majordomus.registry",
    "majordomus.loading",
    "majordomus.builtins",
    "majordomus.model",
    "majordomus.schemas",
    "majordomus.schedules",
    "majordomus.retries",
    "majordomus.episodes",
    "majordomus.reports",
    "majordomus.ids",
    "majordomus.docs",
    # what making and running a command imports
    "majordomus.cli.commands",
    "majordomus.cli.transport",
    "majordomus.cli.render",
    "majordomus.engine",
    "majordomus.context",
    "majordomus.metrics",
    "majordomus.store",
    "redis",
    "hiredis",
    "jwt",
    "cryptography",
    "prometheus_client",
    "httpx",
    "httpx_sse",
    "jsonschema",
    "arq",
    "asyncio",
    "logging",
    "socket",
    "ssl",
    "json",
    "secrets",
    # the API's and the worker's side
    "majordomus.api",
    "majordomus.workers",
    "litestar",
    "uvicorn",
    "mcp",
    # what typer and rich would import for help this CLI never draws
    "pydantic",
    "rich.markdown",
    "markdown_it",
    "rich.traceback",
    "pygments",
)
"""Modules (and their submodules) that `majordomus --help` imports none of."""

NOT_FOR_A_COMMAND = ("jwt", "cryptography.x509", "cryptography.hazmat.primitives.asymmetric")
"""What a command that reaches Redis imports none of (PyJWT, and what PyJWT imports)."""


def environment(**extra: str) -> dict[str, str]:
    """This environment without MAJORDOMUS_* (the built-in capabilities only), on ROOT."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAJORDOMUS_")}
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra)
    return env


def python(code: str) -> subprocess.CompletedProcess[str]:
    """`python -c code` in `environment()`, from ROOT."""
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=environment(),
        cwd=ROOT,
        timeout=120,
        check=False,
    )


def imported(argv: list[str], env: dict[str, str], code: str | None = None) -> tuple[list[str], str]:
    """Every module `python -X importtime` says a process imported (in order), and what it
    printed (stdout, then the rest of stderr): `python -m majordomus.cli ARGV`, or `code`
    with ARGV as its arguments."""
    head = ["-c", code] if code is not None else ["-m", "majordomus.cli"]
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *head, *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    modules, said = [], []
    for line in done.stderr.splitlines(keepends=True):
        if not line.startswith("import time:"):
            said.append(line)
        elif line.rstrip().endswith("| imported package"):
            continue
        else:
            modules.append(line.rsplit("|", 1)[1].strip())
    assert modules, done.stderr[-2000:]
    return modules, done.stdout + "".join(said)


def under(modules: list[str], roots: tuple[str, ...]) -> list[str]:
    return [m for m in modules if any(m == r or m.startswith(r + ".") for r in roots)]


def test_the_help_imports_neither_a_declaration_nor_what_running_needs() -> None:
    modules, shown = imported(["--help"], environment())
    assert "Commands" in shown and "executions" in shown and "run" in shown, shown
    assert "majordomus.cli.builtin_outlines" in modules  # mounted from the written outlines
    assert under(modules, NOT_FOR_THE_HELP) == []


def test_the_help_with_a_redis_and_a_key_prefix_named_imports_no_more() -> None:
    # The settings are read (a bad one stops every command), the Redis is not reached.
    env = environment(
        MAJORDOMUS_REDIS_URL="redis://127.0.0.1:1/0", MAJORDOMUS_KEY_PREFIX="elsewhere"
    )
    modules, shown = imported(["--help"], env)
    assert "Commands" in shown
    assert under(modules, NOT_FOR_THE_HELP) == []


def test_a_bad_setting_stops_the_help_as_it_stops_every_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "majordomus.cli", "--help"],
        capture_output=True,
        text=True,
        env=environment(MAJORDOMUS_MAX_JOBS="many"),
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0 and "bad configuration" in done.stderr, done.stderr


FROM_THE_REGISTRY = """
import sys
import majordomus.registry  # a process that declared: the tree is mounted from the registry
from majordomus.cli.app import main
sys.argv = ["majordomus", *sys.argv[1:]]
try:
    main()
except SystemExit as exc:
    print("exit", exc.code)
"""

FROM_THE_OUTLINES = FROM_THE_REGISTRY.replace("import majordomus.registry", "pass")


@pytest.mark.parametrize(
    "argv",
    [
        (),
        ("--help",),
        ("run", "--help"),
        ("run", "executions.demonstrate", "--help"),
        ("executions", "--help"),
        ("executions", "list", "--help"),
        ("queue", "--help"),
        ("schedules", "--help"),
        ("follow", "--help"),
        ("exections",),
    ],
)
@pytest.mark.parametrize("colour", [{}, {"FORCE_COLOR": "1", "COLUMNS": "120"}])
def test_the_tree_from_the_outlines_is_the_registrys(
    argv: tuple[str, ...], colour: dict[str, str]
) -> None:
    env = environment(**colour)
    read, from_registry = imported(list(argv), env, FROM_THE_REGISTRY)
    written, from_outlines = imported(list(argv), env, FROM_THE_OUTLINES)
    assert "majordomus.cli.builtin_outlines" in written
    assert from_outlines.strip() and from_outlines == from_registry


CURRENT = """
from majordomus.cli import builtin_outlines
from majordomus.cli.outlines import sources_checksum, written_module
from majordomus.loading import load_capabilities

with open(builtin_outlines.__file__) as file:
    text = file.read()
print(text == written_module(load_capabilities([]), sources_checksum() or "?"))
"""


def test_the_written_outlines_are_the_builtins_as_declared_now() -> None:
    done = python(CURRENT)
    assert done.stdout.split() == ["True"], (
        "majordomus/cli/builtin_outlines.py is not what the built-ins declare now: "
        "write it again with `python -m majordomus.cli.outlines`\n" + done.stderr[-2000:]
    )


STALE = """
import sys
from majordomus.cli import builtin_outlines
builtin_outlines.SOURCES = "stale"  # as if a built-in changed since they were written
from majordomus.cli.tree import outlines
mounted = outlines()
print("registry read:", "majordomus.registry" in sys.modules)
print("run" in [o.exposure.cli_path[0] for o in mounted])
"""


def test_outlines_written_from_other_sources_are_passed_over_for_the_registry() -> None:
    done = python(STALE)
    assert done.stdout.splitlines() == ["registry read: True", "True"], done.stderr[-2000:]


def test_a_command_on_redis_imports_the_client_without_pyjwt(redis_url: str) -> None:
    modules, shown = imported(["queue", "--format", "json"], environment(MAJORDOMUS_REDIS_URL=redis_url))
    assert '"queued"' in shown, shown
    assert "redis.auth.token" in modules and "majordomus.engine" in modules
    assert under(modules, NOT_FOR_A_COMMAND) == []


PYJWT_ON_USE = """
import base64, json, sys
from majordomus.cli.startup import import_on_use
import_on_use()
import redis.asyncio
from redis.auth.token import JWToken
print("before:", "jwt" in sys.modules)

def part(value):
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

token = JWToken(".".join([part({"alg": "HS256", "typ": "JWT"}), part({"oid": "me", "exp": 4102444800, "iat": 1}), "c2ln"]))
print("oid:", token.try_get("oid"))
print("after:", "jwt" in sys.modules)
import jwt, redis.auth.token
print("same:", redis.auth.token.jwt.decode is jwt.decode)
"""


def test_the_redis_client_imports_pyjwt_when_it_uses_it() -> None:
    done = python(PYJWT_ON_USE)
    assert done.stdout.splitlines() == [
        "before: False",
        "oid: me",
        "after: True",
        "same: True",
    ], done.stderr[-2000:]
