"""Secrets stay out of text: a validation problem never echoes a sensitive value, and a
handler's log line or diagnostic that carries one of its execution's secret inputs has it
masked before it is stored (against a real Redis, read back from the history)."""

from __future__ import annotations

from typing import Annotated

import msgspec
import pytest

from majordomus.context import ExecutionContext
from majordomus.engine import Engine
from majordomus.errors import MajordomusError
from majordomus.model import ExecutionDiagnosticEvent, ExecutionLog
from majordomus.schemas import (
    MAX_INPUT_DEPTH,
    MIN_SECRET_CHARS,
    REDACTED,
    secret_mask,
    secret_values,
    validate_input,
)
from tests.capabilities import Credentials

WORKER = "test-worker"
TOKEN = "tok-9f8e7d6c5b"
PIN = "4711"
VAULTED = "vaulted-s3cr3t"


class Signup(msgspec.Struct, forbid_unknown_fields=True):
    user: str
    password: Annotated[str, msgspec.Meta(min_length=8, extra_json_schema={"format": "password"})]


def refusal(tp: type, raw: object) -> str:
    with pytest.raises(MajordomusError) as info:
        validate_input(tp, raw)
    assert info.value.code == "invalid_input"
    assert info.value.suggestion
    return info.value.message


# -- validation messages ------------------------------------------------------------------------


def test_a_too_short_password_is_named_without_its_value() -> None:
    message = refusal(Signup, {"user": "ada", "password": "tiny-S3"})
    assert message == f"/password: {REDACTED} is too short"
    assert "tiny-S3" not in message


def test_a_secret_of_the_wrong_type_is_named_without_its_value() -> None:
    sent = {
        "user": "ada",
        "token": 31415926,
        "pin": 27182818,
        "maybe": 16180339,
        "tokens": [14142135],
        "vault": {"k": 17320508},
    }
    message = refusal(Credentials, sent)
    problems = message.split("; ")
    assert len(problems) == 5
    assert {p.split(":")[0] for p in problems} == {
        "/maybe",
        "/pin",
        "/token",
        "/tokens/0",
        "/vault/k",
    }
    assert all(f": {REDACTED} " in p for p in problems), problems
    for number in ("31415926", "27182818", "16180339", "14142135", "17320508"):
        assert number not in message


def test_a_value_that_holds_a_secret_is_not_echoed_and_a_plain_one_still_is() -> None:
    whole = refusal(Credentials, ["ada", TOKEN])  # not even an object
    assert whole == f"/: {REDACTED} is not of type 'object'"
    plain = refusal(Signup, {"user": 7, "password": "long-enough-pw"})
    assert plain == "/user: 7 is not of type 'string'"  # nothing secret: shown as before


def test_a_secret_is_masked_wherever_else_a_message_would_carry_it() -> None:
    # The extra member's name is the secret itself: the problem names the member, masked.
    message = refusal(Credentials, {"user": "ada", "token": TOKEN, TOKEN: 1})
    assert TOKEN not in message and REDACTED in message


def test_an_echoed_value_is_cut() -> None:
    message = refusal(Signup, {"user": ["x" * 5000], "password": "long-enough-pw"})
    assert len(message) < 200 and "…" in message


def test_an_input_nested_past_the_bound_is_refused_by_name_not_by_recursion() -> None:
    deep: object = 1
    for _ in range(5000):
        deep = [deep]
    message = refusal(Credentials, {"user": "ada", "token": TOKEN, "vault": {"k": deep}})
    assert str(MAX_INPUT_DEPTH) in message


# -- the values to mask -------------------------------------------------------------------------


def test_the_secret_values_are_what_the_schema_marks_sensitive_and_not_by_name() -> None:
    sent = {
        "user": "ada",
        "token": TOKEN,
        "password": "not-a-secret-by-name",
        "pin": PIN,
        "key": "wo",  # shorter than MIN_SECRET_CHARS: left alone
        "tokens": ["listed-one", "listed-two"],
        "vault": {"a": VAULTED},
        "maybe": "maybe-this",
    }
    found = secret_values(Credentials, sent)
    assert found == {TOKEN, PIN, "listed-one", "listed-two", VAULTED, "maybe-this"}
    assert all(len(s) >= MIN_SECRET_CHARS for s in found)
    # As the worker reads the input (JSON bytes), and as a typed value: the same.
    assert secret_values(Credentials, msgspec.json.encode(sent)) == found
    assert secret_values(Credentials, msgspec.convert(sent, Credentials)) == found
    assert secret_values(Credentials, b"{not json") == frozenset()


