"""Actions over every execution a filter matches: cancel them, or start again the failed
and cancelled ones (`executions.cancel_matching`, `executions.retry_matching`).

**One execution at a time is atomic; the whole is resumable, not atomic.** Each cancel is
the engine's own (`Engine.cancel`: one append script, queued -> cancelled or running ->
cancelling), each retry a start of the engine's own (`create.lua`: the new execution, its
link `retry_of`, the old one's `retried_as` and the idempotency key `retry:<id>`, in one
step). The walk reads the matches newest first, a page at a time, by place in the order of
creation (`Engine.matching`), up to the action's own place: what is created after it began
is not touched, so a stream of new starts never keeps it going. Interrupted anywhere (its
worker killed, Redis gone, the action cancelled), what it did is done and what it did not is
untouched; the same filter again does the rest, because what it already did no longer
qualifies: a cancelled execution is final (a cancel passes it by), a retried one holds
`retried_as` (a retry passes it by) and its key `retry:<id>` answers the one retry if two
runs meet. Its capability retries it when its worker is lost (`BULK_RETRY`), so an
interrupted run finishes by itself too.

This module names no Redis command and knows no surface; the built-ins declare the two.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import msgspec

from majordomus.errors import MajordomusError
from majordomus.matching import Match
from majordomus.retries import RETRY_KEY_PREFIX, Retry
from majordomus.schemas import has_sensitive
from majordomus.start_options import StartOptions

if TYPE_CHECKING:
    from majordomus.engine import Engine

CONCURRENCY = 16
"""Cancels or retries in flight at once: enough to hide a round trip, few enough to leave
Redis to everyone else."""

PAGE = 500
"""Matches read per page of the walk."""

BULK_RETRY = Retry(
    attempts=10, backoff_ms=1000, max_backoff_ms=30_000, retry_on=(), retry_codes=("unavailable",)
)
"""A bulk action whose worker was lost, or whose Redis stopped answering, is started again
(for a few minutes, the delays growing to 30 s), and does the rest."""

Progress = Callable[[int, int], Any]
"""(acted on so far, of how many: the matches it would act on, counted as it began)."""
Stop = Callable[[], None]
"""Raises when the action is to stop (its cancel)."""


class CancelMatchingOutput(msgspec.Struct):
    """What `executions.cancel_matching` did."""

    matched: int
    """Executions that matched, created before the action (final ones included)."""
    cancelled: int
    """Queued ones, now cancelled."""
    asked: int
    """Running ones, asked to stop (`cancelling`)."""
    passed: int
    """Matches it passed by: already final or cancelling (so a second run after an
    interruption passes by what the first did), or gone."""


class RetryMatchingOutput(msgspec.Struct):
    """What `executions.retry_matching` did."""

    matched: int
    """Executions that matched, created before the action (of any state)."""
    retried: int
    """Failed or cancelled ones started again, each as a new execution (`retry_of`)."""
    passed: int
    """Matches it passed by: not failed or cancelled, or already retried (`retried_as`:
    a second run after an interruption passes by what the first did)."""
    secret: int
    """Failed or cancelled ones whose input held a secret, which is not kept once they
    ended: start those again by hand, with the secret."""
    unknown: int
    """Ones whose capability no worker declares any more."""


async def _in_turns(items: list[Any], act: Callable[[Any], Awaitable[None]]) -> None:
    """`act` on every item, `CONCURRENCY` at a time."""
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(item: Any) -> None:
        async with gate:
            await act(item)

    await asyncio.gather(*(one(item) for item in items))


async def _top(engine: Engine, own_id: str | None) -> float | None:
    """The place the walk starts below: the action's own (it never acts on itself, nor on
    what was created after it), or, run directly, the newest execution's, included."""
    if own_id is not None:
        place = await engine.place_of(own_id)
        if place is not None:
            return place
    newest = await engine.newest_place()
    return None if newest is None else newest + 1


