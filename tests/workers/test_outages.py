"""Redis going away under a running worker: the process stays, a handler keeps running and
its reports are written in order once Redis returns, a cancel sent while the worker was cut
off is still honoured and its end written, and a Redis that comes back empty has the
handlers it forgot stopped, said once. Each test runs a Redis (or a cut) of its own: a
private `redis-server` stopped and started again on its port, or a TCP proxy between the
worker and the suite's Redis that drops every connection while it is cut."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from majordomus.config import Settings
from majordomus.engine import Engine
from majordomus.errors import MajordomusError
from majordomus.local.embedded import free_port, redis_server_binary
from majordomus.model import event_type_of
from majordomus.registry import REGISTRY
from majordomus.store.connect import connect
from tests.conftest import make_settings, running_worker, until

pytestmark = pytest.mark.slow

OUTAGE_SECONDS = 3.0


class PrivateRedis:
    """A redis-server of the test's own, stopped and started again on the same port;
    `persistent` keeps its data across (an append-only file, synced at every write)."""

    def __init__(self, persistent: bool) -> None:
        found = redis_server_binary()
        if found is None:
            pytest.skip("no redis-server binary")
        self.binary = found[0]
        self.persistent = persistent
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="majordomus-outage-")
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> PrivateRedis:
        durability = ["--appendonly", "yes", "--appendfsync", "always"] if self.persistent else [
            "--appendonly", "no"
        ]
        self.process = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--dir", self.dir, "--protected-mode", "no", *durability],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(
                ("127.0.0.1", self.port), timeout=0.2
            ) as conn:
                conn.sendall(b"PING\r\n")
                if conn.recv(16).startswith(b"+PONG"):
                    return self
            time.sleep(0.05)
        raise RuntimeError("the private redis-server did not start")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)
        self.process = None

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    async def outage(self, seconds: float = OUTAGE_SECONDS) -> None:
        """Stopped for `seconds`, then started again (the loop goes on meanwhile)."""
        await asyncio.to_thread(self.stop)
        await asyncio.sleep(seconds)
        await asyncio.to_thread(self.start)


class Cut:
    """A TCP proxy to a Redis: while cut, it drops every connection through it and every
    new one, so what connects through it is cut off while everyone else is not."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        self.cut_off = False
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    def url(self, db: str) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    async def start(self) -> Cut:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def cut(self) -> None:
        self.cut_off = True
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    def restore(self) -> None:
        self.cut_off = False

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.cut_off:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, up_writer))
        await asyncio.gather(_pump(reader, up_writer), _pump(up_reader, writer))
        self._writers.difference_update((writer, up_writer))

    async def outage(self, seconds: float = OUTAGE_SECONDS) -> None:
        self.cut()
        await asyncio.sleep(seconds)
        self.restore()


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.transport.abort()


@contextlib.asynccontextmanager
async def cut_between_worker_and(redis_url: str) -> AsyncIterator[tuple[Cut, str]]:
    """A `Cut` in front of the suite's Redis, and the URL (same database) through it."""
    hostport, db = redis_url.removeprefix("redis://").rsplit("/", 1)
    host, port = hostport.rsplit(":", 1)
    cut = await Cut(host, int(port)).start()
    try:
        yield cut, cut.url(db)
    finally:
        await cut.close()


@contextlib.asynccontextmanager
async def engine_on(url: str, cfg: Settings) -> AsyncIterator[Engine]:
    client = connect(url, arq=True)
    try:
        yield Engine(client, REGISTRY, cfg)
    finally:
        await client.aclose()


async def history(engine: Engine, xid: str) -> list[Any]:
    events: list[Any] = []
    after = 0
    while True:
        page = await engine.events(xid, after=after)
        events += page.events
        if not page.more:
            return events
        after = page.last_sequence


def worker_alive(worker: Any) -> bool:
    return worker.main_task is not None and not worker.main_task.done()


def said(caplog: Any, text: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if text in r.getMessage()]


async def _said(caplog: Any, text: str) -> bool:
    return bool(said(caplog, text))


