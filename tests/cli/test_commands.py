"""The capability commands are projections of the registry: one per CLI path, options from
the input type, help from the description, `--format json` the answer exactly; bad input is
one clear line and an exit code, never a traceback."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import msgspec
import pytest
import typer
from rich.markup import escape
from typer.testing import CliRunner

from majordomus.cli import app
from majordomus.cli.commands import capability_command
from majordomus.cli.tree import register
from majordomus.engine import Engine
from majordomus.errors import EXIT_CODE
from majordomus.registry import REGISTRY, Registry, capability
from majordomus.store.connect import connect
from tests.cli.conftest import Cli
from tests.conftest import ROOT


def click_command(path: tuple[str, ...]) -> Any:
    """The command at a path of the real CLI (typer ships its own click, so duck-typed)."""
    register(app)
    command: Any = typer.main.get_command(app)
    for name in path:
        assert hasattr(command, "commands"), f"{name} of {path} is not under a group"
        command = command.commands[name]
    return command


def is_argument(param: Any) -> bool:
    return bool(param.param_type_name == "argument")


def test_every_capability_with_a_cli_path_is_a_command_whose_options_are_its_input() -> None:
    exposed = [c for c in REGISTRY if c.exposure.cli_path]
    assert {"executions.get", "executions.events", "capabilities.describe"} <= {
        c.id for c in exposed
    }
    for cap in exposed:
        assert cap.exposure.cli_path is not None
        if cap.id == "executions.start":
            continue  # `run CAP`: a command per capability that can run, checked on its own
        command = click_command(cap.exposure.cli_path)
        names = {p.name for p in command.params}
        assert {"output_format", "api"} <= names
        assert ("watch_" in names) == (cap.kind == "query" and not cap.executable), cap.id
        members = set(cap.input_schema.get("properties", {}))
        flags = {o.lstrip("-") for p in command.params for o in p.opts if o.startswith("--")}
        arguments = {str(p.metavar).lower() for p in command.params if is_argument(p)}
        for member in members:
            assert member.replace("_", "-") in flags | arguments, (cap.id, member)
        assert escape(cap.description.split(".")[0]) in (command.help or "")


def test_a_required_id_is_a_positional_argument_and_the_rest_are_options(cli: Cli) -> None:
    command = click_command(("executions", "events"))
    [argument] = [p for p in command.params if is_argument(p)]
    assert argument.name == "in_0" and argument.required
    help_text = cli("executions", "events", "--help").stdout
    assert "--after" in help_text and "--limit" in help_text and "--format" in help_text
    assert "Only events after this sequence number" in help_text  # the member's docstring
    assert "GET /api/v1/executions/events" in help_text


def test_format_json_is_the_capabilitys_answer_exactly(cli: Cli, redis_url: str) -> None:
    async def direct() -> tuple[Any, Any]:
        redis = connect(redis_url)
        from majordomus.config import settings

        engine = Engine(redis, REGISTRY, settings())
        try:
            described = await engine.invoke(
                "capabilities.describe", {"id": "executions.demonstrate"}
            )
            listed = await engine.invoke("executions.list", {"limit": 5})
            return msgspec.to_builtins(described), msgspec.to_builtins(listed)
        finally:
            await redis.aclose()

    described, listed = asyncio.run(direct())
    assert cli.json("capabilities", "describe", "executions.demonstrate") == described
    assert cli.json("executions", "list", "--limit", "5") == listed


def test_options_are_typed_by_the_input_schema(cli: Cli, workers: Any) -> None:
    workers.start()
    # A capability that runs is run on a worker and followed to its end; --format json
    # prints its output, as its route answers it.
    out = cli.json("executions", "demonstrate", "--steps", "2", "--log-lines", "3")
    assert out["steps"] == 2 and out["observed"] is True
    bad = cli("executions", "demonstrate", "--steps", "many")
    assert bad.exit_code == EXIT_CODE["invalid_input"]
    assert bad.stderr.startswith(
        "majordomus: invalid_input: /steps: 'many' is not of type 'integer'"
    )


def test_text_output_is_a_table_for_people(cli: Cli) -> None:
    listed = cli("capabilities", "list")
    assert listed.exit_code == 0
    assert "executions.demonstrate" in listed.stdout and "majordomus run" in listed.stdout
    shown = cli("capabilities", "describe", "executions.demonstrate")
    assert "GET /api/v1/executions/demonstrate" in shown.stdout
    assert "Steps to walk; bound 100." in shown.stdout
    protocol = cli("executions", "protocol")
    assert "stream_events" in protocol.stdout and "GET /events" in protocol.stdout


class Flags(msgspec.Struct, forbid_unknown_fields=True):
    loud: bool = False
    """Shout."""
    tags: list[str] = []
    extra: Any = None


class Echoed(msgspec.Struct):
    loud: bool
    tags: list[str]
    extra: Any


def test_booleans_are_flags_and_structured_members_take_json(cli: Cli) -> None:
    private = Registry()

    # Answered here and now (not run on a worker, which would not know it): options only.
    @capability(
        "probe.flags", input=Flags, output=Echoed, kind="query", registry=private, executable=False
    )
    async def flags(ctx: Any, inp: Flags) -> Echoed:
        return Echoed(inp.loud, inp.tags, inp.extra)

    cap = private.require("probe.flags")
    sub = typer.Typer()
    sub.command("flags")(capability_command(cap))
    sub.command("other")(lambda: None)  # a group, so the command keeps its name
    REGISTRY.add(cap)  # the engine runs what the process registry holds
    try:
        result = CliRunner().invoke(
            sub,
            ["flags", "--loud", "--tags", '["a", "b"]', "--extra", '{"k": 1}', "--format", "json"],
            env=cli.env,
        )
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout) == {"loud": True, "tags": ["a", "b"], "extra": {"k": 1}}
        plain = CliRunner().invoke(
            sub, ["flags", "--extra", "words", "--format", "json"], env=cli.env
        )
        assert json.loads(plain.stdout)["extra"] == "words"
        negated = CliRunner().invoke(sub, ["flags", "--no-loud", "--format", "json"], env=cli.env)
        assert json.loads(negated.stdout)["loud"] is False
    finally:
        del REGISTRY._by_id["probe.flags"]  # no registry API forgets a capability


@pytest.mark.parametrize(
    ("args", "code", "said"),
    [
        (["run", "nope.nothing"], "not_found", "there is no capability 'nope.nothing'"),
        (
            ["run", "executions.demonstrate", "--input", "{steps: 3"],
            "invalid_input",
            "--input is not valid JSON",
        ),
        (
            ["executions", "show", "x-not-an-id"],
            "invalid_input",
            "'x-not-an-id' is not an execution id",
        ),
        (
            ["executions", "cancel", "x-20260101T000000Z-00000000"],
            "not_found",
            "there is no execution",
        ),
        (
            ["run", "executions.list"],
            "refused",
            "answers directly and is not started as an execution",
        ),
    ],
)
def test_bad_input_is_one_line_on_stderr_and_an_exit_code(
    cli: Cli, args: list[str], code: str, said: str
) -> None:
    result = cli(*args)
    assert result.exit_code == EXIT_CODE[code]
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"majordomus: {code}: ")
    assert said in result.stderr
    assert "Traceback" not in result.output


def test_bad_input_with_format_json_also_prints_the_error_envelope(cli: Cli) -> None:
    result = cli("executions", "show", "nope", "--format", "json")
    assert result.exit_code == 2
    assert json.loads(result.stdout)["error"]["code"] == "invalid_input"


def elsewhere(cli: Cli, redis_url: str) -> None:
    """Point the CLI at another Redis URL (settings are read once: read them again)."""
    from majordomus.config import settings

    cli.env["MAJORDOMUS_REDIS_URL"] = redis_url
    settings.cache_clear()


def test_an_unreachable_redis_is_one_line_and_unavailable(cli: Cli) -> None:
    elsewhere(cli, "redis://127.0.0.1:9/0")
    for args in (["executions", "list"], ["queue"], ["run", "executions.demonstrate"]):
        result = cli(*args)
        assert result.exit_code == EXIT_CODE["unavailable"] == 7, result.output
        assert result.stderr.count("\n") == 1
        assert "cannot reach Redis at redis://127.0.0.1:9/0" in result.stderr
        assert "MAJORDOMUS_REDIS_URL" in result.stderr and "Traceback" not in result.output


def test_a_redis_url_that_is_no_url_is_named(cli: Cli) -> None:
    elsewhere(cli, "redis+sentinel://a:26379")
    result = cli("executions", "list")
    assert result.exit_code == EXIT_CODE["invalid_input"]
    assert "is not a Redis URL" in result.stderr


def test_an_unreachable_api_is_one_line_and_unavailable(cli: Cli) -> None:
    result = cli("executions", "list", "--api", "http://127.0.0.1:9")
    assert result.exit_code == 7
    assert result.stderr.count("\n") == 1
    assert "cannot reach the API at http://127.0.0.1:9" in result.stderr


def test_run_has_a_command_per_capability_that_can_run_with_its_input_as_options() -> None:
    runnable = [c for c in REGISTRY if c.executable]
    assert "executions.demonstrate" in {c.id for c in runnable}
    for cap in runnable:
        command = click_command(("run", cap.id))
        flags = {o for p in command.params for o in p.opts if o.startswith("--")}
        assert {"--input", "--input-file", "--detach", "--format", "--api"} <= flags, cap.id
        for member in cap.input_schema.get("properties", {}):
            assert "--" + member.replace("_", "-") in flags, (cap.id, member)
        # --input may carry any member, so none is required or positional on its own
        assert not any(p.required or is_argument(p) for p in command.params), cap.id
    controls = [c.id for c in REGISTRY if not c.executable]
    assert not set(controls) & set(click_command(("run",)).commands)


def test_run_help_is_one_description_of_starting_and_following(cli: Cli) -> None:
    group = cli("run", "--help")
    assert group.exit_code == 0, group.output
    text = " ".join(group.stdout.split())
    assert "Start a capability as an execution and follow it live to its end" in text
    assert "majordomus run executions.demonstrate --steps 10 --delay-ms 500" in text
    assert "which answers at once with the queued execution; run goes on to follow it" in text
    assert "executions.demonstrate" in text and "Demonstrate an execution" in text
    assert "Follow it with executions.events" not in text  # the start's own, not run's

    one = cli("run", "executions.demonstrate", "--help")
    assert one.exit_code == 0, one.output
    text = " ".join(one.stdout.split())
    assert "Run executions.demonstrate as an execution and follow it live to its end" in text
    for flag in ("--steps", "--delay-ms", "--fail-at", "--log-lines", "--input", "--detach"):
        assert flag in text
    assert "Steps to walk; bound 100." in text  # the member's own docstring


def test_the_docs_run_the_demonstration_with_options_that_show_the_bar() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    text = "\n".join(page.read_text() for page in pages)
    runs = re.findall(r"majordomus run executions\.demonstrate((?: --[a-z-]+ \d+)+)", text)
    assert runs, "no page shows `majordomus run executions.demonstrate --steps N ...`"
    command = click_command(("run", "executions.demonstrate"))
    flags = {o for p in command.params for o in p.opts}
    for given in runs:
        options = dict(zip(given.split()[::2], map(int, given.split()[1::2]), strict=True))
        assert set(options) <= flags, given
        # The bar is visible for as long as the steps take: a second at least.
        assert options.get("--steps", 3) * options.get("--delay-ms", 0) >= 1000, given
