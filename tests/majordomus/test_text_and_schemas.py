"""Log-line sanitising, schema-driven redaction and input validation (pure logic)."""

from __future__ import annotations

import msgspec
import pytest

from majordomus.builtins.executions import DemoInput, EventsInput
from majordomus.docstrings import field_docs
from majordomus.errors import MajordomusError
from majordomus.sanitize import sanitize_log_line
from majordomus.schemas import REDACTED, coerce_strings, redact, schema_of, validate_input
from tests.capabilities import Credentials


def test_csi_escapes_are_removed() -> None:
    assert sanitize_log_line("\x1b[31mred\x1b[0m and \x1b[1;32mgreen\x1b[m") == "red and green"


def test_osc_escapes_are_removed_with_either_terminator() -> None:
    assert sanitize_log_line("\x1b]0;title\x07text") == "text"
    assert sanitize_log_line("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\") == "link"


def test_control_characters_but_tab_become_spaces() -> None:
    assert sanitize_log_line("a\x00b\nc\rd\te\x7f") == "a b c d\te "


def test_a_long_line_is_cut_to_2000_characters_with_an_ellipsis() -> None:
    out = sanitize_log_line("y" * 5000)
    assert len(out) == 2000
    assert out.endswith("…")
    assert sanitize_log_line("z" * 2000) == "z" * 2000


def credentials() -> dict[str, object]:
    return {
        "user": "ada",
        "token": "t0ps3cret",
        "password": "only-named-password",
        "pin": "1234",
        "key": "k-e-y",
        "tokens": ["a", "b"],
        "vault": {"x": "1", "y": "2"},
        "maybe": "m",
    }


def test_redaction_follows_the_schema_not_the_names() -> None:
    shown = redact(Credentials, credentials())
    assert shown["user"] == "ada"
    assert shown["token"] == REDACTED  # x-majordomus-sensitive
    assert shown["pin"] == REDACTED  # format: password
    assert shown["key"] == REDACTED  # writeOnly
    assert shown["tokens"] == [REDACTED, REDACTED]  # arrays
    assert shown["vault"] == {"x": REDACTED, "y": REDACTED}  # maps
    assert shown["maybe"] == REDACTED  # anyOf with null
    assert shown["password"] == "only-named-password"  # a name decides nothing


def test_redaction_reaches_through_refs_of_nested_structs() -> None:
    class Outer(msgspec.Struct):
        inner: Credentials
        many: list[Credentials]

    shown = redact(Outer, {"inner": credentials(), "many": [credentials()]})
    assert shown["inner"]["token"] == REDACTED
    assert shown["many"][0]["pin"] == REDACTED
    assert shown["many"][0]["user"] == "ada"


def test_a_null_optional_secret_stays_null() -> None:
    assert redact(Credentials, {**credentials(), "maybe": None})["maybe"] is None


def test_validation_names_up_to_five_problems_with_pointers() -> None:
    with pytest.raises(MajordomusError) as info:
        validate_input(
            DemoInput,
            {"steps": "many", "delay_ms": -1, "fail_at": 0, "log_lines": "x", "a": 1, "b": 2},
        )
    err = info.value
    assert err.code == "invalid_input"
    problems = err.message.split("; ")
    assert len(problems) == 5
    assert all(p.startswith("/") and ": " in p for p in problems)
    assert any(p.startswith("/steps: ") for p in problems)


def test_numbers_above_their_bound_are_clamped_below_zero_refused() -> None:
    value = validate_input(DemoInput, {"steps": 1000, "delay_ms": 99_999, "log_lines": 5000})
    assert (value.steps, value.delay_ms, value.log_lines) == (100, 10_000, 1000)
    with pytest.raises(MajordomusError):
        validate_input(DemoInput, {"steps": -1})


def test_query_strings_are_typed_by_the_schema() -> None:
    raw = coerce_strings(EventsInput, {"id": "x-20260908T010203Z-0a1b2c3d", "after": "7", "limit": "x"})
    assert raw == {"id": "x-20260908T010203Z-0a1b2c3d", "after": 7, "limit": "x"}
    with pytest.raises(MajordomusError):
        validate_input(EventsInput, raw)


class Inner(msgspec.Struct):
    depth: int = 0
    """How deep it goes."""


class Outer(msgspec.Struct, rename="camel"):
    inner_part: Inner
    """The part inside."""
    plain: int = 0


def test_field_docstrings_become_property_descriptions() -> None:
    demo = schema_of(DemoInput)["properties"]
    assert demo["steps"]["description"] == "Steps to walk; bound 100."
    outer = schema_of(Outer)
    assert outer["properties"]["innerPart"]["description"] == "The part inside."
    assert "description" not in outer["properties"]["plain"]
    assert outer["$defs"]["Inner"]["properties"]["depth"]["description"] == "How deep it goes."


def test_field_docstrings_are_read_wherever_the_struct_is_written() -> None:
    class Local(msgspec.Struct):
        near: int = 0
        """Written inside a function."""

    class Nested(msgspec.Struct):
        class Deeper(msgspec.Struct):
            far: str = ""
            """Two classes down."""

    assert field_docs(Local) == {"near": "Written inside a function."}
    assert field_docs(Nested.Deeper) == {"far": "Two classes down."}
    assert field_docs(Outer)["inner_part"] == "The part inside."
    assert field_docs(msgspec.defstruct("Made", [("x", int)])) == {}


def test_an_integer_written_with_a_zero_fraction_is_the_integer_the_schema_admits() -> None:
    """JSON Schema's `integer` admits 5.0; so does validation (and 5.5 stays refused)."""
    from majordomus.builtins.executions import StartInput
    from majordomus.errors import MajordomusError

    start = validate_input(StartInput, {"capability": "tests.noop", "delay_ms": 193683.0})
    assert start.delay_ms == 193683 and isinstance(start.delay_ms, int)
    try:
        validate_input(StartInput, {"capability": "tests.noop", "delay_ms": 5.5})
    except MajordomusError as exc:
        assert exc.code == "invalid_input" and "delay_ms" in exc.message
    else:
        raise AssertionError("5.5 was taken for an integer")
