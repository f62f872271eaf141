"""Scenario "audience": the work beside slow unscoped live listeners (0, 50 and 500).

One `majordomus serve` and two workers; this process starts `bench.emit` executions over HTTP
at a steady rate (each reports a few progress events, so the feed carries about eight events
an execution) and reads, once they are done, when each one started running.
The same load runs with no listener, with 50 and with 500 listeners of `GET /events` (every
execution's events), all in one process of their own (`python -m bench.audience listen`)
that read slower than events come: each reads `READ_BYTES` and then pauses `READ_PAUSE`, on
a socket with a small receive buffer, so the API meets their back-pressure within seconds.
Each size's load runs in `ROUNDS` blocks, the sizes taking turns, pooled by size.

The figures, each against the run with no listener (the ratio, which the issue wants within
1.5x): the start latency (from the POST sent to the handler's first line, as `time.time()`
in this process and in the handler, which answers it: the stored `started_at` has
milliseconds, floored, a tick as large as the whole no-listener p99) p50 and p99, the POST's own
answer time p99 (the API's other answers stay prompt), and the achieved rate (starts over
the time from the first POST to the last execution started). Beside them, what the
listeners were sent: events, `stream.lagged` messages and the events they said were
dropped, read from the listeners' own counts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import sys
import time
from datetime import datetime
from pathlib import Path

import httpx

from bench.harness import (
    Bench,
    Child,
    Row,
    api_server,
    children,
    majordomus_worker,
    ms,
    percentile,
    read_http_answer,
    wait_for_api,
    wait_for_workers,
)
from bench.live import raise_fd_limit
from majordomus.api.live.feed import REST_SECONDS
from majordomus.engine import LIVE_PATH

RATE = 200
"""Starts per second."""
EVENTS = 5
"""Progress events each execution reports (plus created, queued, started, succeeded)."""
READ_BYTES = 16_384
READ_PAUSE = 0.25
"""A listener reads this much, then waits this long: 64 KiB/s, a tenth of the feed's rate."""
RECEIVE_BUFFER = 16_384
GOAL_RATIO = 1.5
EVENT = b"\nevent: execution."
LAGGED = b"event: stream.lagged\ndata: "
AUDIENCES = (0, 50, 500)
ROUNDS = 2
"""The load of each size runs in this many blocks, the sizes taking turns (0, 50, 500, 0,
50, 500), and each size's blocks are pooled: a neighbour's burst on a shared machine then
falls on every size alike instead of on one whole phase. A block is 15 s of load: slow
listeners outrun the backlog (`MAJORDOMUS_LIVE_BACKLOG`, about 6 s of this feed) after
about 7 s, and a block must see them lag."""
CONNECTIONS = 64
"""The most connections the load opens to the API (a start waits for one past it)."""


class Phase:
    """The load with `listeners` slow listeners: its `ROUNDS` blocks pooled."""

    def __init__(self, listeners: int) -> None:
        self.listeners = listeners
        self.latencies: list[float] = []
        """From the POST sent to the handler's first line (`time.time()` on both sides)."""
        self.stamped: list[float] = []
        """From the POST sent to the stored `started_at` (a millisecond stamp, floored)."""
        self.accepted: list[float] = []
        """From the POST sent to `created_at` (the API's side of a start)."""
        self.taken: list[float] = []
        """From `created_at` to `started_at` (the queue's and the workers' side)."""
        self.answers: list[float] = []
        self.rates: list[float] = []
        """Each block's achieved rate."""
        self.failed = 0
        self.received = 0
        self.lagged = 0
        self.dropped = 0
        self.opened: list[int] = []
        """Each block's listeners that opened their channel."""
        self.delivered_by = ""
        """Which process wrote to the listeners: `serve`'s delivery process or the API."""

    @property
    def rate(self) -> float:
        """The slowest block's rate."""
        return min(self.rates, default=0.0)


