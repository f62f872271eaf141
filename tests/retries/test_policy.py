"""A retry policy, without Redis: what it retries, how long it waits, and what it refuses
to be declared as."""

from __future__ import annotations

import msgspec
import pytest

from majordomus.errors import MajordomusError
from majordomus.registry import Registry, capability
from majordomus.retries import MAX_ATTEMPTS, MAX_BACKOFF_MS, Retry


class Empty(msgspec.Struct):
    pass


def test_the_delay_grows_by_its_factor_up_to_its_cap() -> None:
    policy = Retry(attempts=10, backoff_ms=100, factor=3, max_backoff_ms=2000, jitter=0)
    assert [policy.delay_ms(n) for n in range(1, 6)] == [100, 300, 900, 2000, 2000]


def test_a_factor_of_one_is_a_constant_delay() -> None:
    policy = Retry(backoff_ms=250, factor=1, jitter=0)
    assert {policy.delay_ms(n) for n in range(1, 4)} == {250}


def test_proportional_jitter_keeps_the_delay_between_its_floor_and_its_base() -> None:
    policy = Retry(backoff_ms=1000, factor=2, jitter=0.5)
    assert policy.delay_ms(2, draw=lambda: 0.0) == 2000  # nothing drawn off
    assert policy.delay_ms(2, draw=lambda: 0.999999) == 1000  # at most half
    drawn = {policy.delay_ms(1) for _ in range(200)}
    assert min(drawn) >= 500 and max(drawn) <= 1000 and len(drawn) > 10


def test_full_jitter_may_retry_at_once_and_never_past_the_base() -> None:
    policy = Retry(backoff_ms=1000, jitter=1.0)
    assert policy.delay_ms(1, draw=lambda: 0.9999999) == 0
    assert all(0 <= policy.delay_ms(3) <= 4000 for _ in range(100))


def test_a_huge_attempt_number_is_capped_not_overflowed() -> None:
    policy = Retry(attempts=MAX_ATTEMPTS, backoff_ms=1000, factor=10, max_backoff_ms=5000, jitter=0)
    assert policy.delay_ms(MAX_ATTEMPTS) == 5000


def test_unexpected_exceptions_are_retried_by_type_and_our_errors_by_code() -> None:
    policy = Retry(retry_on=(ConnectionError,), retry_codes=("unavailable",))
    assert policy.retries(ConnectionResetError("reset"))  # a subclass counts
    assert not policy.retries(ValueError("bad"))
    assert policy.retries(MajordomusError("unavailable", "the bank is down"))
    assert not policy.retries(MajordomusError("invalid_input", "no such account"))
    assert policy.retries_code("unavailable")


def test_by_default_every_unexpected_exception_is_retried_but_no_error_of_ours() -> None:
    policy = Retry()
    assert policy.retries(RuntimeError("boom"))
    assert not policy.retries(MajordomusError("unavailable", "down"))
    assert not policy.retries_code("unavailable")  # a lost worker: only when asked for
    assert not policy.retries(KeyboardInterrupt())


def test_internal_among_the_codes_retries_every_unexpected_exception() -> None:
    policy = Retry(retry_on=(), retry_codes=("internal",))
    assert policy.retries(ZeroDivisionError())
    assert policy.retries(MajordomusError("internal", "said so"))
    assert not policy.retries(MajordomusError("refused", "no"))


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"attempts": 0}, "attempts must be from 1"),
        ({"attempts": MAX_ATTEMPTS + 1}, "attempts must be from 1"),
        ({"attempts": 2.5}, "attempts must be an integer"),
        ({"attempts": True}, "attempts must be an integer"),
        ({"backoff_ms": -1}, "backoff_ms must be from 0"),
        ({"max_backoff_ms": MAX_BACKOFF_MS + 1}, "max_backoff_ms must be from 0"),
        ({"backoff_ms": 5000, "max_backoff_ms": 1000}, "below backoff_ms"),
        ({"factor": 0.5}, "factor must be from 1"),
        ({"factor": float("nan")}, "factor must be from 1"),
        ({"jitter": 1.5}, "jitter must be from 0"),
        ({"jitter": "some"}, "jitter must be a number"),
        ({"retry_on": (ValueError, "KeyError")}, "'KeyError' is not one"),
        ({"retry_on": (MajordomusError,)}, "retried by its code"),
        ({"retry_codes": ("cancelled",)}, "a cancel ends a retry chain"),
        ({"retry_codes": ("unavaliable",)}, "'unavaliable'"),
        ({"retry_codes": 7}, "retry_codes must be a tuple"),
    ],
)
def test_a_nonsense_policy_is_refused_where_it_is_declared(fields: dict, says: str) -> None:
    registry = Registry()
    with pytest.raises(ValueError, match=says):

        @capability("retries.nonsense", input=Empty, output=Empty, retry=Retry(**fields), registry=registry)
        async def nonsense(ctx: object, inp: Empty) -> Empty:
            return inp

    assert "retries.nonsense" not in registry


def test_a_single_type_or_code_and_lists_are_taken_as_tuples() -> None:
    policy = Retry(retry_on=TimeoutError, retry_codes=["unavailable", "unavailable"])  # type: ignore[arg-type]
    assert policy.retry_on == (TimeoutError,) and policy.retry_codes == ("unavailable",)
    assert Retry(retry_codes="internal").retry_codes == ("internal",)  # type: ignore[arg-type]


def test_the_policy_is_described_with_its_capability() -> None:
    from majordomus.builtins.capabilities import view_of

    registry = Registry()

    @capability(
        "retries.described",
        input=Empty,
        output=Empty,
        retry=Retry(attempts=4, backoff_ms=50, retry_on=(ConnectionError,), retry_codes=("unavailable",)),
        registry=registry,
    )
    async def described(ctx: object, inp: Empty) -> Empty:
        return inp

    view = msgspec.to_builtins(view_of(registry.require("retries.described")))
    assert view["retry"] == {
        "attempts": 4,
        "backoff_ms": 50,
        "factor": 2.0,
        "max_backoff_ms": 300_000,
        "jitter": 0.5,
        "retry_on": ["ConnectionError"],
        "retry_codes": ["unavailable"],
    }
