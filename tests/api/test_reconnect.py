"""A client that disconnects anywhere and reconnects with `Last-Event-ID` receives every
retained event exactly once, in order: on one execution's channel and on the unscoped feed,
and across an API process restart (gentle or abrupt). Property-tested over disconnect points."""

from __future__ import annotations

import json
import signal
import time
from typing import Any

import httpx
from httpx_sse import EventSource
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.api.conftest import TERMINAL, ApiProcess, start, wait_final

PROPERTY = settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


class Follower:
    """An EventSource-like client: follows one execution, reconnecting with its last id."""

    def __init__(self, server: ApiProcess, execution_id: str | None, scoped: bool) -> None:
        self.server = server
        self.execution_id = execution_id
        self.scoped = scoped
        self.cursor: str | None = None
        self.seen: list[int] = []
        self.done = False
        self.connections = 0

    def connect(self, cut: int | None, on_ready: Any = None) -> None:
        """One connection: read until `cut` events (then hang up), the end, or the server goes."""
        headers = {"Accept": "text/event-stream"}
        if self.cursor is not None:
            headers["Last-Event-ID"] = self.cursor
        params = {"execution": self.execution_id} if self.scoped and self.execution_id else {}
        deadline = time.monotonic() + 30
        while True:
            try:
                with httpx.Client(base_url=self.server.url, timeout=20) as client:
                    with client.stream(
                        "GET", "/events", params=params, headers=headers
                    ) as response:
                        self.connections += 1
                        self._read(response, cut, on_ready)
                return
            except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)  # the server went away: try again, as EventSource does

    def _read(self, response: httpx.Response, cut: int | None, on_ready: Any) -> None:
        if response.status_code == 204:
            self.done = True
            return
        assert response.status_code == 200, response.read()
        count = 0
        for sse in EventSource(response).iter_sse():
            if sse.event == "stream.ready":
                if on_ready is not None:
                    on_ready()
                continue
            if sse.event == "stream.closing":
                self.done = json.loads(sse.data)["data"]["reason"] == "finished"
                return
            if sse.event.startswith("stream."):
                continue
            event = json.loads(sse.data)
            self.cursor = sse.id
            if event["execution_id"] == self.execution_id:
                self.seen.append(event["sequence"])
                if not self.scoped and event["type"] in TERMINAL:
                    self.done = True
                    return
            count += 1
            if cut is not None and count >= cut:
                return  # hang up here

    def follow(self, cuts: list[int], on_ready: Any = None, between: Any = None) -> list[int]:
        for i, cut in enumerate([*cuts, None]):
            if self.done:
                break
            if between is not None:
                between(i)
            self.connect(cut, on_ready if i == 0 else None)
        assert self.done, "the channel never reached the end of the execution"
        return self.seen


CUTS = st.lists(st.integers(min_value=1, max_value=12), min_size=1, max_size=4)


@PROPERTY
@given(cuts=CUTS, scoped=st.booleans())
def test_a_reconnect_from_last_event_id_misses_nothing_and_repeats_nothing(
    api: ApiProcess, http: httpx.Client, cuts: list[int], scoped: bool
) -> None:
    inp = {"steps": 4, "log_lines": 3, "delay_ms": 30}
    follower = Follower(api, None, scoped)
    if scoped:
        follower.execution_id = start(http, "executions.demonstrate", **inp)["id"]
        seen = follower.follow(cuts)
    else:
        # The unscoped channel is live from where it opens: start once it is open.
        def begin() -> None:
            follower.execution_id = start(http, "executions.demonstrate", **inp)["id"]

        seen = follower.follow(cuts, on_ready=begin)
    total = wait_final(http, str(follower.execution_id))["last_sequence"]
    assert seen == list(range(1, total + 1))


@settings(
    max_examples=3,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    cuts=st.lists(st.integers(min_value=1, max_value=10), min_size=1, max_size=3),
    restart_at=st.integers(min_value=1, max_value=3),
    abrupt=st.booleans(),
    scoped=st.booleans(),
)
def test_a_reconnect_across_an_api_restart_misses_nothing(
    api_b: ApiProcess,
    http: httpx.Client,
    cuts: list[int],
    restart_at: int,
    abrupt: bool,
    scoped: bool,
) -> None:
    restart_at = min(restart_at, len(cuts))
    # 36 events over about two seconds: more than the cuts can read before the restart.
    inp = {"steps": 8, "log_lines": 2, "delay_ms": 250}
    follower = Follower(api_b, None, scoped)
    restarted = []

    def begin() -> None:
        follower.execution_id = start(http, "executions.demonstrate", **inp)["id"]

    def maybe_restart(i: int) -> None:
        if i == restart_at:
            api_b.restart(signal.SIGKILL if abrupt else signal.SIGTERM)
            restarted.append(i)

    if scoped:
        begin()
        seen = follower.follow(cuts, between=maybe_restart)
    else:
        seen = follower.follow(cuts, on_ready=begin, between=maybe_restart)
    total = wait_final(http, str(follower.execution_id))["last_sequence"]
    assert seen == list(range(1, total + 1))
    assert restarted and follower.connections >= 2