# -- Redis stopped and started again, with its data ----------------------------------------


async def test_a_handler_reporting_through_a_redis_restart_ends_with_every_report(
    caplog: Any,
) -> None:
    caplog.set_level(logging.INFO, logger="majordomus")
    server = PrivateRedis(persistent=True).start()
    # A lease longer than the outage: what the sweeper does with a lease that ran out while
    # Redis was away is not what this test is about.
    cfg = make_settings(server.url, lease_seconds=15.0)
    try:
        async with engine_on(server.url, cfg) as engine, running_worker(engine.redis, cfg) as worker:
            snap = await engine.start(
                "executions.demonstrate", {"steps": 14, "delay_ms": 400, "log_lines": 2}
            )
            await until(lambda: _past(engine, snap.id, 8))
            await server.outage()
            done = await engine.wait(snap.id, 30_000)

            assert done.state == "succeeded"
            events = await history(engine, snap.id)
            assert [e.sequence for e in events] == list(range(1, len(events) + 1))
            per_step = ["execution.step.started", "execution.log", "execution.log",
                        "execution.step.completed", "execution.progress"]
            assert [event_type_of(e) for e in events] == [
                "execution.created", "execution.queued", "execution.started", *per_step * 14,
                "execution.completed",
            ]
            assert worker_alive(worker)

            # It takes new work at once, and says its outage once, then its recovery.
            after = await engine.start("tests.noop", {})
            assert (await engine.wait(after.id, 10_000)).state == "succeeded"
            assert len(said(caplog, "the worker's poll loop failed")) == 1
            assert said(caplog, "the worker's poll loop recovered")
            await until(lambda: _said(caplog, "the signal listener recovered"), timeout=5)
    finally:
        server.remove()


async def _past(engine: Engine, xid: str, sequence: int) -> bool:
    return (await engine.get(xid)).last_sequence >= sequence


# -- the worker cut off, Redis itself up -----------------------------------------------------


async def test_a_cancel_sent_while_the_worker_was_cut_off_ends_it_cancelled(
    redis: Any, redis_url: str
) -> None:
    cfg = make_settings(redis_url, lease_seconds=15.0)
    direct = Engine(redis, REGISTRY, cfg)
    async with cut_between_worker_and(redis_url) as (cut, through), engine_on(through, cfg) as mine:
        async with running_worker(mine.redis, cfg) as worker:
            snap = await direct.start("tests.sleepy", {"seconds": 60})
            await until(lambda: _state_is(direct, snap.id, "running"))
            cut.cut()
            await direct.cancel(snap.id)  # published while the worker hears nothing
            await asyncio.sleep(OUTAGE_SECONDS)
            cut.restore()
            done = await direct.wait(snap.id, 20_000)
            assert done.state == "cancelled"
            assert worker_alive(worker)


async def test_the_end_of_a_cancelled_execution_is_written_across_a_cut(
    redis: Any, redis_url: str
) -> None:
    cfg = make_settings(redis_url, lease_seconds=15.0, cancel_grace=0.5)
    direct = Engine(redis, REGISTRY, cfg)
    async with cut_between_worker_and(redis_url) as (cut, through), engine_on(through, cfg) as mine:
        async with running_worker(mine.redis, cfg) as worker:
            snap = await direct.start("tests.stubborn", {"seconds": 60})  # ignores its flag
            await until(lambda: _state_is(direct, snap.id, "running"))
            await direct.cancel(snap.id)
            await until(lambda: _cancel_seen(worker, snap.id))
            # Cut before the grace is over: the worker stops the handler and must write its
            # end through the outage.
            await cut.outage()
            done = await direct.wait(snap.id, 20_000)
            assert done.state == "cancelled"
            types = [event_type_of(e) for e in await history(direct, snap.id)]
            assert types[-2:] == ["execution.cancelling", "execution.cancelled"]
            assert worker_alive(worker)


