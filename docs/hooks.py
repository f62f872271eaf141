"""MkDocs hooks: the reference pages' generated parts, made from the code as the site builds.

A page says `<!-- generated: NAME -->` on a line of its own where a generated part goes;
`on_page_markdown` puts the part there, made by `GENERATED[NAME]` from the one declaration
of the thing described: the settings from `majordomus.config.Settings`, the capabilities,
their MCP tools and HTTP routes from the registry of the built-ins (and the OpenAPI
document projected from it), the CLI's commands from the command tree `majordomus` itself
builds from that registry, each with the help it prints. Nothing generated is written to
`docs/`, so nothing can be stale; an unknown name fails the build. What is not generated
here is not the hooks' business: prose, and the metrics table (checked against a scrape by
tests/api/test_metrics.py).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from functools import cache
from typing import Any

# The site describes majordomus itself: the built-ins, whatever modules the shell that builds
# it would load (the CLI's tree reads the variable).
os.environ.pop("MAJORDOMUS_CAPABILITIES", None)

GENERATED_MARK = re.compile(r"^<!-- generated: ([a-z_]+) -->$", re.M)
HELP_COLUMNS = 100


@cache
def _registry() -> Any:
    from majordomus.loading import load_capabilities

    return load_capabilities([])


def settings() -> str:
    from majordomus.docs import settings_table

    return settings_table()


def capabilities() -> str:
    from majordomus.docs import capabilities_reference

    return capabilities_reference(_registry())


def mcp_tools() -> str:
    from majordomus.docs import mcp_tools_table

    return mcp_tools_table(_registry())


def http_routes() -> str:
    """Every operation of the OpenAPI document (`/openapi.json`), as the API serves it."""
    from majordomus.api.openapi import openapi_document
    from majordomus.docs import anchor

    document = openapi_document(_registry())
    lines = ["| method | path | capability | what it does |", "|---|---|---|---|"]
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            cap_id = operation["operationId"]
            named = f"`{cap_id}`"
            if cap_id in _registry():  # else the API's own (the probes)
                named = f"[{named}](capabilities.md#{anchor(cap_id)})"
            lines.append(
                f"| `{method.upper()}` | `{path}` | {named} | {operation.get('summary', '')} |"
            )
    return "\n".join(lines) + "\n"


def cli() -> str:
    """Every command of `majordomus`, each with the help `--help` prints: the process
    commands, then the capabilities' commands as the registry makes them; under `run`, one
    command per capability that runs as an execution, the first shown whole."""
    out = []
    runnable = [p[1] for p, _ in _commands() if p[:1] == ("run",) and len(p) == 2]
    for path, _group in _commands():
        if path[:1] == ("run",) and len(path) == 2 and path[1] != runnable[0]:
            continue
        title = " ".join(("majordomus", *path))
        out.append(f"### `{title}`\n\n```text\n{_help(path)}\n```\n")
        if path == ("run",):
            out.append(
                "One command per capability that runs as an execution: "
                + ", ".join(f"`majordomus run {name}`" for name in runnable)
                + ". Each takes its capability's input members as options, as its own "
                "command does, and `executions.start`'s (`--start-at`, `--start-delay-ms` "
                "where the capability has a `delay_ms` of its own, `--priority`, "
                "`--idempotency-key`, `--timeout-ms`); the first:\n"
            )
    return "\n".join(out)


@cache
def _app() -> Any:
    from majordomus.cli.app import app
    from majordomus.cli.tree import register

    register(app)
    return app


def _commands() -> list[tuple[tuple[str, ...], bool]]:
    """Every command's path under `majordomus`, and whether it is a group, depth first in
    the order `--help` lists them."""
    import typer

    root = typer.main.get_command(_app())
    return list(_walk(root, root.context_class(root, info_name="majordomus"), ()))


def _walk(command: Any, ctx: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], bool]]:
    names = command.list_commands(ctx) if hasattr(command, "list_commands") else None
    if path:
        yield path, names is not None
    for name in names or ():
        sub = command.get_command(ctx, name)
        if sub is not None and not getattr(sub, "hidden", False):
            yield from _walk(sub, sub.context_class(sub, info_name=name, parent=ctx), (*path, name))


def _help(path: tuple[str, ...]) -> str:
    from typer.testing import CliRunner

    env = {"COLUMNS": str(HELP_COLUMNS), "NO_COLOR": "1", "TERM": "dumb"}
    ran = CliRunner().invoke(_app(), [*path, "--help"], prog_name="majordomus", env=env)
    if ran.exit_code != 0:
        raise RuntimeError(f"majordomus {' '.join(path)} --help failed: {ran.output}")
    return "\n".join(line.rstrip() for line in ran.output.strip("\n").splitlines())


GENERATED: dict[str, Callable[[], str]] = {
    "settings": settings,
    "capabilities": capabilities,
    "mcp_tools": mcp_tools,
    "http_routes": http_routes,
    "cli": cli,
}


def generate(name: str) -> str:
    if name not in GENERATED:
        raise KeyError(f"<!-- generated: {name} -->: no such part (known: {sorted(GENERATED)})")
    return GENERATED[name]()


def on_page_markdown(markdown: str, **_: Any) -> str:
    return GENERATED_MARK.sub(lambda found: generate(found[1]), markdown)
