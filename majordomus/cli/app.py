"""The typer CLI: the process commands (`dev`, `serve`, `worker`, `mcp`) and, mounted from
`majordomus.commands`, one command per capability plus `run`, `queue` and `workers`.

Commands import the API and worker sides lazily, so `majordomus --help` is fast and the
domain package does not depend on them at import time.
"""

from __future__ import annotations

import logging

import typer

from majordomus.config import settings

app = typer.Typer(
    help="majordomus: run capabilities as executions anyone can watch.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def _require_redis() -> None:
    """Exit with a sentence, not a traceback, when the configured Redis does not answer."""
    import redis

    from majordomus.cli.transport import shown_url
    from majordomus.errors import EXIT_CODE
    from majordomus.store.connect import DEFAULT_URL

    url = settings().redis_url or DEFAULT_URL
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=3)
    except ValueError as exc:
        typer.echo(
            f"majordomus: MAJORDOMUS_REDIS_URL {shown_url(url)!r} is not a Redis URL ({exc}).\n"
            "Use redis://host:port/db, rediss://… for TLS, or unix:///path/to/socket.",
            err=True,
        )
        raise typer.Exit(EXIT_CODE["invalid_input"]) from None
    try:
        client.ping()
    except Exception as exc:
        typer.echo(
            f"majordomus: Redis at {shown_url(url)} is unreachable ({exc}).\n"
            "Start Redis, or set MAJORDOMUS_REDIS_URL; `majordomus dev` runs on its own Redis.",
            err=True,
        )
        raise typer.Exit(EXIT_CODE["unavailable"]) from None


def _logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")


@app.command()
def worker(
    max_jobs: int = typer.Option(0, help="Executions this worker runs at once (default MAJORDOMUS_MAX_JOBS)."),
) -> None:
    """Run an arq worker on MAJORDOMUS_REDIS_URL (default redis://127.0.0.1:6379/0)."""
    _require_redis()
    from workers.settings import build_worker

    _logging()
    overrides = {"max_jobs": max_jobs} if max_jobs else {}
    build_worker(settings(), **overrides).run()


@app.command()
def dev(
    host: str = typer.Option("127.0.0.1", help="Interface to bind."),
    port: int = typer.Option(8000, help="Port to bind."),
) -> None:
    """Run the API and a worker in one process, on MAJORDOMUS_REDIS_URL or, when none is set,
    on an embedded Redis it starts and stops itself."""
    from api.launch import run_dev

    _logging()
    run_dev(host, port, settings())


@app.command()
def serve(
    host: str = typer.Option("127.0.0.1", help="Interface to bind."),
    port: int = typer.Option(8000, help="Port to bind."),
) -> None:
    """Run the HTTP API (with the live channel and MCP at /mcp) on MAJORDOMUS_REDIS_URL."""
    _require_redis()
    from api.launch import run_serve

    _logging()
    run_serve(host, port, settings())


@app.command()
def mcp() -> None:
    """Serve the capabilities as MCP tools over stdio, on MAJORDOMUS_REDIS_URL."""
    from api.mcp import run_stdio

    run_stdio(settings())


def _mount_commands() -> None:
    try:
        from majordomus.cli.commands import register
    except ImportError:
        return
    register(app)


def main() -> None:
    _mount_commands()
    app()


if __name__ == "__main__":
    main()
