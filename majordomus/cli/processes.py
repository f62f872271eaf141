"""The process commands: `majordomus worker`, `dev`, `serve` and `mcp`, where the surfaces meet.

This is the one CLI module that imports the API (`api.launch`, `api.mcp`) and the worker
side (`workers.settings`), and it does so inside each command, so `majordomus --help`
loads neither. `worker` and `serve` first check that the configured Redis answers and stop
with a sentence and an exit code from `errors.EXIT_CODE` when it does not; `dev` brings its
own Redis when none is configured, and `mcp` reports an unreachable one to its client.
Nothing here draws an answer or runs a capability: that is `commands.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import typer

from majordomus.config import settings

if TYPE_CHECKING:
    import socket


def _require_redis() -> None:
    """Exit with a sentence, not a traceback, when the configured Redis does not answer."""
    from majordomus.errors import EXIT_CODE, MajordomusError
    from majordomus.store.connect import check_reachable

    try:
        check_reachable(settings().redis_url)
    except MajordomusError as exc:
        typer.echo(f"majordomus: {exc.message}.\n{_sentence(exc.suggestion or '')}", err=True)
        raise typer.Exit(EXIT_CODE[exc.code]) from None


def _sentence(text: str) -> str:
    """A suggestion as a line of its own: capitalised, with its full stop."""
    return f"{text[:1].upper()}{text[1:]}." if text else ""


def _logging() -> None:
    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")


BACKLOG = 2048
"""Connections the API's socket queues (uvicorn's default), while it starts and while busy."""


def _listening(host: str, port: int) -> socket.socket:
    """The API's socket, bound and listening before anything heavy is imported (the app,
    its MCP server: seconds of a start): a client that connects while the API starts, or
    restarts (an EventSource reconnecting), is queued and answered once it is up instead
    of refused. A port that cannot be bound stops the process with one line."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        typer.echo(
            f"majordomus: cannot listen on {host}:{port} ({exc.strerror or exc}).\n"
            "Stop what uses it, or choose another with --port.",
            err=True,
        )
        raise typer.Exit(2) from None
    sock.listen(BACKLOG)
    return sock


def _serve_worker_metrics(host: str) -> None:
    """The worker's metrics port, when `MAJORDOMUS_METRICS_PORT` asks for one; a port that
    cannot be bound stops the worker with one line."""
    port = settings().metrics_port
    if port is None:
        return
    import logging

    from majordomus.metrics import serve_metrics

    try:
        serve_metrics(host, port)
    except OSError as exc:
        typer.echo(
            f"majordomus: cannot serve the worker's metrics on {host}:{port} ({exc}).\n"
            "Choose another MAJORDOMUS_METRICS_PORT, or leave it unset.",
            err=True,
        )
        raise typer.Exit(2) from None
    logging.getLogger("majordomus.worker").info("metrics on http://%s:%d/metrics", host, port)


def _worker_loop() -> None:
    """Set the worker's event loop (uvloop where installed, `majordomus.event_loop`) before
    arq's `Worker` takes the current one, and say which it is."""
    import asyncio
    import logging

    from majordomus.event_loop import choose

    choice = choose(settings().fast_loop)
    asyncio.set_event_loop(choice.new_loop())
    logging.getLogger("majordomus.worker").info("event loop %s (%s)", choice.loop, choice.why_loop)


def worker(
    max_jobs: int = typer.Option(
        0, help="Executions this worker runs at once (default MAJORDOMUS_MAX_JOBS)."
    ),
    metrics_host: str = typer.Option(
        "127.0.0.1", help="Interface the metrics port binds (with MAJORDOMUS_METRICS_PORT)."
    ),
) -> None:
    """Run an arq worker on MAJORDOMUS_REDIS_URL (default redis://127.0.0.1:6379/0)."""
    _require_redis()
    from majordomus.workers.settings import build_worker

    _logging()
    _serve_worker_metrics(metrics_host)
    overrides = {"max_jobs": max_jobs} if max_jobs else {}
    _worker_loop()
    build_worker(settings(), **overrides).run()


def dev(
    host: str = typer.Option("127.0.0.1", help="Interface to bind."),
    port: int = typer.Option(8000, help="Port to bind."),
) -> None:
    """Run the API and a worker in one process, on MAJORDOMUS_REDIS_URL or, when none is set,
    on an embedded Redis or Valkey server it starts and stops itself (in-process fakeredis
    when there is none; the banner says which)."""
    sock = _listening(host, port)
    from majordomus.api.launch import run_dev

    _logging()
    run_dev(host, port, settings(), sock)


def serve(
    host: str = typer.Option("127.0.0.1", help="Interface to bind."),
    port: int = typer.Option(8000, help="Port to bind."),
) -> None:
    """Run the HTTP API (with the live channel and MCP at /mcp) on MAJORDOMUS_REDIS_URL."""
    _require_redis()
    sock = _listening(host, port)
    from majordomus.api.launch import run_serve

    _logging()
    run_serve(host, port, settings(), sock)


def mcp() -> None:
    """Serve the capabilities as MCP tools over stdio, on MAJORDOMUS_REDIS_URL."""
    from majordomus.api.mcp import run_stdio

    run_stdio(settings())


PROCESS_COMMANDS: tuple[Callable[..., None], ...] = (worker, dev, serve, mcp)
"""In the order `majordomus --help` lists them."""


def register(app: typer.Typer) -> None:
    """Mount the process commands on `app`."""
    for command in PROCESS_COMMANDS:
        app.command()(command)