async def run(bench: Bench) -> list[Row]:
    starts = bench.size(6000, 400)
    audiences: tuple[int, ...] = AUDIENCES if not bench.quick else (0, 20)
    if os.environ.get("MAJORDOMUS_BENCH_AUDIENCES"):  # say 0,500 to look at one size
        audiences = tuple(int(n) for n in os.environ["MAJORDOMUS_BENCH_AUDIENCES"].split(","))
    rounds = 1 if bench.quick else ROUNDS
    await bench.flush()
    phases = {listeners: Phase(listeners) for listeners in audiences}
    with children() as kids:
        api, base_url = api_server(bench)
        kids.append(api)
        kids.extend(majordomus_worker(bench, max_jobs=50) for _ in range(2))
        await wait_for_api(base_url, api)
        await wait_for_workers(bench, 2)
        port = int(base_url.rsplit(":", 1)[1])
        http = Poster("127.0.0.1", port, {"capability": "bench.emit", "input": {"events": EVENTS}})
        try:
            await _load(http, 100, RATE)  # warm-up
            for _ in range(rounds):
                for listeners in audiences:
                    phase = phases[listeners]
                    listening = _listeners(bench, port, listeners) if listeners else None
                    try:
                        if listening is not None:
                            await _until_ready(listening[0])
                            await asyncio.sleep(1)
                            phase.delivered_by = await _delivered_by(base_url)
                        await _measure(bench, http, phase, starts // rounds)
                    finally:
                        if listening is not None:
                            _collect(phase, *listening)
                    if listening is not None:  # the delivery's reader rests before the next
                        await asyncio.sleep(REST_SECONDS + 1)
        finally:
            await http.aclose()
    return _rows(bench, list(phases.values()), starts // rounds * rounds, rounds)


class Poster:
    """The load's client: `POST /api/v1/executions/start` on up to `CONNECTIONS` kept-alive
    connections, one request at a time each, the request's bytes made once.

    The benchmark's instrument, on the same two cores as what it measures: httpx took 30-45 %
    of a core for 200 requests a second (its request and response objects, its pool, its
    h11 state machine), beside an API that takes about as much to answer them; this takes
    a fraction of that, in both phases alike. The answers are read as the API writes them
    (a status line, headers with a Content-Length, the body)."""

    def __init__(self, host: str, port: int, body: dict[str, object]) -> None:
        self.host, self.port = host, port
        payload = json.dumps(body).encode()
        self.request = (
            f"POST /api/v1/executions/start HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
        ).encode() + payload
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self.opened = 0
        self.free = asyncio.Condition()

    async def post(self) -> tuple[int, bytes]:
        """One start: the status and the body of its answer."""
        async with self.free:
            while not self.idle and self.opened >= CONNECTIONS:
                await self.free.wait()
            conn = self.idle.pop() if self.idle else None
            if conn is None:
                self.opened += 1
        try:
            if conn is None:
                conn = await asyncio.open_connection(self.host, self.port)
                answer = await self._exchange(*conn)
            else:
                try:
                    answer = await self._exchange(*conn)
                except (asyncio.IncompleteReadError, ConnectionError):
                    # Closed by the API while idle (its keep-alive): nothing was answered
                    # on it, so nothing was started; again on a new one.
                    conn[1].close()
                    conn = await asyncio.open_connection(self.host, self.port)
                    answer = await self._exchange(*conn)
        except BaseException:
            async with self.free:
                self.opened -= 1
                self.free.notify()
            if conn is not None:
                conn[1].close()
            raise
        async with self.free:
            self.idle.append(conn)
            self.free.notify()
        return answer

    async def _exchange(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> tuple[int, bytes]:
        writer.write(self.request)
        return await read_http_answer(reader)

    async def aclose(self) -> None:
        """Close the connections kept (the API closes those idle past its keep-alive: a
        phase begins on new ones)."""
        async with self.free:
            for _, writer in self.idle:
                writer.close()
            self.opened -= len(self.idle)
            self.idle.clear()


async def _load(poster: Poster, n: int, rate: int) -> list[tuple[float, float, str]]:
    """Start `n` executions at `rate` a second; answers (sent at, answered in, id) of each."""
    answers: list[tuple[float, float, str]] = []
    await poster.aclose()  # none left idle since the last load

    async def one() -> None:
        sent = time.time()
        t0 = time.perf_counter()
        status, answer = await poster.post()
        took = time.perf_counter() - t0
        answers.append((sent, took, json.loads(answer)["id"] if status < 300 else ""))

    tasks = []
    t0 = time.perf_counter()
    for i in range(n):
        delay = t0 + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one()))
    await asyncio.gather(*tasks)
    return answers


async def _measure(bench: Bench, http: Poster, phase: Phase, n: int) -> None:
    answers = await _load(http, n, RATE)
    first = min(sent for sent, _, _ in answers)
    started: list[float] = []
    async with bench.engine() as engine:
        for sent, took, execution_id in answers:
            phase.answers.append(took)
            if not execution_id:
                phase.failed += 1
                continue
            deadline = time.monotonic() + 120
            while True:
                snapshot = await engine.get(execution_id)
                if isinstance(snapshot.output, dict):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{execution_id} did not finish within 120 s")
                await asyncio.sleep(0.05)
            assert isinstance(snapshot.started_at, str)
            at = _timestamp(snapshot.started_at)
            created = _timestamp(snapshot.created_at)
            started.append(at)
            phase.latencies.append(max(0.0, snapshot.output["began"] - sent))
            phase.stamped.append(max(0.0, at - sent))
            phase.accepted.append(max(0.0, created - sent))
            phase.taken.append(max(0.0, at - created))
    phase.rates.append(len(started) / max(1e-9, max(started) - first))


async def _delivered_by(base_url: str) -> str:
    """What the API's probe says of its live channels' delivery (`api.live.apart`)."""
    async with httpx.AsyncClient(base_url=base_url) as client:
        pid = (await client.get("/api/v1/live")).json().get("delivery_pid")
    return f"serve's delivery process ({pid})" if pid else "the API process itself"


def _timestamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _listeners(bench: Bench, port: int, count: int) -> tuple[Child, Path]:
    out = bench.workdir / f"audience-{count}-{time.monotonic_ns()}.json"
    argv = [
        sys.executable, "-m", "bench.audience", "listen", "--port", str(port),
        "--count", str(count), "--out", str(out),
    ]  # fmt: skip
    return Child(f"audience-{count}", argv, bench.env(), bench.workdir), out


async def _until_ready(child: Child, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while "ready" not in child.log():
        if not child.alive():
            raise RuntimeError(f"{child.name} exited early:\n{child.log()[-2000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{child.name} did not connect within {timeout}s")
        await asyncio.sleep(0.05)


def _collect(phase: Phase, child: Child, out: Path) -> None:
    child.stop(timeout=30)
    if not out.exists():
        raise RuntimeError(f"{child.name} wrote no results:\n{child.log()[-2000:]}")
    found = json.loads(out.read_text())
    phase.opened.append(found["opened"])
    phase.received += found["events"]
    phase.lagged += found["lagged"]
    phase.dropped += found["dropped"]


def _rows(bench: Bench, phases: list[Phase], starts: int, rounds: int) -> list[Row]:
    base = phases[0]
    rows: list[Row] = []
    for phase in phases[1:]:
        who = f"{phase.listeners} slow listeners"
        for metric, ours, theirs in (
            ("start latency p50", ms(percentile(phase.latencies, 50)), ms(percentile(base.latencies, 50))),
            ("start latency p99", ms(percentile(phase.latencies, 99)), ms(percentile(base.latencies, 99))),
            ("POST answer p99", ms(percentile(phase.answers, 99)), ms(percentile(base.answers, 99))),
        ):  # fmt: skip
            ratio = ours / theirs if theirs else float("inf")
            rows.append(
                Row("audience", f"{metric}, {who}", ours, "ms", theirs, "no listener",
                    f"<= {GOAL_RATIO}x", ratio <= GOAL_RATIO, higher_is_better=False)
            )  # fmt: skip
        rows.append(
            Row("audience", f"starts/s, {who}", phase.rate, "/s", base.rate, "no listener",
                f">= 1/{GOAL_RATIO}x", phase.rate * GOAL_RATIO >= base.rate)
        )  # fmt: skip
        stamped, stamped_base = ms(percentile(phase.stamped, 99)), ms(percentile(base.stamped, 99))
        rows.append(
            Row("audience", f"start latency p99 to the stored started_at, {who}", stamped, "ms",
                stamped_base, "no listener", "-", None, higher_is_better=False)
        )  # fmt: skip
        bench.note(
            f"audience: {starts:,} starts at {RATE}/s with {phase.listeners} listeners "
            f"(in {rounds} blocks, each between blocks of the other sizes; at least "
            f"{min(phase.opened)} opened): they were sent {phase.received:,} events and "
            f"{phase.lagged:,} stream.lagged saying {phase.dropped:,} dropped; "
            f"{phase.failed} starts refused; written by {phase.delivered_by}; "
            + _parts(phase, base)
        )
    bench.note(
        f"audience: with no listener, start p50 {ms(percentile(base.latencies, 50)):.1f} ms, "
        f"p99 {ms(percentile(base.latencies, 99)):.1f} ms, {base.rate:.0f} starts/s"
    )
    return rows


def _parts(phase: Phase, base: Phase) -> str:
    """Where the start latency's p99 goes: the API's side and the queue's and workers' side."""
    return ", ".join(
        f"{name} p99 {ms(percentile(getattr(phase, part), 99)):.2f} ms "
        f"(no listener {ms(percentile(getattr(base, part), 99)):.2f})"
        for name, part in (("POST sent to accepted", "accepted"), ("accepted to started", "taken"))
    )


# -- the listeners' process ----------------------------------------------------------------------


class Tally:
    """What one listener read: events, and the `stream.lagged` messages with what they said."""

    __slots__ = ("sock", "tail", "parsed_upto", "opened", "counts")

    def __init__(self, sock: socket.socket, counts: dict[str, int]) -> None:
        self.sock = sock
        self.tail = b""
        self.parsed_upto = 0
        """Where in `tail` (kept from the last read) lagged messages were parsed up to."""
        self.opened = False
        self.counts = counts

    def read(self) -> bool:
        """Read what is there, `READ_BYTES` at most; False once the server closed."""
        try:
            data = self.sock.recv(READ_BYTES)
        except BlockingIOError:
            return True
        except OSError:
            return False
        if not data:
            return False
        counts = self.counts
        tail = self.tail
        seen = tail + data
        if not self.opened and b"stream.ready" in seen:
            self.opened = True
            counts["opened"] += 1
        counts["events"] += seen.count(EVENT) - tail.count(EVENT)
        keep = max(0, len(seen) - 64)
        done_upto = self.parsed_upto
        at = seen.find(LAGGED, self.parsed_upto)
        while at >= 0:
            end = seen.find(b"\n", at + len(LAGGED))
            if end < 0:
                keep = min(keep, at)  # read the rest of it next time
                break
            counts["dropped"] += json.loads(seen[at + len(LAGGED) : end])["data"]["dropped"]
            counts["lagged"] += 1
            done_upto = end
            at = seen.find(LAGGED, end)
        self.tail = seen[keep:]
        self.parsed_upto = max(0, done_upto - keep)
        return True


GROUPS = 10
"""The listeners read in this many groups, one every READ_PAUSE / GROUPS."""


def listen(args: argparse.Namespace) -> None:
    """Open `count` slow listeners, say `ready`, read until SIGTERM, write the counts.

    One plain loop, no task or future per listener: each listener's socket is read (at most
    `READ_BYTES`, what is there) once every `READ_PAUSE`, the listeners in `GROUPS` groups
    spread over the pause. The process is the benchmark's instrument, on the same two cores
    as what it measures: a listener that cost an asyncio task, a future per read and a timer
    per pause took a tenth of a core for 500 of them, taken from the API, the workers and
    Redis; this takes a twentieth.
    """
    raise_fd_limit(args.count + 64)
    stop = False

    def stopping(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, stopping)
    counts = {"events": 0, "lagged": 0, "dropped": 0, "opened": 0}
    request = (
        f"GET {LIVE_PATH} HTTP/1.1\r\nHost: 127.0.0.1:{args.port}\r\n"
        "Accept: text/event-stream\r\n\r\n"
    ).encode()
    tallies: list[Tally] = []
    for _ in range(args.count):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
        sock.connect(("127.0.0.1", args.port))
        sock.sendall(request)
        sock.setblocking(False)
        tallies.append(Tally(sock, counts))
    deadline = time.monotonic() + 60
    while counts["opened"] < args.count:
        if time.monotonic() > deadline:
            raise SystemExit(f"{counts['opened']} of {args.count} listeners opened in 60 s")
        for tally in tallies:
            if not tally.opened:
                tally.read()
        time.sleep(0.01)
    print("ready", flush=True)
    groups = [tallies[g::GROUPS] for g in range(GROUPS)]
    step = READ_PAUSE / GROUPS
    at = time.monotonic()
    while not stop:
        for group in groups:
            at += step
            pause = at - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            if stop:
                break
            for tally in group:
                tally.read()
    for tally in tallies:
        tally.sock.close()
    Path(args.out).write_text(json.dumps(counts))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.audience")
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("listen")
    one.add_argument("--port", type=int, required=True)
    one.add_argument("--count", type=int, required=True)
    one.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    listen(args)


if __name__ == "__main__":
    main()