def _outage(exc: BaseException) -> MajordomusError:
    return MajordomusError(
        "unavailable",
        f"Redis stopped answering mid-way ({type(exc).__name__}): what was done is done",
        "it is started again by itself; or run the same filter again once Redis answers",
    )


async def cancel_matching(
    engine: Engine, match: Match, *, by: str, own_id: str | None, progress: Progress, stop: Stop
) -> CancelMatchingOutput:
    """Cancel every queued or running execution `match` selects (see the module)."""
    from majordomus.store.failures import UNREACHABLE  # declaring loads no Redis client

    try:
        return await _cancel_matching(engine, match, by, own_id, progress, stop)
    except UNREACHABLE as exc:
        raise _outage(exc) from exc


async def _cancel_matching(
    engine: Engine, match: Match, by: str, own_id: str | None, progress: Progress, stop: Stop
) -> CancelMatchingOutput:
    selection = (await engine.selection(match)).below(await _top(engine, own_id))
    total = (await engine.count_of(selection)).cancellable
    out = CancelMatchingOutput(0, 0, 0, 0)

    async def cancel(execution_id: str) -> None:
        try:
            answer = await engine.cancel(execution_id, by=by)
        except MajordomusError as exc:
            if exc.code != "not_found":
                raise
            out.passed += 1
            return
        if answer.outcome != "requested":
            out.passed += 1
        elif answer.execution.state == "cancelled":
            out.cancelled += 1
        else:
            out.asked += 1

    async for page in engine.matching(selection, page=PAGE):
        stop()
        out.matched += len(page)
        active = [i for i, _, row in page if row[0] in (b"queued", b"running")]
        out.passed += len(page) - len(active)
        await _in_turns(active, cancel)
        progress(out.cancelled + out.asked, max(total, out.cancelled + out.asked))
    return out


async def retry_matching(
    engine: Engine, match: Match, *, own_id: str | None, progress: Progress, stop: Stop
) -> RetryMatchingOutput:
    """Start again every failed or cancelled execution `match` selects that was not retried
    yet, each as the next attempt of its chain (see the module)."""
    from majordomus.store.failures import UNREACHABLE  # declaring loads no Redis client

    try:
        return await _retry_matching(engine, match, own_id, progress, stop)
    except UNREACHABLE as exc:
        raise _outage(exc) from exc


async def _retry_matching(
    engine: Engine, match: Match, own_id: str | None, progress: Progress, stop: Stop
) -> RetryMatchingOutput:
    selection = (await engine.selection(match)).below(await _top(engine, own_id))
    total = (await engine.count_of(selection)).retryable
    out = RetryMatchingOutput(0, 0, 0, 0, 0)

    async def retry(execution_id: str) -> None:
        raw = await engine.store.snapshot(execution_id)
        if raw is None or raw.get(b"retried_as"):
            out.passed += 1
            return
        try:
            cap = await engine.known(raw[b"capability"].decode())
        except MajordomusError:
            out.unknown += 1
            return
        if has_sensitive(cap.input):
            out.secret += 1
            return
        snap = engine.snapshot_from(raw)
        timeout = raw.get(b"timeout_ms")
        await engine.start(
            cap.id,
            snap.input,
            actor=snap.actor,
            episode=snap.episode if isinstance(snap.episode, str) else None,
            options=StartOptions(
                priority=snap.priority,
                idempotency_key=RETRY_KEY_PREFIX + execution_id,
                retry_of=execution_id,
                attempts_before=max(1, snap.attempt),
                timeout_ms=int(timeout) if timeout else None,
            ),
        )
        out.retried += 1

    async for page in engine.matching(selection, ("retried_as",), page=PAGE):
        stop()
        out.matched += len(page)
        ended = [i for i, _, row in page if row[0] in (b"failed", b"cancelled") and row[3] is None]
        out.passed += len(page) - len(ended)
        await _in_turns(ended, retry)
        done = out.retried + out.secret + out.unknown
        progress(done, max(total, done))
    return out
