"""`majordomus --help` loads what drawing the command list needs, and nothing a command
only needs when it runs: not the engine, the handler context, the Redis client, httpx,
nor the API's or the worker's side; nor what typer and rich would load for help they do
not draw (pydantic, Markdown, syntax highlighting). A command is made when it is first
used, so `--help` reads no input schema and a command reads its own capability's alone,
with the same help either way. A command line is parsed without pydantic, each value
exactly as typer would convert it. A command starts with the cyclic collector off and
leaves it as it found it; a process command serves with it on."""

from __future__ import annotations

import enum
import os
import subprocess
import sys

import pytest
import typer
from typer.testing import CliRunner

from majordomus.cli.startup import PlainCommand
from tests.conftest import ROOT

RUN_ONLY = (
    "majordomus.engine",
    "majordomus.context",
    "majordomus.store.executions",
    "redis",
    "httpx",
    "arq",
    "litestar",
    "uvicorn",
    "mcp",
    "jsonschema",
)
"""Modules a command loads when it runs, never to show the help."""

NEVER_FOR_HELP = (
    "pydantic",
    "rich.markdown",
    "markdown_it",
    "rich.traceback",
    "rich.syntax",
    "pygments",
)
"""Modules typer and rich would load for help this CLI never draws: pydantic to convert the
options' values, Markdown help and pretty tracebacks."""

PROBE = """
import sys
if {whole!r}:
    import typer.rich_utils  # typer's help formatter, imported as typer imports it
import majordomus.registry
from majordomus.cli.app import main
read = []
schema_of = majordomus.registry.schema_of
def reading(tp):
    read.append(tp.__name__)
    return schema_of(tp)
majordomus.registry.schema_of = reading
sys.argv = ["majordomus", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
print("schemas:", *sorted(set(read)), file=sys.stderr)
print("loaded:", *(m for m in {modules!r} if m in sys.modules), file=sys.stderr)
"""


def child_environment() -> dict[str, str]:
    """This environment, without MAJORDOMUS_* (the built-in capabilities only), on ROOT."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MAJORDOMUS_")}
    environ["PYTHONPATH"] = str(ROOT)
    return environ


def probe(*argv: str, whole: bool = False, **env: str) -> tuple[set[str], str, str]:
    """`majordomus ARGV` in a process of its own (the built-in capabilities only): the
    modules of `RUN_ONLY` and `NEVER_FOR_HELP` it loaded, what it printed on stdout, and
    the rest of its stderr (ending with a line `schemas: ...` naming the types whose JSON
    Schema the registry read). `whole`: with typer's help formatter imported first, whole."""
    environ = child_environment()
    environ.update(env)
    modules = [*RUN_ONLY, *NEVER_FOR_HELP]
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(modules=modules, whole=whole), *argv],
        capture_output=True,
        text=True,
        env=environ,
        timeout=120,
        check=False,
    )
    said, _, loaded = done.stderr.rpartition("loaded:")
    return set(loaded.split()), done.stdout, said


def loaded_by(*argv: str) -> tuple[set[str], str]:
    """The run-only (and never-for-help) modules loaded by `majordomus ARGV`, and what it
    printed."""
    loaded, shown, _ = probe(*argv)
    return loaded, shown


def schemas_read(said: str) -> set[str]:
    return set(said.rpartition("schemas:")[2].split())


def test_the_help_loads_nothing_a_command_only_needs_to_run() -> None:
    loaded, shown = loaded_by("--help")
    assert "executions" in shown and "run" in shown
    assert loaded == set(), f"majordomus --help loaded {sorted(loaded)}"


def test_the_help_lists_the_commands_without_reading_an_input_schema() -> None:
    _, shown, said = probe("--help")
    assert "queue" in shown and "workers" in shown
    assert schemas_read(said) == set()


def test_a_command_reads_the_input_schemas_of_its_own_capability_alone() -> None:
    _, _, said = probe("run", "executions.demonstrate", "--input", "{bad")
    assert schemas_read(said) == {"DemoInput", "StartInput"}  # its input, and run's own
    _, _, said = probe("executions", "show", "--help")
    assert schemas_read(said) == {"GetInput"}


def test_a_group_is_made_when_used_and_its_help_names_its_commands() -> None:
    loaded, shown = loaded_by("executions", "--help")
    for name in ("list", "show", "events", "cancel", "wait"):
        assert name in shown, shown
    assert loaded == set(), f"majordomus executions --help loaded {sorted(loaded)}"


