"""The code blocks of the README and of the documentation's pages (`docs/**/*.md`), read
as the tests that run them need them.

A block is a fenced block (indented ones in list items too) with its language and the
marker on the line before it, if any:

- `<!-- file: NAME -->`: a file a reader writes out (`greetings.py`, `app_async.py`...),
  run by the test named for it in `FILES_RUN_BY`;
- `<!-- example: NAME -->`: a block another test also picks out by name;
- `<!-- run: for N s (why) -->`: a command that follows until stopped, run for N seconds;
- `<!-- not run: why -->`: not run, for the reason given (counted and reported by reason).

Unmarked `python` and `sh` blocks are run as they are; `yaml` blocks are parsed; `text`
blocks are output, not examples.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import ROOT

DOCS = ROOT / "docs"
MARKER = re.compile(r"^\s*<!-- (file|example|run|not run): (.+?) -->\s*$")
OPENING = re.compile(r"^(\s*)```(\w*)\s*$")
RUN_FOR = re.compile(r"^for (\d+) s\b")

FILES_RUN_BY = {
    "greetings.py": "tests/test_readme_capability.py (and every example here, from its folder)",
    "app_async.py": "tests/client/test_readme_client.py",
    "app_sync.py": "tests/client/test_readme_client.py",
    "test_greetings.py": "tests/testing/test_readme_testing.py",
    "keda-scaledobject.yaml": "tests/docs/test_keda.py (its shape; no cluster runs here)",
}
"""Every file a page writes out, and the test that runs it."""


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    """The 1-based line of its opening fence."""
    language: str
    text: str
    marker: str | None = None
    """`file`, `example`, `run` or `not run`."""
    argument: str = ""
    """The marker's argument: a name, a duration, a reason."""

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def seconds(self) -> float | None:
        """How long a `run: for N s` block runs before it is stopped."""
        found = RUN_FOR.match(self.argument) if self.marker == "run" else None
        return float(found[1]) if found else None


def pages() -> list[Path]:
    """The README and every page of the documentation, in a stable order."""
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def blocks(page: Path) -> list[Block]:
    lines = page.read_text().splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = OPENING.match(lines[index])
        if not opening:
            index += 1
            continue
        indent, language = opening[1], opening[2]
        end = index + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        assert end < len(lines), f"{page}:{index + 1}: a fence that is never closed"
        body = "\n".join(line.removeprefix(indent) for line in lines[index + 1 : end]) + "\n"
        marker = _marker_before(lines, index)
        found.append(
            Block(page, index + 1, language, body, *(marker or (None, "")))
        )
        index = end + 1
    return found


def _marker_before(lines: list[str], index: int) -> tuple[str, str] | None:
    before = index - 1
    while before >= 0 and not lines[before].strip():
        before -= 1
    found = MARKER.match(lines[before]) if before >= 0 else None
    return (found[1], found[2]) if found else None


def every_block() -> list[Block]:
    return [block for page in pages() for block in blocks(page)]


def marked_block(name: str) -> str:
    """The text of the documentation's block marked `file: NAME` or `example: NAME` (the
    README's copies of a file are checked against it by tests/docs/test_examples.py)."""
    found = [
        block
        for page in sorted(DOCS.rglob("*.md"))
        for block in blocks(page)
        if block.marker in ("file", "example") and block.argument == name
    ]
    assert len(found) == 1, f"the documentation has {len(found)} blocks marked {name!r}"
    return found[0].text
