"""What the command tree is mounted from: each capability's outline, without its types.

`majordomus --help` shows a capability by its CLI path and title alone (and `run`, by what
`executions.start` is reached as); it needs neither its input and output types nor its
handler. Reading them from the registry costs what declaring every built-in costs
(importing its module, the model, the schedules, the retry policies... a fifth of the
whole command), so a process that has declared nothing yet and names no module of its own
(`MAJORDOMUS_CAPABILITIES` unset) mounts the tree from `builtin_outlines`, the built-ins'
outlines as the registry has them, written by `python -m majordomus.cli.outlines`. They are
used only while they are current: `builtin_outlines.SOURCES` is the checksum of the
declarations' sources they were made from (`majordomus/registry.py` and
`majordomus/builtins/*.py`), and when the sources at hand sum otherwise (a built-in changed
and the outlines were not written again) the registry is read instead, as it is whenever a
process declared anything or names a module of its own. `tests/cli/test_startup_imports.py`
checks they are current, and that the tree mounted from them is the registry's.

A command is made from the capability itself, from the registry, when it is first used
(`tree`): only the tree is mounted from outlines.
"""

from __future__ import annotations

import os
import sys
import zlib
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from majordomus.registry import Registry

PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
"""The `majordomus` package's folder."""

SOURCE_FILES = ("registry.py", "builtins")
"""The declarations' sources under `PACKAGE`: a file, or a folder's `*.py`."""


class OutlineExposure(NamedTuple):
    mcp_tool: str | None
    http_method: str | None
    http_path: str | None
    cli_path: tuple[str, ...] | None


class Outline(NamedTuple):
    """What the command tree shows of a capability: a `Capability` but its types, handler
    and policies (the same names, so the tree reads either). A tuple, as
    `builtin_outlines.OUTLINES` keeps it flat (`row`, `from_row`)."""

    id: str
    kind: str
    title: str
    description: str
    executable: bool
    exposure: OutlineExposure

    @classmethod
    def of(cls, cap: Any) -> Outline:
        e = cap.exposure
        exposure = OutlineExposure(e.mcp_tool, e.http_method, e.http_path, e.cli_path)
        return cls(cap.id, cap.kind, cap.title, cap.description, cap.executable, exposure)

    def row(self) -> tuple[Any, ...]:
        return (*self[:5], *self.exposure)

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> Outline:
        cap_id, kind, title, description, executable, *exposure = row
        return cls(cap_id, kind, title, description, executable, OutlineExposure(*exposure))


def outlines_of(registry: Registry) -> list[Outline]:
    """The outlines of every capability with a command, in the registry's order."""
    return [Outline.of(cap) for cap in registry if cap.exposure.cli_path]


def sources_checksum(package: str = PACKAGE) -> str | None:
    """The checksum of the declarations' sources (`SOURCE_FILES`), each file's name and
    bytes in order; None when one cannot be read (an installation without its sources)."""
    files: list[str] = []
    try:
        for entry in SOURCE_FILES:
            where = os.path.join(package, entry)
            if os.path.isdir(where):
                files += [
                    os.path.join(entry, name)
                    for name in sorted(os.listdir(where))
                    if name.endswith(".py")
                ]
            else:
                files.append(entry)
        total = 0
        for name in files:
            with open(os.path.join(package, name), "rb") as source:
                total = zlib.crc32(source.read(), zlib.crc32(name.encode(), total))
    except OSError:
        return None
    return f"{total:08x}"


def builtin_outlines() -> list[Outline] | None:
    """The built-ins' outlines, when they are current (made from the sources at hand);
    None otherwise."""
    from majordomus.cli import builtin_outlines as written

    if written.SOURCES != sources_checksum():
        return None
    return [Outline.from_row(row) for row in written.OUTLINES]


def nothing_declared_yet() -> bool:
    """Whether this process has declared no capability yet (it imported no registry): the
    registry would then be the built-ins and the modules of `MAJORDOMUS_CAPABILITIES`."""
    return "majordomus.registry" not in sys.modules


HEADER = '''"""The built-in capabilities' outlines (`majordomus.cli.outlines`), as the registry has them.

Written by `python -m majordomus.cli.outlines` from the built-ins' declarations: do not edit;
write it again when a built-in's declaration changes (until then the registry is read).
"""

from typing import Any

SOURCES = {sources!r}
"""The checksum of the declarations' sources these were made from (`outlines.sources_checksum`)."""

OUTLINES: tuple[tuple[Any, ...], ...] = (
'''


def written_module(registry: Registry, sources: str) -> str:
    """The text of `builtin_outlines` for these built-ins."""
    rows = "".join(f"    {outline.row()!r},\n" for outline in outlines_of(registry))
    return HEADER.format(sources=sources) + rows + ")\n"


def main() -> None:
    """Write `builtin_outlines` from the built-ins (in a process that declared nothing else)."""
    if not nothing_declared_yet():
        raise SystemExit("majordomus: write the outlines in a process of their own")
    from majordomus.loading import load_capabilities

    sources = sources_checksum()
    if sources is None:
        raise SystemExit(f"majordomus: cannot read the declarations' sources in {PACKAGE}")
    text = written_module(load_capabilities([]), sources)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "builtin_outlines.py")
    with open(path, "w") as file:
        file.write(text)
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
