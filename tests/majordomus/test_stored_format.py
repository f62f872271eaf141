"""The stored format is declared once (`majordomus.store.stored_format`, `store/keys.py`):
what the scripts write is checked against the Structs on every path, so a drift fails here.

Every path of the scripts that write an execution is run (a create with each option, a
take, an append of every event type, each end, a retry's link), then everything they wrote
is read back: the snapshot hash's fields must be exactly those declared, each envelope's
members exactly `EventEnvelope`'s, each decoding strictly as its event.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest

from majordomus.engine import Engine
from majordomus.errors import ExecutionError
from majordomus.model import (
    CancellingData,
    CompletedData,
    EventEnvelope,
    ExecutionDiagnostic,
    ExecutionEvent,
    ExecutionSnapshot,
    FailedData,
    LogData,
    ProgressView,
    StepCompletedData,
    StepStartedData,
    event_decoder,
)
from majordomus.start_options import StartOptions
from majordomus.store import keys, stored_format
from majordomus.store.executions import StartPlan, created_hash, encode
from majordomus.store.scripts import LUA_DIR, load_script
from majordomus.store.stored_format import (
    EVENT_ENTRY,
    FEED_ENTRY,
    SNAPSHOT_FIELDS,
    EnvelopeDrift,
    StoreFields,
    envelope_lua,
    snapshot_of,
)

WORKER = "format"
# Each event's data as the model encodes it: a member added to one of these Structs reaches
# the scripts here as it would from a worker.
ERROR = ExecutionError("internal", "x", "c", "look")
REPORTS = [
    ("execution.progress", encode(ProgressView(1, 2, "half"))),
    ("execution.step.started", encode(StepStartedData("a", "A"))),
    ("execution.step.completed", encode(StepCompletedData("a", True, "fine"))),
    ("execution.log", encode(LogData("handler", "hello"))),
    ("execution.diagnostic", encode(ExecutionDiagnostic("info", "c", "s", "d", "x"))),
]
ENDS = {
    "succeeded": ("execution.completed", encode(CompletedData({"ok": True}))),
    "failed": ("execution.failed", encode(FailedData(ERROR))),
    "cancelled": ("execution.cancelled", b""),
}
CANCELLING = ("execution.cancelling", encode(CancellingData("t")))


async def take(engine: Engine) -> list[str]:
    """A take (`take.lua`) by a worker whose lease holds; the ids it started."""
    for part in engine.store.keys.partitions:
        await engine.redis.set(part.lease(WORKER), 1, px=60_000)
    took = await engine.store.take(WORKER, 50, engine.store.next_token())
    return [t.execution_id for t in took.taken]


async def every_path(engine: Engine) -> list[str]:
    """Executions written by every path of create.lua, take.lua and append.lua."""
    later = int(time.time() * 1000) + 3_600_000
    first = await engine.start("tests.noop", {}, actor="cli", episode="ep-1")
    started = [
        first,
        await engine.start("tests.serial", {"seconds": 0}),  # conc_limit
        await engine.start(
            "tests.order",
            {"customer": "ada"},  # search indexes
            options=StartOptions(
                priority="high",
                idempotency_key="k-1",
                schedule="s-1",
                timeout_ms=5_000,
                retry_of=first.id,
                attempts_before=1,
            ),
        ),
        await engine.start("tests.noop", {}, options=StartOptions(start_at_ms=later)),
        await engine.start("tests.per_tenant", {"tenant": "t"}),  # key_limit, conc_key
        await engine.start("tests.rated_per_tenant", {"tenant": "t"}),  # rate_*
        await engine.start("tests.rated_per_tenant", {"tenant": "t"}),  # held: rate_due
    ]
    ids = [s.id for s in started]
    assert set(await take(engine)) == {ids[0], ids[1], ids[2], ids[4], ids[5]}
    held = await engine.get(ids[6])
    assert held.diagnostics[0].code == "rate_limit.held" and held.due_at
    store = engine.store
    # Every report, and each end: by a worker, a cancel while running, an append's claim.
    assert (await store.append(ids[0], REPORTS, WORKER, token=store.next_token())).complete
    assert (await store.append(ids[0], [ENDS["succeeded"]], WORKER)).complete
    assert (await store.append(ids[1], [CANCELLING])).complete
    assert (await store.append(ids[1], [ENDS["cancelled"]], WORKER)).complete
    assert (await store.append(ids[2], [ENDS["failed"]], WORKER)).complete
    assert (await store.append(ids[4], [ENDS["succeeded"]], WORKER)).complete
    claimed = await engine.start("tests.noop", {})
    result, _ = await store.claim(claimed.id, WORKER)
    assert result.complete
    assert (await store.append(claimed.id, [ENDS["failed"]], WORKER)).complete
    # Starts collapsed into their window's execution (collapsed), a debounced one's input
    # replaced (input, due_ms, due_at).
    collapsed = []
    for capability in ("tests.throttled", "tests.debounced"):
        first = await engine.start(capability, {"tenant": "t", "n": 1})
        assert (await engine.start(capability, {"tenant": "t", "n": 2})).id == first.id
        collapsed.append(first.id)
    return [*ids, claimed.id, *collapsed]


def data_type(event: Any) -> type | None:
    """The Struct of an event's `data`, or None for an event without one."""
    hints = msgspec.structs.fields(type(event))
    found = [f.type for f in hints if f.encode_name == "data"]
    return found[0] if found else None


