"""The one loader of the store's Lua scripts (`lua/*.lua`).

A script's text is read once and the state table is injected where it says `--@MOVES@`
and `--@STATE_OF@` (and the roll-up's counting, `lua/rollup.lua`, where it says
`--@ROLLUP@`, the slots of a key, `lua/key_slots.lua`, where it says `--@KEYSLOTS@`, and
the function writing an event's envelope, generated from the model's `EventEnvelope` by
`stored_format.envelope_lua`, where it says `--@ENVELOPE@`), so the
move rules in Lua are the ones of `majordomus.states`, and the envelope the model's, never
a second copy. The state table's two parts are injected as one string each, searched with
a plain `string.find`: a script's body runs on every call, and building the same rules as
Lua tables cost each call more than the rest of a claim's own logic.

The scripts of the hot path (a start, a take, an append) are also given, as constants at
their head (`with_constants`), what is the same for every call of one store on one
partition: the partition's keys, the settings they need, the channels. Each argument of a
call costs Redis about as much as a small command (it is read, made an object, then a Lua
string, then garbage), a constant of the script's text nothing: so each store registers
one text per partition. The keys a script names this way are of the slot of the keys it
is given (the partition's), as a Redis Cluster requires of a script's keys.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from majordomus.states import STATE_OF_EVENT, TRANSITIONS
from majordomus.store.stored_format import envelope_lua

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


def lua_literal(value: str | int) -> str:
    """`value` as a Lua literal: an integer as it is, a string with every byte that is not
    a letter, a digit or one of `:_-.{}` written as a decimal escape (never a quote or a
    line end unescaped, whatever a key prefix holds)."""
    if isinstance(value, int):
        return str(value)
    safe = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789:_-.{}")
    return "'" + "".join(chr(b) if b in safe else f"\\{b:03d}" for b in value.encode()) + "'"


def with_constants(text: str, constants: dict[str, str | int]) -> str:
    """The script's text with a `local NAME = value` for each constant at its head."""
    head = "".join(f"local {name} = {lua_literal(value)}\n" for name, value in constants.items())
    return head + text


@cache
def load_script(name: str) -> str:
    """The text of `lua/<name>`, with the state table injected."""
    text = (LUA_DIR / name).read_text()
    text = text.replace("--@MOVES@", moves())
    text = text.replace("--@ROLLUP@", (LUA_DIR / "rollup.lua").read_text())
    text = text.replace("--@KEYSLOTS@", (LUA_DIR / "key_slots.lua").read_text())
    text = text.replace("--@ENVELOPE@", envelope_lua())
    return text.replace("--@STATE_OF@", state_of())
