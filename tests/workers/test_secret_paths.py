"""No secret in reported text: a handler that puts its `Secret` input in every text it can
report (a step's name, title and detail, a progress message, a log line, a diagnostic's
every field, an error's message and suggestion, an exception's text) and in an output
member typed `Secret` leaves none of it in the history, the snapshot or the output, in the
loop and in a child process alike: one assertion per path. (An output member not typed
`Secret` is the handler's answer as it gave it.)"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest

from majordomus.engine import Engine
from tests.conftest import make_settings, running_worker
from tests.process_capabilities import registry
from tests.workers.test_outages import history

PROCESS = registry()
TOKEN = "tok-8c1f9e2d-very-secret"
R = "«redacted»"

pytestmark = [pytest.mark.process, pytest.mark.slow]  # its worker starts child processes


@pytest.fixture
async def tattle_engine(redis: Any, redis_url: str) -> AsyncIterator[Engine]:
    cfg = make_settings(redis_url)
    async with running_worker(redis, cfg, registry=PROCESS):
        yield Engine(redis, PROCESS, cfg)


async def told(engine: Engine, cap_id: str, how: str) -> tuple[Any, list[Any], str]:
    snap = await engine.start(cap_id, {"token": TOKEN, "how": how})
    done = await engine.wait(snap.id, 20_000)
    events = await history(engine, snap.id)
    everything = msgspec.json.encode([done, *events]).decode()
    return done, events, everything


def data_of(events: list[Any], kind: str) -> list[Any]:
    return [e.data for e in events if e.type == kind]


@pytest.mark.parametrize("cap_id", ["loop.tattle", "proc.tattle"])
async def test_every_reported_text_and_a_secret_output_are_redacted(
    tattle_engine: Engine, cap_id: str
) -> None:
    done, events, everything = await told(tattle_engine, cap_id, "succeed")
    assert done.state == "succeeded"
    (started,) = data_of(events, "execution.step.started")
    assert (started.name, started.title) == (f"step-{R}", f"title {R}")
    (completed,) = data_of(events, "execution.step.completed")
    assert (completed.name, completed.detail) == (f"step-{R}", f"detail {R}")
    (progress,) = data_of(events, "execution.progress")
    assert progress.message == f"progress {R}"
    (line,) = data_of(events, "execution.log")
    assert line.message == f"log {R}"
    (diag,) = data_of(events, "execution.diagnostic")
    assert (diag.code, diag.summary, diag.detail, diag.suggestion) == (
        f"code-{R}", f"summary {R}", f"detail {R}", f"suggestion {R}"
    )
    assert done.output == {"shown": "told", "token": R}  # typed Secret: redacted whole
    assert TOKEN not in everything


@pytest.mark.parametrize("cap_id", ["loop.tattle", "proc.tattle"])
@pytest.mark.parametrize("how", ["typed", "raise"])
async def test_an_error_quoting_the_secret_is_redacted(
    tattle_engine: Engine, cap_id: str, how: str
) -> None:
    done, _, everything = await told(tattle_engine, cap_id, how)
    assert done.state == "failed"
    if how == "typed":
        assert (done.error.code, done.error.message, done.error.suggestion) == (
            "conflict", f"message {R}", f"suggestion {R}"
        )
    else:
        assert done.error.message.endswith(f"ValueError: value {R}")
        assert done.diagnostics[-1].summary == f"ValueError: value {R}"
    assert TOKEN not in everything