def test_a_mask_hides_every_written_form_of_a_secret_the_longest_first() -> None:
    mask = secret_mask({'quo"te', "abc", "abcdef"})
    text = 'abcdef abc quo"te "quo\\"te" ' + repr('quo"te')
    assert mask(text) == f"{REDACTED} {REDACTED} {REDACTED} \"{REDACTED}\" '{REDACTED}'"
    assert secret_mask(set())("left alone") == "left alone"


# -- the handler context, against Redis ---------------------------------------------------------


async def claimed(engine: Engine, raw: dict[str, object]) -> tuple[str, bytes | None]:
    """An execution of `tests.login`, claimed as a worker claims it: its id and the
    worker-only input the claim hands back."""
    snap = await engine.start("tests.login", raw)
    claim, secret = await engine.store.claim(snap.id, WORKER)
    assert claim.complete
    return snap.id, secret


async def stored(engine: Engine, xid: str) -> tuple[list[str], list[ExecutionDiagnosticEvent]]:
    page = await engine.events(xid)
    logs = [e.data.message for e in page.events if isinstance(e, ExecutionLog)]
    diags = [e for e in page.events if isinstance(e, ExecutionDiagnosticEvent)]
    return logs, diags


async def test_a_log_line_and_a_diagnostic_carrying_a_secret_input_are_stored_masked(
    engine: Engine,
) -> None:
    sent = {"user": "ada", "token": TOKEN, "pin": PIN, "vault": {"db": VAULTED}}
    xid, secret = await claimed(engine, sent)
    # What the worker passes (workers/runtime.py builds its context this way).
    ctx = ExecutionContext(
        engine.store, xid, WORKER, engine, secrets=secret_values(Credentials, secret)
    )
    ctx.log(f"logging in as ada with {TOKEN} and pin {PIN}")
    ctx.log(f"dsn=postgres://ada:{VAULTED}@db/app")
    # Its escapes are removed, and then it is masked.
    ctx.log(f"the token, painted: {TOKEN[:4]}\x1b[1m{TOKEN[4:]}\x1b[0m")
    ctx.log(f"json: {msgspec.json.encode(sent).decode()}")
    ctx.log("a line with nothing secret in it, by ada")
    ctx.diagnostic(
        "warning",
        "login_slow",
        f"the vault answered slowly for {VAULTED}",
        detail=f"token {TOKEN}",
        suggestion=f"rotate {PIN}",
    )
    await ctx.finish("execution.completed", b'{"output":{"user":"ada","token_length":14}}')

    logs, diags = await stored(engine, xid)
    assert logs == [
        f"logging in as ada with {REDACTED} and pin {REDACTED}",
        f"dsn=postgres://ada:{REDACTED}@db/app",
        f"the token, painted: {REDACTED}",
        logs[3],
        "a line with nothing secret in it, by ada",
    ]
    assert logs[3].startswith('json: {"user":"ada",') and logs[3].count(REDACTED) == 3
    [diag] = diags
    assert (diag.data.code, diag.data.summary) == (
        "login_slow",
        f"the vault answered slowly for {REDACTED}",
    )
    assert (diag.data.detail, diag.data.suggestion) == (f"token {REDACTED}", f"rotate {REDACTED}")
    everything = msgspec.json.encode((await engine.events(xid)).events).decode()
    for value in (TOKEN, PIN, VAULTED):
        assert value not in everything
    snapshot = msgspec.json.encode(await engine.get(xid)).decode()
    assert TOKEN not in snapshot and VAULTED not in snapshot


async def test_a_context_given_no_secrets_changes_no_text(engine: Engine) -> None:
    xid, _ = await claimed(engine, {"user": "ada", "token": TOKEN})
    ctx = ExecutionContext(engine.store, xid, WORKER, engine)
    ctx.log(f"as before: {TOKEN}")
    ctx.diagnostic("info", "plain", f"summary {TOKEN}")
    await ctx.finish("execution.completed", b'{"output":{"user":"ada","token_length":14}}')
    logs, diags = await stored(engine, xid)
    assert logs == [f"as before: {TOKEN}"]
    assert diags[0].data.summary == f"summary {TOKEN}"
