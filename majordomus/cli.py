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


def _logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")


@app.command()
def worker(
    max_jobs: int = typer.Option(0, help="Executions this worker runs at once (default MAJORDOMUS_MAX_JOBS)."),
) -> None:
    """Run an arq worker on MAJORDOMUS_REDIS_URL (default redis://127.0.0.1:6379/0)."""
    from workers.settings import build_worker

    _logging()
    overrides = {"max_jobs": max_jobs} if max_jobs else {}
    build_worker(settings(), **overrides).run()


def _mount_commands() -> None:
    try:
        from majordomus.commands import register
    except ImportError:
        return
    register(app)


def main() -> None:
    _mount_commands()
    app()


if __name__ == "__main__":
    main()
