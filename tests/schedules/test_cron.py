"""Schedules' cron arithmetic and declarations, without Redis: which ticks are due, which
are late and which missed, in which time zone, and what a bad declaration says."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
import pytest

from majordomus.errors import MajordomusError
from majordomus.registry import Registry, RegistryError, capability
from majordomus.schedules import (
    Schedule,
    check_cron,
    due_ticks,
    last_tick_at_or_before,
    next_tick_ms,
)
from majordomus.ticker import declared_schedules, idempotency_key


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


NOON = ms("2026-01-15T12:00:00")


def test_every_second_is_six_fields_with_the_seconds_first() -> None:
    assert next_tick_ms("* * * * * *", "UTC", NOON + 250) == NOON + 1000
    assert next_tick_ms("*/5 * * * * *", "UTC", NOON) == NOON + 5000
    assert next_tick_ms("30 * * * * *", "UTC", NOON) == NOON + 30_000


def test_five_fields_tick_on_the_minute() -> None:
    assert next_tick_ms("* * * * *", "UTC", NOON + 1) == NOON + 60_000
    assert next_tick_ms("@hourly", "UTC", NOON) == NOON + 3_600_000


def test_a_tick_at_the_very_millisecond_counts_as_at_or_before() -> None:
    assert last_tick_at_or_before("* * * * * *", "UTC", NOON) == NOON
    assert last_tick_at_or_before("* * * * * *", "UTC", NOON + 999) == NOON
    assert next_tick_ms("* * * * * *", "UTC", NOON) == NOON + 1000


def test_a_cron_is_read_in_its_time_zone_summer_and_winter() -> None:
    winter = next_tick_ms("0 9 * * *", "Europe/Paris", ms("2026-01-15T00:00:00"))
    summer = next_tick_ms("0 9 * * *", "Europe/Paris", ms("2026-07-15T00:00:00"))
    assert winter == ms("2026-01-15T08:00:00")
    assert summer == ms("2026-07-15T07:00:00")


@pytest.mark.parametrize(
    ("cron", "timezone", "says"),
    [
        ("every second", "UTC", "fields, not 5 or 6"),
        ("* * * *", "UTC", "4 fields"),
        ("* * * * * * *", "UTC", "7 fields"),
        ("61 * * * *", "UTC", "is not valid"),
        ("0 0 30 2 *", "UTC", "never ticks"),
        ("* * * * *", "Mars/Olympus_Mons", "not a time zone"),
        ("* * * * *", "", "not a time zone"),
    ],
)
def test_a_bad_cron_or_time_zone_is_invalid_input_saying_why(
    cron: str, timezone: str, says: str
) -> None:
    with pytest.raises(MajordomusError) as caught:
        check_cron(cron, timezone)
    assert caught.value.code == "invalid_input"
    assert says in caught.value.message
    assert caught.value.suggestion


def test_ticks_within_the_grace_are_each_due_and_nothing_is_missed() -> None:
    due = due_ticks("* * * * * *", "UTC", NOON, NOON + 3_500, 10_000)
    assert due.missed is None
    assert due.late == (NOON + 1000, NOON + 2000, NOON + 3000)


def test_nothing_is_due_before_the_next_tick() -> None:
    assert due_ticks("* * * * * *", "UTC", NOON, NOON + 999, 10_000).late == ()


def test_ticks_older_than_the_grace_are_missed_and_counted() -> None:
    due = due_ticks("* * * * * *", "UTC", NOON, NOON + 60_500, 10_000)
    assert due.missed == NOON + 50_000  # the latest older than now - grace
    assert due.missed_count == 50
    assert due.late == tuple(NOON + s * 1000 for s in range(51, 61))


def test_a_daily_schedule_down_for_three_days_missed_three_ticks_and_nothing_is_late() -> None:
    due = due_ticks("0 0 * * *", "UTC", NOON - 3 * 86_400_000, NOON, 10_000)
    assert (due.missed, due.missed_count, due.late) == (ms("2026-01-15T00:00:00"), 3, ())


def test_a_schedule_is_checked_when_it_is_declared() -> None:
    with pytest.raises(MajordomusError):
        Schedule("not a cron")
    with pytest.raises(MajordomusError):
        Schedule("* * * * *", timezone="Nowhere/Land")
    with pytest.raises(MajordomusError):
        Schedule("* * * * *", name="has space")
    assert Schedule("* * * * * *").missed == "once"


class Greeting(msgspec.Struct, forbid_unknown_fields=True):
    who: str


class Done(msgspec.Struct):
    ok: bool = True


def _greet(ctx: object, inp: Greeting) -> Done:
    return Done()


def test_declared_schedules_are_named_by_their_name_or_their_place() -> None:
    reg = Registry()
    capability(
        "greet.hello",
        input=Greeting,
        output=Done,
        registry=reg,
        schedules=[
            Schedule("0 9 * * *", input={"who": "world"}),
            Schedule("0 18 * * *", input={"who": "evening"}, name="evening", missed="skip"),
        ],
    )(_greet)
    found = declared_schedules(reg)
    assert sorted(found) == ["greet.hello:0", "greet.hello:evening"]
    assert found["greet.hello:evening"].missed == "skip"
    assert found["greet.hello:0"].input == {"who": "world"}


def test_a_declared_schedule_whose_input_does_not_fit_stops_start_up() -> None:
    reg = Registry()
    capability(
        "greet.bad",
        input=Greeting,
        output=Done,
        registry=reg,
        schedules=[Schedule("0 9 * * *", input={"whom": 1})],
    )(_greet)
    with pytest.raises(RegistryError, match="greet.bad:0"):
        declared_schedules(reg)


def test_each_tick_has_its_own_idempotency_key() -> None:
    assert idempotency_key("a.b:x", NOON) != idempotency_key("a.b:x", NOON + 1000)
    assert idempotency_key("a.b:x", NOON) == f"schedule:a.b:x:{NOON}"
