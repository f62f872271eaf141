"""What every command of `majordomus` says and shares: the help texts made from a
capability's declaration, the exit codes, and the `--format` and `--api` options.

Nothing here reads the registry or runs anything: `commands` makes the commands, `tree`
mounts them.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape

if TYPE_CHECKING:
    from majordomus.registry import Capability

__all__ = ["escape"]

INTERRUPTED = 130
"""Exit code when following stopped on a second Ctrl-C (the execution left running)."""

EXIT_CODES_HELP = (
    "Exit codes: 0 succeeded; 1 failed (internal, or an error of its own code below); "
    "2 invalid input; 3 cancelled; 4 not found; 5 refused; 6 forbidden; "
    "7 unavailable (Redis or the API unreachable, or its worker lost); 8 timed out; "
    f"{INTERRUPTED} stopped following on a second Ctrl-C (the execution goes on)."
)

GROUP_HELP = {
    "executions": "Inspect, follow, wait on and cancel executions.",
    "capabilities": "What this majordomus can do: every declared capability.",
    "episodes": "The episodes of MCP clients: list them, close one.",
}


class Format(enum.StrEnum):
    text = "text"
    json = "json"


FORMAT_HELP = "text for people; json for scripts (the capability's answer exactly)."
API_HELP = (
    "Go through the majordomus API at URL instead of straight to Redis "
    "(default: MAJORDOMUS_API_URL; with neither it nor MAJORDOMUS_REDIS_URL, the API of a "
    "running majordomus dev; token: MAJORDOMUS_API_TOKEN)."
)


def format_option() -> Any:
    return typer.Option(Format.text, "--format", help=FORMAT_HELP, case_sensitive=False)


def api_option() -> Any:
    return typer.Option(None, "--api", metavar="URL", help=API_HELP)


# -- help texts ----------------------------------------------------------------------------------

FOLLOWING_HELP = (
    "Ctrl-C asks it to cancel and keeps following until it stops; a second Ctrl-C leaves it "
    "running and says how to follow it again (majordomus follow ID). Not on a terminal: plain "
    "lines, no bar. --detach starts it, prints its id and returns; --format json prints the "
    "final snapshot (with --detach: the queued one)."
)


def command_help(cap: Capability) -> str:
    e = cap.exposure
    where = [f"capability {cap.id} ({cap.kind})"]
    if e.http_method and e.http_path:
        where.append(f"HTTP {e.http_method} {e.http_path}")
    if e.mcp_tool:
        where.append(f"MCP tool {e.mcp_tool}")
    text = f"{cap.title}.\n\n{cap.description}\n\n" + "; ".join(where) + "."
    if cap.executable:
        text += (
            " It runs as an execution on the workers, followed live to its end as "
            f"majordomus run {cap.id} does; --format json prints its output. {FOLLOWING_HELP}"
        )
    return escape(text)


def run_help(start: Capability) -> str:
    """`majordomus run --help`: what run does, from start to end, in one description."""
    e = start.exposure
    where = [f"HTTP {e.http_method} {e.http_path}"] if e.http_method and e.http_path else []
    if e.mcp_tool:
        where.append(f"MCP tool {e.mcp_tool}")
    reached = f" ({', '.join(where)})" if where else ""
    return escape(
        "Start a capability as an execution and follow it live to its end: a progress bar, "
        "the steps as they start and finish, the log lines, then its output, or its error "
        "with a suggestion.\n\n"
        "Each capability that can run is a command below, its input as options "
        "(majordomus run executions.demonstrate --steps 10 --delay-ms 500), or whole as "
        "--input JSON or --input-file FILE; options given beside --input replace its members. "
        f"{FOLLOWING_HELP}\n\n"
        f"The start itself is the capability {start.id}{reached}, which answers at once "
        "with the queued execution; run goes on to follow it.\n\n"
        f"{EXIT_CODES_HELP}"
    )


def run_capability_help(cap: Capability | None) -> str:
    """`majordomus run CAP --help`: the capability, then how run starts and follows it."""
    if cap is None:
        head = "Start the capability named CAP with --input JSON and follow it to its end."
    else:
        head = (
            f"Run {cap.id} as an execution and follow it live to its end.\n\n"
            f"{cap.title}: {cap.description}\n\n"
            "Its input as the options below, or whole as --input JSON or --input-file FILE; "
            "options given beside --input replace its members."
        )
    return escape(f"{head}\n\n{FOLLOWING_HELP}\n\n{EXIT_CODES_HELP}")


def group_help(prefix: tuple[str, ...]) -> str:
    return GROUP_HELP.get(prefix[-1], f"The {' '.join(prefix)} capabilities.")