def member_names(struct: type) -> tuple[set[str], set[str]]:
    """(every member, the required ones) of a Struct, by their encoded names."""
    fields = msgspec.structs.fields(struct)
    return {f.encode_name for f in fields}, {f.encode_name for f in fields if f.required}


def envelope_problems(stored: bytes) -> Iterator[str]:
    """What is wrong with one stored envelope against the model's Structs."""
    event = event_decoder.decode(stored)  # raises on a member of the wrong type or missing
    raw = msgspec.json.decode(stored)
    tag = EventEnvelope.__struct_config__.tag_field
    expected = set(EventEnvelope.__struct_encode_fields__) | {tag}
    shape = data_type(event)
    if shape is not None:
        expected.add("data")
    if set(raw) != expected:
        yield f"{raw[tag]}: members {sorted(raw)}, the Struct's {sorted(expected)}"
    if shape is not None and isinstance(raw.get("data"), dict):
        every, required = member_names(shape)
        if not required <= set(raw["data"]) <= every:
            yield f"{raw[tag]}: data {sorted(raw['data'])}, {shape.__name__}'s {sorted(every)}"


async def test_the_snapshot_hash_holds_exactly_the_declared_fields(engine: Engine) -> None:
    ids = await every_path(engine)
    written: set[str] = set()
    for xid in ids:
        raw = await engine.redis.hgetall(engine.store.keys.snapshot(xid))
        written |= {k.decode() for k in raw}
        # Each decodes into the Struct it stores, and its store-only fields into theirs.
        assert snapshot_of(raw, engine.links).id == xid
        own = {
            k.decode(): v.decode()
            for k, v in raw.items()
            if k.decode() in StoreFields.__struct_fields__
        }
        msgspec.convert(own, StoreFields, strict=False)
    # What the ends and reports folded in reads back as the events carried it.
    done, cancelled, failed = [
        snapshot_of(await engine.store.snapshot(x) or {}, engine.links) for x in ids[:3]
    ]
    assert done.output == {"ok": True} and done.progress == ProgressView(1, 2, "half")
    assert done.steps[0].detail == "fine" and done.diagnostics[0].suggestion == "x"
    assert failed.error == ERROR and cancelled.error.code == "cancelled"  # type: ignore[union-attr]
    assert written - SNAPSHOT_FIELDS == set(), "written by a script, declared nowhere"
    assert SNAPSHOT_FIELDS - written == set(), "declared, written by no script"


async def test_every_envelope_a_script_writes_is_exactly_the_structs(engine: Engine) -> None:
    ids = await every_path(engine)
    types: set[str] = set()
    problems: list[str] = []
    entry, feed_entry = EVENT_ENTRY.encode(), [f.encode() for f in FEED_ENTRY]
    for xid in ids:
        for _, fields in await engine.redis.xrange(engine.store.keys.events(xid)):
            assert list(fields) == [entry]
            problems += envelope_problems(fields[entry])
            types.add(msgspec.json.decode(fields[entry])["type"])
    for part in engine.store.keys.partitions:
        for _, fields in await engine.redis.xrange(part.feed):
            assert list(fields) == feed_entry
            problems += envelope_problems(fields[entry])
    assert problems == []
    every = {t.__struct_config__.tag for t in ExecutionEvent.__args__}  # type: ignore[attr-defined]
    assert types == every  # every type was written: the check above saw each


async def test_a_start_answers_the_hash_its_create_wrote(engine: Engine) -> None:
    later = int(time.time() * 1000) + 3_600_000
    first = await engine.start("tests.noop", {})
    for capability, value, options in [
        ("tests.noop", {}, StartOptions()),
        ("tests.serial", {"seconds": 1}, StartOptions(start_at_ms=later, priority="low")),
        (
            "tests.order",
            {"customer": "bo", "note": 'a "quoted" note'},
            StartOptions(
                idempotency_key="k-2",
                schedule="s",
                timeout_ms=100,
                retry_of=first.id,
                attempts_before=2,
            ),
        ),
    ]:
        answer = await engine.start(capability, value, actor="mcp", episode="e", options=options)
        raw = await engine.redis.hgetall(engine.store.keys.snapshot(answer.id))
        assert snapshot_of(raw, engine.links) == answer


