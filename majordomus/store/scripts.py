"""The one loader of the store's Lua scripts (`lua/*.lua`).

A script's text is read once and the state table is injected where it says
`--@TRANSITIONS@` and `--@STATE_OF@`, so the move rules in Lua are the ones of
`majordomus.states`, never a second copy.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from majordomus.states import STATE_OF_EVENT, TRANSITIONS

LUA_DIR = Path(__file__).parent / "lua"


def _lua_table(table: dict[str, Any]) -> str:
    def value(v: Any) -> str:
        if isinstance(v, str):
            return f"'{v}'"
        inner = ", ".join(f"['{k}'] = true" for k in sorted(v))
        return "{" + inner + "}"

    return "{" + ", ".join(f"['{k}'] = {value(v)}" for k, v in table.items()) + "}"


@cache
def load_script(name: str) -> str:
    """The text of `lua/<name>`, with the state table injected."""
    text = (LUA_DIR / name).read_text()
    text = text.replace("--@TRANSITIONS@", _lua_table(TRANSITIONS))
    return text.replace("--@STATE_OF@", _lua_table(STATE_OF_EVENT))
