"""Documentation read from the code: the reference pages' tables (the fields' docstrings
are read by `majordomus.docstrings`). The documentation site's reference pages are generated from
the one declaration of each thing when the site is built (`docs/hooks.py` puts these
tables where a page says `<!-- generated: NAME -->`): the settings from `Settings`
(`settings_table`), and the capabilities with their HTTP routes, MCP tools and CLI
commands from the registry (`capabilities_reference`, `mcp_tools_table`), so a page cannot
drift from the code. Nothing here is needed to run majordomus; it only describes it.
"""

from __future__ import annotations

from typing import Any

import msgspec

from majordomus.config import ENV_PREFIX, Settings
from majordomus.docstrings import field_docs
from majordomus.registry import Capability, Registry


def env_name(field: str) -> str:
    """The environment variable a setting is read from."""
    return ENV_PREFIX + field.upper()


def _default_text(value: Any) -> str:
    if value is None:
        return "(unset)"
    if isinstance(value, list):
        return "(none)" if not value else ",".join(str(v) for v in value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def settings_rows() -> list[tuple[str, str, str, str]]:
    """(field, environment variable, default, description) of every setting, in order."""
    docs = field_docs(Settings)
    defaults = msgspec.to_builtins(Settings())
    return [
        (name, env_name(name), _default_text(defaults.get(name)), docs.get(name, ""))
        for name in Settings.__struct_fields__
    ]


def settings_table() -> str:
    """The settings as a Markdown table (the settings reference page's)."""
    lines = [
        "| setting | environment variable | default | what it does |",
        "|---|---|---|---|",
    ]
    for name, env, default, doc in settings_rows():
        cell = " ".join(doc.split()).replace("|", "\\|")
        lines.append(f"| `{name}` | `{env}` | `{default}` | {cell} |")
    return "\n".join(lines) + "\n"


def type_text(node: dict[str, Any], root: dict[str, Any] | None = None) -> str:
    """A schema node's type in a few characters: `integer`, `string?`, `queued|running`."""
    root = root if root is not None else node
    if "$ref" in node:
        name = str(node["$ref"]).rsplit("/", 1)[-1]
        target = root.get("$defs", {}).get(name)
        return type_text(target, root) if isinstance(target, dict) and "enum" in target else name
    if "enum" in node:
        values = [str(v) for v in node["enum"] if v is not None]
        return "|".join(values) + ("?" if None in node["enum"] else "")
    if "const" in node:
        return repr(node["const"])
    branches = node.get("anyOf") or node.get("oneOf")
    if branches:
        texts = [type_text(b, root) for b in branches if b.get("type") != "null"]
        nullable = len(texts) < len(branches)
        return "|".join(texts) + ("?" if nullable else "")
    kind = node.get("type")
    if isinstance(kind, list):
        names = [k for k in kind if k != "null"]
        return "|".join(names) + ("?" if len(names) < len(kind) else "")
    if kind == "array" and isinstance(node.get("items"), dict):
        return f"list of {type_text(node['items'], root)}"
    return str(kind) if kind else "any"


def _cell(text: str) -> str:
    """Text fit for one cell of a Markdown table: one line, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def members_table(schema: dict[str, Any], defaults: bool = True) -> str:
    """An object schema's members as a Markdown table: name, type, default (an input's:
    `defaults`), description."""
    props: dict[str, Any] = schema.get("properties", {})
    if not props:
        return "(no members)\n"
    required = set(schema.get("required", []))
    if defaults:
        lines = ["| member | type | default | what it is |", "|---|---|---|---|"]
    else:
        lines = ["| member | type | what it is |", "|---|---|---|"]
    for name, prop in props.items():
        cells = [f"`{name}`", f"`{_cell(type_text(prop, schema))}`"]
        if defaults:
            cells.append("(required)" if name in required else _default_cell(prop.get("default")))
        cells.append(_cell(str(prop.get("description", ""))))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _default_cell(value: Any) -> str:
    if value is None:
        return "`null`"
    return f"`{_cell(msgspec.json.encode(value).decode())}`"


def surfaces(cap: Capability) -> list[str]:
    """Where a capability is reached, one Markdown item each: HTTP, MCP, CLI."""
    exposure = cap.exposure
    found = []
    if exposure.http_path:
        found.append(f"HTTP `{exposure.http_method} {exposure.http_path}`")
    if exposure.mcp_tool:
        found.append(f"MCP tool `{exposure.mcp_tool}`")
    if exposure.cli_path:
        found.append(f"CLI `majordomus {' '.join(exposure.cli_path)}`")
    return found


def how_it_runs(cap: Capability) -> str:
    """A capability's way of running in a sentence: an execution on the workers, or an
    answer of the process asked."""
    if not cap.executable:
        return "Answers directly, in the process asked (not an execution)."
    parts = [f"Runs as an execution on the workers (`runs_in={cap.runs_in}`)"]
    if cap.cancellable:
        parts.append("cancellable")
    if cap.max_concurrency is not None:
        parts.append(f"at most {cap.max_concurrency} at once")
    if cap.per_key is not None:
        parts.append(f"at most {cap.per_key.limit} at once per `{cap.per_key.member}`")
    if cap.rate_limit is not None:
        rate = cap.rate_limit
        each = f" per `{rate.key}`" if rate.key else ""
        parts.append(f"at most {rate.limit} starts a {rate.per}{each}")
    if cap.collapse is not None:
        collapse = cap.collapse
        parts.append(f"{collapse.kind}d per `{collapse.member}` ({collapse.seconds:g} s window)")
    if cap.timeout is not None:
        parts.append(f"timeout {cap.timeout:g} s")
    return ", ".join(parts) + "."


def capabilities_reference(registry: Registry, heading: str = "##") -> str:
    """Every capability of a registry, grouped by module: its title and description, where
    each surface reaches it, how it runs, and its input and output members."""
    out: list[str] = []
    module = None
    for cap in sorted(registry, key=lambda c: c.id):
        if cap.module != module:
            module = cap.module
            out.append(f"{heading} `{module}.*`\n")
        out.append(f"{heading}# `{cap.id}`\n")
        out.append(f"**{cap.title}.** {cap.description}\n")
        out.append(f"{how_it_runs(cap)} {'; '.join(surfaces(cap)) or 'No surface'}.\n")
        out.append(f"Input (`{cap.input_schema.get('title', cap.input.__name__)}`):\n")
        out.append(members_table(cap.input_schema))
        out.append(f"Output (`{cap.output_schema.get('title', '')}`):\n")
        out.append(members_table(cap.output_schema, defaults=False))
    return "\n".join(out)


def mcp_tools_table(registry: Registry) -> str:
    """Every MCP tool of a registry: its name, its capability, whether a call may be a
    task, and its title."""
    lines = ["| tool | capability | task support | what it does |", "|---|---|---|---|"]
    for cap in sorted(registry, key=lambda c: c.exposure.mcp_tool or ""):
        if cap.exposure.mcp_tool:
            lines.append(
                f"| `{cap.exposure.mcp_tool}` | [`{cap.id}`](capabilities.md#{anchor(cap.id)}) "
                f"| `{cap.task_support}` | {_cell(cap.title)} |"
            )
    return "\n".join(lines) + "\n"


def anchor(cap_id: str) -> str:
    """The anchor MkDocs gives a capability's heading (its id in code): the dots go."""
    return cap_id.replace(".", "").lower()