@pytest.mark.parametrize(
    "plan",
    [
        StartPlan(),
        StartPlan(
            due_ms=int(time.time() * 1000) + 3_600_000,
            priority="high",
            idempotency_key="k",
            fingerprint="f",
            schedule="s",
            retry_of="x-20261207T000000Z-00000000",
            attempts_before=3,
            timeout_ms=250,
            search=(("customer", "ada"),),
            collapse=("throttle", "ada", 1_000),
        ),
    ],
)
async def test_the_hash_a_create_predicts_is_the_one_create_lua_writes(
    engine: Engine, plan: StartPlan
) -> None:
    xid = engine.store.new_id()
    created = await engine.store.create(
        xid,
        capability="tests.order",
        title='Take an "order"',
        input_json=b'{"customer":"ada"}',
        created_data=b'{"capability":"tests.order","title":"t","input":{}}',
        secret_json=b'{"customer":"ada"}',
        cancellable=True,
        actor="cli",
        episode="ep",
        max_concurrency=2,
        plan=plan,
    )
    raw = await engine.redis.hgetall(engine.store.keys.snapshot(xid))
    assert raw.pop(b"order")  # the one field the script counts itself
    assert raw == created_hash(created.args, created.ahead)
    if plan.search:  # its index is the one after the window's key
        index = engine.store.keys.partition_of(xid).search("tests.order", "customer", "ada")
        assert await engine.redis.zscore(index, xid) is not None


def test_a_member_of_the_envelope_no_script_writes_stops_every_script(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Wider(EventEnvelope, kw_only=True):
        attempt: int

    monkeypatch.setattr(stored_format, "EventEnvelope", Wider)
    with pytest.raises(EnvelopeDrift, match="attempt"):
        envelope_lua()


def test_a_value_the_envelope_has_no_member_for_stops_every_script(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    values = dict(stored_format.ENVELOPE_VALUES)
    values["attempt"] = ("number", "attempt")
    monkeypatch.setattr(stored_format, "ENVELOPE_VALUES", values)
    with pytest.raises(EnvelopeDrift, match="attempt"):
        envelope_lua()


def test_no_script_writes_an_envelope_by_hand() -> None:
    for path in sorted(LUA_DIR.glob("*.lua")):
        assert "schema_version" not in path.read_text(), path.name
    for name in ("create.lua", "take.lua", "append.lua"):
        assert "local function envelope(" in load_script(name), name


def test_every_member_of_the_snapshot_is_kept_or_derived() -> None:
    members = {f.encode_name for f in msgspec.structs.fields(ExecutionSnapshot)}
    kept = {stored_format.HASH_NAMES.get(m, m) for m in members - stored_format.DERIVED}
    assert kept <= SNAPSHOT_FIELDS
    assert not kept & set(StoreFields.__struct_fields__)


KEY_NAMES = {
    name: value
    for name, value in vars(keys).items()
    if name.isupper() and isinstance(value, str) and re.fullmatch(r":?[a-z_]+:?", value)
}
"""Every key name `keys.py` declares (`SNAPSHOT = "x:"`...)."""

KEY_HOLDERS = r"BASE|prefix|snap|slots|stream|KEYS\[\d+\]"
"""The Lua names that hold a key (a name appended to one is a key's)."""


def key_literals(text: str) -> set[str]:
    """The string literals of a Lua script's code (not its comments) that name a key: one
    shaped like a key's name (`'x:'`, `':events'`), or one appended to a key."""
    code = "\n".join(line.split("--", 1)[0] for line in text.splitlines())
    literals = {a or b for a, b in re.findall(r"'([^'\n]*)'|\"([^\"\n]*)\"", code)}
    shaped = {s for s in literals if ":" in s and re.fullmatch(r":?[a-z_]+:?", s)}
    appended = set(re.findall(rf"(?:{KEY_HOLDERS})\s*\.\.\s*'([^']*)'", code))
    return shaped | appended


def test_every_key_name_a_script_spells_out_is_declared_in_keys() -> None:
    assert {"SNAPSHOT", "EVENTS", "CAPABILITY_SLOTS", "ROLLUP"} <= set(
        KEY_NAMES
    )  # the scan sees them
    declared = set(KEY_NAMES.values())
    for path in sorted(LUA_DIR.glob("*.lua")):
        undeclared = key_literals(path.read_text()) - declared
        assert undeclared == set(), f"{path.name} names keys keys.py does not: {undeclared}"


ROLLUP_FUNCTIONS = (LUA_DIR / "rollup.lua").read_text()
"""The roll-up's functions (run alone by their tests, with only their own constants)."""


def test_the_scripts_are_given_keys_names_as_constants() -> None:
    assert set(keys.SCRIPT_KEY_NAMES.values()) <= set(KEY_NAMES.values())
    for name in ("take.lua", "append.lua", "create.lua"):
        assert key_literals(load_script(name).replace(ROLLUP_FUNCTIONS, "")) == set(), name
