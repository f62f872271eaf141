"""The one loader of the store's Lua scripts (`lua/*.lua`).

A script's text is read once and the state table is injected where it says `--@MOVES@`
and `--@STATE_OF@`, so the move rules in Lua are the ones of `majordomus.states`, never a
second copy. Both are injected as one string each, searched with a plain `string.find`:
a script's body runs on every call, and building the same rules as Lua tables cost each
call more than the rest of a claim's own logic.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from majordomus.states import STATE_OF_EVENT, TRANSITIONS

LUA_DIR = Path(__file__).parent / "lua"


def _lua_string(words: list[str]) -> str:
    """A Lua string literal of the words, each with a space on both sides."""
    return "' " + " ".join(words) + " '"


def moves() -> str:
    """Every legal move as `from>to`, and every final state as `to!` (it moves nowhere)."""
    words = [f"{a}>{b}" for a, targets in TRANSITIONS.items() for b in sorted(targets)]
    words += [f"{state}!" for state, targets in TRANSITIONS.items() if not targets]
    return _lua_string(words)


def state_of() -> str:
    """Every state-changing event type as `type=state`."""
    return _lua_string([f"{t}={s}" for t, s in STATE_OF_EVENT.items()])


@cache
def load_script(name: str) -> str:
    """The text of `lua/<name>`, with the state table injected."""
    text = (LUA_DIR / name).read_text()
    text = text.replace("--@MOVES@", moves())
    return text.replace("--@STATE_OF@", state_of())
