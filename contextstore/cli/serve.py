"""``contextstore serve``: the HTTP API (SPEC §11) on uvicorn, one or several processes.

Configured from the same environment as every command (``CONTEXTSTORE_DATABASE_URL``,
``CONTEXTSTORE_REDIS_URL``) plus ``CONTEXTSTORE_API_KEYS``; the options below are written to
the environment so that every worker process reads the same settings. The schema is
migrated once here, before any worker starts. SIGTERM or Ctrl-C shut down gracefully:
requests in flight finish, then the stores close.
"""

from __future__ import annotations

import inspect
import logging
import os
import shutil
import signal
import tempfile
from typing import Annotated, Any

import typer

from contextstore.cli.common import EXIT_USAGE, cli_errors, fail
from contextstore.errors import BackendUnavailableError, MissingExtraError

MAX_WORKERS = 64
WORKER_HEALTHCHECK_SECONDS = 60

logger = logging.getLogger("contextstore.service")


def serve(
    host: Annotated[str, typer.Option(help="Interface to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port", min=0, max=65535)] = 8080,
    workers: Annotated[int, typer.Option(help=f"Worker processes (1 to {MAX_WORKERS})", min=1)] = 1,
    max_body_bytes: Annotated[
        int | None,
        typer.Option(help="Largest request body, bytes \\[env CONTEXTSTORE_MAX_BODY_BYTES; 1 MiB]"),
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option(
            help="Seconds before a request is answered 503 \\[env CONTEXTSTORE_REQUEST_TIMEOUT; 30]"
        ),
    ] = None,
    access_log: Annotated[
        bool, typer.Option("--access-log/--no-access-log", help="One JSON line per request")
    ] = True,
) -> None:
    """Serve the HTTP API: /v1/run, /v1/match, /v1/lessons, /v1/metrics/report, /metrics."""
    try:
        import uvicorn

        from contextstore.service.logs import log_config
    except ImportError as exc:
        raise MissingExtraError("contextstore serve", "FastAPI and uvicorn", "serve") from exc
    from contextstore.service.settings import (
        ENV_MAX_BODY_BYTES,
        ENV_MULTIPROC,
        ENV_REQUEST_TIMEOUT,
        ServiceSettings,
    )
    from contextstore.sql.database import migrate

    if workers > MAX_WORKERS:
        fail(f"--workers: at most {MAX_WORKERS}, got {workers}", code=EXIT_USAGE)
    if max_body_bytes is not None:
        os.environ[ENV_MAX_BODY_BYTES] = str(max_body_bytes)
    if timeout is not None:
        os.environ[ENV_REQUEST_TIMEOUT] = str(timeout)
    with cli_errors():
        settings = ServiceSettings.from_env()
        try:
            migrate(settings.store.database_url)
        except BackendUnavailableError as exc:
            # Start anyway: /readyz answers 503 until the database is reachable.
            typer.echo(f"warning: {exc}", err=True)
    # Each worker counts in files of this directory; /metrics adds them all up. A directory
    # of our own, emptied at every start, so no old process's counts leak in.
    own_directory = ENV_MULTIPROC not in os.environ
    if own_directory:
        os.environ[ENV_MULTIPROC] = tempfile.mkdtemp(prefix="contextstore-metrics-")
    # uvicorn re-raises SIGTERM/SIGINT once it has shut down gracefully; ending through
    # SystemExit instead lets the clean-up below run and reports success.
    for stop in (signal.SIGTERM, signal.SIGINT):
        signal.signal(stop, _stopped)
    options: dict[str, Any] = {}
    if "timeout_worker_healthcheck" in inspect.signature(uvicorn.run).parameters:
        # uvicorn kills a worker that does not answer its ping within this time (5 s by
        # default) and starts another: on a busy machine a worker still importing at start
        # can take longer, and would be killed and restarted again and again.
        options["timeout_worker_healthcheck"] = WORKER_HEALTHCHECK_SECONDS
    try:
        uvicorn.run(
            "contextstore.service.app:create_app",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            log_config=log_config(access=access_log),
            access_log=False,
            server_header=False,
            timeout_graceful_shutdown=int(settings.request_timeout) + 5,
            **options,
        )
    finally:
        if own_directory:
            shutil.rmtree(os.environ.pop(ENV_MULTIPROC), ignore_errors=True)


def _stopped(signum: int, frame: object) -> None:
    raise SystemExit(0)
