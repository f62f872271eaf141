"""Documentation read from the code: field docstrings and the README's settings table.

msgspec keeps no attribute docstrings at run time, so `field_docs` reads them from the
source of a Struct (the string literal right after a field, as `config.Settings` and the
capability inputs write them). The settings table of the README's operations section is
generated from `Settings` by `settings_table`, and a test checks the README carries it, so
the two cannot drift. Nothing here is needed to run majordomus; it only describes it.
"""

from __future__ import annotations

import ast
import inspect
import os
import sys
from functools import cache
from typing import Any

import msgspec

from majordomus.config import ENV_PREFIX, Settings


@cache
def field_docs(struct_type: type) -> dict[str, str]:
    """Each field's docstring (the string literal written under it), by field name.

    Base classes are read too, a subclass's docstring winning. A type whose source cannot
    be read (built at run time, say) simply has none.
    """
    docs: dict[str, str] = {}
    for klass in reversed(struct_type.__mro__):
        if klass is object or not isinstance(klass, type):
            continue
        docs.update(_own_field_docs(klass))
    return docs


def _own_field_docs(klass: type) -> dict[str, str]:
    node = _classes_of(klass.__module__, _stamp(klass.__module__)).get(klass.__qualname__)
    if node is None:
        return {}
    docs: dict[str, str] = {}
    body = node.body
    for here, after in zip(body, body[1:], strict=False):
        if not (isinstance(here, ast.AnnAssign) and isinstance(here.target, ast.Name)):
            continue
        if (
            isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[here.target.id] = inspect.cleandoc(after.value.value)
    return docs


def _stamp(module_name: str) -> int | None:
    """When the module's source file last changed (None: it has none)."""
    try:
        path = inspect.getsourcefile(sys.modules[module_name])
        return os.stat(path).st_mtime_ns if path else None
    except (KeyError, OSError, TypeError):
        return None


@cache
def _classes_of(module_name: str, stamp: int | None) -> dict[str, ast.ClassDef]:
    """Every class a module's source defines, by qualified name (the first of a name, as
    `inspect.getsource` finds it): the module is parsed once for all its classes (once per
    version of its file, `stamp`)."""
    module = sys.modules.get(module_name)
    try:
        tree = ast.parse(inspect.getsource(module)) if module is not None else None
    except (OSError, TypeError, SyntaxError):
        tree = None
    found: dict[str, ast.ClassDef] = {}
    if tree is not None:
        _collect(tree, [], found)
    return found


def _collect(node: ast.AST, names: list[str], found: dict[str, ast.ClassDef]) -> None:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.ClassDef):
            found.setdefault(".".join([*names, child.name]), child)
            _collect(child, [*names, child.name], found)
        elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            _collect(child, [*names, child.name, "<locals>"], found)
        else:
            _collect(child, names, found)


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
    """The settings as a Markdown table, exactly as the README's operations section has it."""
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
