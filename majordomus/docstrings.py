"""Field docstrings, read from the source: msgspec keeps no attribute docstrings at run time,
so `field_docs` reads them from the source of a Struct (the string literal right after a
field, as `config.Settings` and the capability inputs write them). The JSON Schemas
(`majordomus.schemas`), the CLI's help and the documentation site describe fields with
them.
"""

from __future__ import annotations

import ast
import inspect
import os
import sys
from functools import cache


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