def test_the_help_of_run_and_of_one_capability_under_it_loads_nothing_to_run() -> None:
    for argv in (("run", "--help"), ("run", "executions.demonstrate", "--help")):
        loaded, shown = loaded_by(*argv)
        assert "executions.demonstrate" in shown or "--steps" in shown, shown
        assert loaded == set(), f"majordomus {' '.join(argv)} loaded {sorted(loaded)}"


@pytest.mark.parametrize(
    "argv",
    [
        ("--help",),
        ("executions", "--help"),
        ("executions", "list", "--help"),
        ("run", "--help"),
        ("run", "executions.demonstrate", "--help"),
        ("follow", "--help"),
        ("worker", "--help"),
    ],
)
@pytest.mark.parametrize("colour", [{}, {"FORCE_COLOR": "1", "COLUMNS": "120"}])
def test_the_help_is_drawn_as_typers_whole_help_formatter_draws_it(
    argv: tuple[str, ...], colour: dict[str, str]
) -> None:
    _, lean, _ = probe(*argv, **colour)
    _, whole, _ = probe(*argv, whole=True, **colour)
    assert lean.strip() and lean == whole


def test_a_command_line_is_parsed_without_pydantic() -> None:
    # Bad JSON is refused before anything is reached: what ran is the parsing alone.
    loaded, _, said = probe("run", "executions.demonstrate", "--input", "{bad", "--steps", "2")
    assert "--input is not valid JSON" in said, said
    assert "pydantic" not in loaded, f"parsing run's options loaded {sorted(loaded)}"


class Colour(enum.Enum):
    red = "red"
    green = "green"


def received(make_plain: bool, *argv: str) -> tuple[int, str]:
    """What a command of every kind of parameter the CLI uses received from `argv` (or the
    error it answered), as a `PlainCommand` or as typer's own."""
    app = typer.Typer()

    @app.command(cls=PlainCommand if make_plain else None)
    def command(
        name: str = typer.Argument(...),
        text: str | None = typer.Option(None, "--text"),
        flag: bool = typer.Option(False, "--flag"),
        maybe: bool | None = typer.Option(None, "--maybe/--no-maybe"),
        count: int = typer.Option(0, "--count"),
        every: float = typer.Option(1.0, "--every"),
        colour: Colour = typer.Option(Colour.red, "--colour", case_sensitive=False),
    ) -> None:
        typer.echo(repr((name, text, flag, maybe, count, every, colour)))

    done = CliRunner().invoke(app, list(argv))
    return done.exit_code, done.output


@pytest.mark.parametrize(
    "argv",
    [
        ("x",),
        ("x", "--text", "é\udcff", "--flag", "--maybe"),
        ("x", "--no-maybe", "--count", "3", "--every", "0.25", "--colour", "GREEN"),
        ("x", "--count", "three"),
        ("x", "--every", "soon"),
        ("x", "--colour", "blue"),
        ("x", "--count", " 7 ", "--every", "1e3"),
        (),
        ("--help",),
    ],
)
def test_a_plain_command_receives_every_value_and_error_as_typer_would(
    argv: tuple[str, ...],
) -> None:
    assert received(True, *argv) == received(False, *argv)


COLLECTOR = """
import gc, sys, typer
from majordomus.cli.app import app, main
from majordomus.cli.startup import starting
if sys.argv[1:] == ["main"]:
    sys.argv = ["majordomus", "--help"]
    try:
        main()
    except SystemExit:
        print("after", gc.isenabled())
    raise SystemExit
starting()
group = typer.main.get_command(app)
for name in ("queue", "worker"):
    ctx = group.make_context("majordomus", [name], resilient_parsing=True)
    group.resolve_command(ctx, [name])
    print(name, gc.isenabled())
"""


def collector(*argv: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", COLLECTOR, *argv],
        capture_output=True,
        text=True,
        env=child_environment(),
        timeout=120,
        check=True,
    )
    return done.stdout.split()


def test_a_process_command_serves_with_the_collector_on() -> None:
    # A command starts with the cyclic collector off; one that serves for as long as it
    # runs (worker, dev, serve, mcp) turns it back on once it is chosen.
    assert collector() == ["queue", "False", "worker", "True"]


def test_a_command_leaves_the_collector_as_it_found_it() -> None:
    assert collector("main")[-2:] == ["after", "True"]
