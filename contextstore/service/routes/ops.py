"""Operations: ``/healthz`` (open), ``/readyz``, ``/metrics`` (admin) and the metrics report."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from contextstore.service import auth
from contextstore.service.auth import Caller
from contextstore.service.direct import DirectRoute
from contextstore.service.errors import ErrorBody
from contextstore.service.models import Health, Readiness, ReportQuery, json_response
from contextstore.service.routes.agent import backends
from contextstore.service.telemetry import CONTENT_TYPE
from contextstore.sql.report import MetricsReport

router = APIRouter(tags=["operations"], route_class=DirectRoute)

ERRORS: dict[int | str, dict[str, object]] = {
    status: {"model": ErrorBody} for status in (401, 403, 422, 503)
}


@router.get("/healthz", response_model=Health, summary="The process is up (no key needed)")
async def healthz() -> Response:
    return json_response(Health, Health(status="ok"))


@router.get(
    "/readyz",
    response_model=Readiness,
    responses={503: {"model": Readiness}, 401: {"model": ErrorBody}},
    summary="SQL reachable; Redis reachable or not used",
)
async def readyz(request: Request) -> Response:
    """200 ``ok`` or ``degraded`` (Redis down: runs still answer); 503 when SQL is down."""
    auth.caller(request)
    state = await backends(request).readiness()
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
    auth.admin_caller(request)
    return Response(request.app.state.telemetry.exposition(), media_type=CONTENT_TYPE)


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
    """Counts, percentiles and rates over the namespace's runs, every process included."""
    store = backends(request)
    report = await store.call(
        lambda: store.metrics.report(namespace=caller.namespace, **filters.model_dump())
    )
    return json_response(MetricsReport, report)
