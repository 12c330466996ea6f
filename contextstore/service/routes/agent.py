"""What an agent key may call: ``/v1/run`` and ``/v1/match``."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from contextstore.engine import ContextResult
from contextstore.matching import (
    LessonExplanation,
    MatchOptions,
    explain,
    match,
    render_lesson_block,
)
from contextstore.service import auth
from contextstore.service.backends import Backends
from contextstore.service.body import body_spec, parse_body
from contextstore.service.direct import DirectRoute
from contextstore.service.errors import ErrorBody
from contextstore.service.models import MatchRequest, MatchResponse, RunRequest, json_response

router = APIRouter(prefix="/v1", tags=["agents"], route_class=DirectRoute)

ERRORS: dict[int | str, dict[str, object]] = {
    status: {"model": ErrorBody} for status in (400, 401, 403, 413, 422, 503)
}


def backends(request: Request) -> Backends:
    found: Backends = request.app.state.backends
    return found


@router.post(
    "/run",
    response_model=ContextResult,
    responses=ERRORS,
    openapi_extra=body_spec(RunRequest),
    summary="Build one agent's context",
)
async def run(request: Request) -> Response:
    """``ContextEngine.run`` in the key's namespace: cache, windows and metrics are its own."""
    namespace = auth.caller(request).namespace
    body = await parse_body(request, RunRequest)
    result = await backends(request).run(
        namespace,
        body.query,
        scope=body.scope,
        filters=body.filters,
        override_budget=body.override_budget,
    )
    return json_response(ContextResult, result)


@router.post(
    "/match",
    response_model=MatchResponse,
    responses=ERRORS,
    openapi_extra=body_spec(MatchRequest),
    summary="Which lessons apply",
)
async def match_lessons(request: Request) -> Response:
    """The database's active lessons for ``scope``, ranked and bounded as in a run.

    With ``explain``, also one entry per lesson the scope's keys find, whatever its status
    (a retired one says ``not active``): ``match`` and ``explain`` read the same candidates,
    and ``match`` takes only the active ones, so the two always agree.
    """
    auth.caller(request)  # any valid key; lessons are the database's, not a namespace's
    body = await parse_body(request, MatchRequest)
    store = backends(request)
    options = body.options or MatchOptions()
    candidates = await store.call(
        lambda: store.lessons.candidates(body.scope, include_inactive=body.explain)
    )
    explained: tuple[LessonExplanation, ...] | None = None
    if body.explain:
        explained = explain(candidates, body.scope, options, body.query)
    result = match(candidates, body.scope, options, body.query)
    answer = MatchResponse(
        lessons=result, lesson_block=render_lesson_block(result), explanation=explained
    )
    return json_response(MatchResponse, answer)