async def test_a_running_handler_keeps_running_while_its_worker_is_cut_off(
    redis: Any, redis_url: str
) -> None:
    cfg = make_settings(redis_url, lease_seconds=15.0)
    direct = Engine(redis, REGISTRY, cfg)
    async with cut_between_worker_and(redis_url) as (cut, through), engine_on(through, cfg) as mine:
        async with running_worker(mine.redis, cfg) as worker:
            snap = await direct.start(
                "executions.demonstrate", {"steps": 10, "delay_ms": 400, "log_lines": 1}
            )
            await until(lambda: _past(direct, snap.id, 5))
            await cut.outage()
            done = await direct.wait(snap.id, 30_000)
            assert done.state == "succeeded"
            events = await history(direct, snap.id)
            assert [e.sequence for e in events] == list(range(1, 3 + 4 * 10 + 2))
            # Not held by the cut: held, its own time would be its ten steps' 4 s and the
            # whole cut besides (it was past step 5, with 2 s of steps left, when cut).
            print(f"the handler's own time: {done.output['elapsed_ms']} ms (its steps: 4000)")
            assert done.output["elapsed_ms"] < 4000 + OUTAGE_SECONDS * 1000
            assert worker_alive(worker)


async def _state_is(engine: Engine, xid: str, state: str) -> bool:
    return (await engine.get(xid)).state == state


async def _cancel_seen(worker: Any, xid: str) -> bool:
    run = worker.runtime.running.get(xid)
    return run is not None and run.ctx.cancelled()


# -- Redis back, empty -----------------------------------------------------------------------


async def test_redis_back_empty_stops_the_handlers_it_forgot_and_says_so_once(
    caplog: Any,
) -> None:
    caplog.set_level(logging.INFO, logger="majordomus")
    server = PrivateRedis(persistent=False).start()
    cfg = make_settings(server.url)
    try:
        async with engine_on(server.url, cfg) as engine, running_worker(engine.redis, cfg) as worker:
            started = [await engine.start("tests.sleepy", {"seconds": 60}) for _ in range(3)]
            await until(lambda: _all_running(engine, [s.id for s in started]))
            await server.outage(1.0)

            # The beat finds them gone and stops their handlers.
            await until(lambda: _nothing_running(worker), timeout=15)
            forgotten = said(caplog, "Redis no longer knows")
            assert len(forgotten) == 1 and "knows 3 of the" in forgotten[0].getMessage()
            for snap in started:
                with pytest.raises(MajordomusError) as gone:
                    await engine.get(snap.id)
                assert gone.value.code == "not_found"

            # New work runs at once: the worker announced itself again and listens again.
            fresh = await engine.start("tests.noop", {})
            assert (await engine.wait(fresh.id, 10_000)).state == "succeeded"
            assert worker.runtime.worker_id in await engine.workers_beating(0)
            await asyncio.sleep(2 * cfg.lease_seconds / 5)  # a few more beats say nothing more
            assert len(said(caplog, "Redis no longer knows")) == 1
            assert worker_alive(worker)
    finally:
        server.remove()


async def _all_running(engine: Engine, ids: list[str]) -> bool:
    return all([(await engine.get(i)).state == "running" for i in ids])


async def _nothing_running(worker: Any) -> bool:
    return not worker.runtime.running


async def test_a_forgotten_handler_is_stopped_even_when_its_writer_learned_first(
    redis: Any, settings: Settings, caplog: Any
) -> None:
    caplog.set_level(logging.INFO, logger="majordomus")
    engine = Engine(redis, REGISTRY, settings)
    async with running_worker(redis, settings) as worker:
        snap = await engine.start("tests.sleepy", {"seconds": 60})
        await until(lambda: _state_is(engine, snap.id, "running"))
        await redis.delete(*(await redis.keys(f"*{snap.id}*")))  # Redis forgets it
        # Its report writer finds out first (an append answered "not found")...
        worker.runtime.running[snap.id].ctx.ended_elsewhere(forgotten=True)
        # ...and the beat still stops the handler, and says so once.
        await until(lambda: _nothing_running(worker), timeout=10)
        assert len(said(caplog, "Redis no longer knows 1 of the")) == 1
