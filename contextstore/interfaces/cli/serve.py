"""``contextstore serve``: the HTTP API (docs/design/service.md) on uvicorn, one or several
processes.

Configured like every command (``contextstore.toml``, then ``CONTEXTSTORE_DATABASE_URL`` …,
then the flags), plus the key file (``service.api_keys``, ``CONTEXTSTORE_API_KEYS``; unset,
the keys live in the database, shared by every server on it); the limits given as options
are written to the environment so that every worker process reads the same settings. The
schema is migrated once here, before any worker starts. SIGTERM or Ctrl-C shut down gracefully:
requests in flight finish, then the stores close.
What stops a start (a busy port, a host that does not resolve, a key file that cannot be
read) is one ``error:`` line, exit status 1.
"""

from __future__ import annotations

import inspect
import logging
import os
import shutil
import signal
import socket
import tempfile
from typing import Annotated, Any

import typer

from contextstore.config.settings import MAX_SERVICE_WORKERS
from contextstore.errors import BackendUnavailableError, MissingExtraError
from contextstore.interfaces.cli.common import cli_errors, fail

MAX_WORKERS = MAX_SERVICE_WORKERS
WORKER_HEALTHCHECK_SECONDS = 60
# An idle connection stays open longer than clients keep one for reuse (httpx 5 s, aiohttp
# 15 s): at uvicorn's 5 s the server closed connections a pooled client was just reusing, and
# requests under load failed with a reset (decision 0099).
KEEP_ALIVE_SECONDS = 75

logger = logging.getLogger("contextstore.interfaces.service")


def serve(
    host: Annotated[
        str | None,
        typer.Option(help="Interface to listen on \\[service.host; 127.0.0.1]", show_default=False),
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(help="TCP port \\[service.port; 8080]", min=0, max=65535, show_default=False),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            help=f"Worker processes, 1 to {MAX_WORKERS} \\[service.workers; 1]",
            min=1,
            show_default=False,
        ),
    ] = None,
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
        bool | None,
        typer.Option(
            "--access-log/--no-access-log",
            help="One JSON line per request \\[service.access_log; on]",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Serve the HTTP API: /v1/run, /v1/match, /v1/lessons, /v1/metrics/report, /metrics.

    Every option may be set in contextstore.toml (the service table) or the environment."""
    try:
        import uvicorn

        from contextstore.interfaces.service.logs import log_config
    except ImportError as exc:
        raise MissingExtraError("contextstore serve", "FastAPI and uvicorn", "serve") from exc
    from contextstore.backends.sql.database import migrate
    from contextstore.config.sources import load_settings
    from contextstore.interfaces.apikeys import require_key_file
    from contextstore.interfaces.web.settings import (
        ENV_MAX_BODY_BYTES,
        ENV_MULTIPROC,
        ENV_REQUEST_TIMEOUT,
        ServiceSettings,
    )

    with cli_errors():
        # The flags over the environment over the file, each value checked, before anything
        # starts; the workers read the two limits back from the environment.
        chosen = load_settings(
            os.environ,
            {
                "service.host": host,
                "service.port": port,
                "service.workers": workers,
                "service.max_body_bytes": max_body_bytes,
                "service.request_timeout": timeout,
                "service.access_log": access_log,
            },
        )
        if chosen["engine.tracing.enabled"]:
            # Here, once, rather than in every worker as it builds the application.
            from contextstore.engine.tracing import require_opentelemetry

            require_opentelemetry()
    if max_body_bytes is not None:
        os.environ[ENV_MAX_BODY_BYTES] = str(max_body_bytes)
    if timeout is not None:
        os.environ[ENV_REQUEST_TIMEOUT] = str(timeout)
    with cli_errors():
        settings = ServiceSettings.from_env()
        # Checked here, once, so a missing or unreadable key file is one line, not a server
        # whose every worker refuses every key. Without one, the keys are the database's.
        if settings.keys_file is not None:
            require_key_file(settings.keys_file)
    check_listen(chosen["service.host"], chosen["service.port"])
    with cli_errors():
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
            "contextstore.interfaces.server:create_app",
            factory=True,
            host=chosen["service.host"],
            port=chosen["service.port"],
            workers=chosen["service.workers"],
            log_config=log_config(access=chosen["service.access_log"]),
            access_log=False,
            server_header=False,
            timeout_graceful_shutdown=int(settings.request_timeout) + 5,
            timeout_keep_alive=KEEP_ALIVE_SECONDS,
            **options,
        )
    finally:
        if own_directory:
            shutil.rmtree(os.environ.pop(ENV_MULTIPROC), ignore_errors=True)


def check_listen(host: str, port: int) -> None:
    """Fail with one line, before any worker starts, when ``host:port`` cannot be listened
    on: uvicorn would log the error as JSON and exit 3. A port taken in between is still
    uvicorn's to report."""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        fail(f"--host: cannot listen on {host!r}: {_reason(exc)}")
    family, kind, protocol, _, address = found[0]
    try:
        with socket.socket(family, kind, protocol) as probe:
            # As uvicorn binds: a port left in TIME_WAIT by a server just stopped is free.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as exc:
        fail(f"cannot listen on {host}:{port}: {_reason(exc)}")


def _reason(exc: OSError | UnicodeError) -> str:
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return reason[:1].lower() + reason[1:]


def _stopped(signum: int, frame: object) -> None:
    raise SystemExit(0)
