"""Operations: ``/healthz`` (open), ``/readyz`` (open; details with a key), ``/metrics``
(admin: its namespace's series; owner: every series), the metrics report (any key) and
pruning (admin).

Metrics are the key's namespace's; an owner key reaches every namespace by asking
(``all_namespaces``), any other key asking is refused (403)."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from contextstore import __version__
from contextstore.backends.sql.metrics.report import MetricsFilter, MetricsReport
from contextstore.interfaces.service import auth
from contextstore.interfaces.service.auth import Caller
from contextstore.interfaces.service.body import body_spec, parse_body
from contextstore.interfaces.service.direct import DirectRoute
from contextstore.interfaces.service.errors import ErrorBody, error_responses
from contextstore.interfaces.service.models import (
    Health,
    PruneRequest,
    PruneResult,
    Readiness,
    ReportQuery,
    json_response,
)
from contextstore.interfaces.service.routes.agent import backends
from contextstore.interfaces.web.telemetry import CONTENT_TYPE

router = APIRouter(tags=["operations"], route_class=DirectRoute)

ERRORS = error_responses(401, 403, 422, 503)


@router.get("/healthz", response_model=Health, summary="The process is up (no key needed)")
async def healthz() -> Response:
    return json_response(Health, HEALTHY)


HEALTHY = Health(status="ok", version=__version__)


@router.get(
    "/readyz",
    response_model=Readiness,
    responses={503: {"model": Readiness}, 401: {"model": ErrorBody}},
    summary="SQL reachable; Redis reachable or not used (no key needed: details with one)",
)
async def readyz(request: Request) -> Response:
    """200 ``ok`` or ``degraded`` (Redis down: runs still answer); 503 when SQL is down.

    Without a key only the status: a probe needs no more, and what failed is for operators.
    """
    state = await backends(request).readiness()
    if auth.optional_caller(request) is None:
        body = Readiness(status=state.status)
    else:
        body = Readiness(status=state.status, sql=state.sql, redis=state.redis)
    return json_response(Readiness, body, 200 if state.ready else 503)


@router.get(
    "/metrics",
    responses={
        200: {"content": {CONTENT_TYPE: {}}},
        401: {"model": ErrorBody},
        403: {"model": ErrorBody},
    },
    response_class=Response,
    summary="Prometheus exposition of the whole server (every worker)",
)
async def metrics(request: Request) -> Response:
    """Every worker's series: an owner key's scrape shows every namespace, an admin key's
    only the series labelled with its own namespace."""
    caller = auth.admin_caller(request)
    shown = None if caller.may("owner") else caller.namespace
    return Response(request.app.state.telemetry.exposition(shown), media_type=CONTENT_TYPE)


@router.get(
    "/v1/metrics/report",
    response_model=MetricsReport,
    responses=ERRORS,
    tags=["metrics"],
    summary="Durable run metrics of the key's namespace",
)
async def metrics_report(
    filters: Annotated[ReportQuery, Query()], caller: Caller, request: Request
) -> Response:
    """Counts, percentiles and rates over the namespace's runs, every process included
    (every namespace's with ``all_namespaces=true`` and an owner key)."""
    store = backends(request)
    chosen = filters.model_dump()
    every = auth.every_namespace(caller, chosen.pop("all_namespaces", None))
    by = chosen.pop("by", None)
    metrics = store.metrics(caller.namespace)
    wanted = MetricsFilter(**chosen)
    report = await store.call(lambda: metrics.report(wanted, by=by, all_namespaces=every))
    return json_response(MetricsReport, report)


@router.post(
    "/v1/metrics/prune",
    response_model=PruneResult,
    responses=error_responses(400, 401, 403, 422, 503),
    openapi_extra=body_spec(PruneRequest),
    tags=["metrics"],
    summary="Delete the key's namespace's runs older than a number of seconds",
)
async def metrics_prune(request: Request) -> Response:
    """Delete the runs recorded before now minus ``older_than_seconds``: the namespace's
    (an admin key's), or every namespace's with ``all_namespaces`` and an owner key."""
    caller = auth.admin_caller(request)
    body = await parse_body(request, PruneRequest)
    every = auth.every_namespace(caller, body.all_namespaces)
    store = backends(request)
    metrics = store.metrics(caller.namespace)
    older_than = timedelta(seconds=body.older_than_seconds)

    def prune() -> PruneResult:
        cutoff = metrics.cutoff(older_than)
        deleted = metrics.prune(cutoff, all_namespaces=every)
        return PruneResult(
            deleted=deleted, cutoff=cutoff, namespace=None if every else caller.namespace
        )

    return json_response(PruneResult, await store.call(prune))
