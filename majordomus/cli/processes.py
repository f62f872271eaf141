"""The process commands: `majordomus worker`, `dev`, `serve` and `mcp`, where the surfaces meet.

This is the one CLI module that imports the API (`api.launch`, `api.mcp`) and the worker
side (`workers.settings`), and it does so inside each command, so `majordomus --help`
loads neither. `worker` and `serve` first check that the configured Redis answers and stop
with a sentence and an exit code from `errors.EXIT_CODE` when it does not; `dev` brings its
own Redis when none is configured, and `mcp` reports an unreachable one to its client.
Nothing here draws an answer or runs a capability: that is `commands.py`.

`serve` and `dev` bound beyond loopback (`--host 0.0.0.0`, an interface's address, a name)
with no `MAJORDOMUS_API_TOKEN` would let anyone who reaches that address start, cancel and
read executions, so they refuse to start (`refused`, exit 5) unless `--insecure-no-token`
says plainly that this is wanted (a private network, a proxy in front that authenticates).
A flag rather than a setting: it is a decision about one process's command line, written
where that command is, not a variable that a deployment inherits unseen. Loopback (the
default) needs neither.
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
    """This process's log, in the one format every process shares (`majordomus.logs`)."""
    from majordomus.logs import configure_from

    configure_from(settings())


LOOPBACK_NAMES = frozenset({"localhost"})
"""Names of loopback beside the addresses `ipaddress` knows as loopback (127.0.0.0/8, ::1)."""


def is_loopback(host: str) -> bool:
    """Whether binding `host` listens on loopback only. `0.0.0.0`, `::` and `""` are every
    interface; any other name could resolve anywhere, so it counts as beyond loopback."""
    import ipaddress

    name = host.strip().removeprefix("[").removesuffix("]").lower()
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _require_token_beyond_loopback(command: str, host: str, port: int, insecure: bool) -> None:
    """Exit with a sentence, not a start, when `host` is beyond loopback and no token guards
    the API; with `--insecure-no-token`, say once what that means and go on."""
    from majordomus.errors import EXIT_CODE, MajordomusError

    if settings().api_token or is_loopback(host):
        return
    if insecure:
        typer.echo(
            f"majordomus: {command} listens on {host}:{port} with no MAJORDOMUS_API_TOKEN "
            "(--insecure-no-token): anyone who reaches it may start, cancel and read executions.",
            err=True,
        )
        return
    refused = MajordomusError(
        "refused",
        f"{command} will not listen on {host}:{port} with no MAJORDOMUS_API_TOKEN set: "
        "beyond loopback, anyone who reaches that address could start, cancel and read "
        "executions",
        "set MAJORDOMUS_API_TOKEN to a secret (python -c 'import secrets; "
        "print(secrets.token_urlsafe(32))') and send it as the clients' bearer token, "
        "bind --host 127.0.0.1, or pass --insecure-no-token if an open API is what you want",
    )
    shown = f"majordomus: {refused.code}: {refused.message}.\n{_sentence(refused.suggestion or '')}"
    typer.echo(shown, err=True)
    raise typer.Exit(EXIT_CODE[refused.code])


INSECURE_NO_TOKEN_HELP = (
    "Listen beyond loopback (--host 0.0.0.0...) with no MAJORDOMUS_API_TOKEN: anyone who "
    "reaches the address may start executions. Refused without it."
)

BACKLOG = 2048
"""Connections the API's socket queues (uvicorn's default), while it starts and while busy."""
UNSENT_BYTES = 131_072
"""What the kernel holds unsent for one client of the API (`TCP_NOTSENT_LOWAT`, which each
connection takes from the listening socket): past it, writes wait for the client. Without
it a client that reads slowly (a live channel's) holds megabytes of kernel memory, and a
few hundred of them push the machine's TCP memory into pressure, which slows every
connection on it: the API's other clients, its Redis, the workers'. Fast clients are not
slowed: data in flight does not count."""


def _listening(host: str, port: int) -> socket.socket:
    """The API's socket, bound and listening before anything heavy is imported (the app,
    its MCP server: seconds of a start): a client that connects while the API starts, or
    restarts (an EventSource reconnecting), is queued and answered once it is up instead
    of refused. A port that cannot be bound stops the process with one line."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if hasattr(socket, "TCP_NOTSENT_LOWAT"):  # Linux, macOS
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NOTSENT_LOWAT, UNSENT_BYTES)
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
    _logging()
    _require_redis()
    from majordomus.workers.worker import build_worker

    _serve_worker_metrics(metrics_host)
    overrides = {"max_jobs": max_jobs} if max_jobs else {}
    _worker_loop()
    build_worker(settings(), **overrides).run()


def dev(
    host: str = typer.Option("127.0.0.1", help="Interface to bind."),
    port: int = typer.Option(8000, help="Port to bind."),
    insecure_no_token: bool = typer.Option(
        False, "--insecure-no-token", help=INSECURE_NO_TOKEN_HELP
    ),
) -> None:
    """Run the API and a worker in one process, on MAJORDOMUS_REDIS_URL or, when none is set,
    on an embedded Redis or Valkey server it starts and stops itself (in-process fakeredis
    when there is none; the banner says which)."""
    _logging()
    _require_token_beyond_loopback("dev", host, port, insecure_no_token)
    sock = _listening(host, port)
    from majordomus.api.launch import run_dev

    run_dev(host, port, settings(), sock)


def serve(
    host: str = typer.Option("127.0.0.1", help="Interface to bind."),
    port: int = typer.Option(8000, help="Port to bind."),
    insecure_no_token: bool = typer.Option(
        False, "--insecure-no-token", help=INSECURE_NO_TOKEN_HELP
    ),
) -> None:
    """Run the HTTP API (with the live channel and MCP at /mcp) on MAJORDOMUS_REDIS_URL.
    Beyond loopback it needs MAJORDOMUS_API_TOKEN (or --insecure-no-token)."""
    _logging()
    _require_token_beyond_loopback("serve", host, port, insecure_no_token)
    _require_redis()
    sock = _listening(host, port)
    from majordomus.api.launch import run_serve

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
