"""What an agent key may call: ``/v1/run`` and ``/v1/match``.

Both answer in the shapes of ``contextstore.interfaces.results`` (``RunJson``, ``MatchJson``),
the same serialisation as ``run --json``, ``match --json`` and the MCP tools.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from contextstore.core.matching import MatchOptions
from contextstore.interfaces.results import MatchJson, RunJson, match_candidates, run_json
from contextstore.interfaces.service import auth
from contextstore.interfaces.service.body import body_spec, parse_body
from contextstore.interfaces.service.direct import DirectRoute
from contextstore.interfaces.service.errors import error_responses
from contextstore.interfaces.service.models import MatchRequest, RunRequest, shape_response
from contextstore.interfaces.web.backends import Backends

router = APIRouter(prefix="/v1", tags=["agents"], route_class=DirectRoute)

ERRORS = error_responses(400, 401, 403, 413, 422, 503)


def backends(request: Request) -> Backends:
    found: Backends = request.app.state.backends
    return found


@router.post(
    "/run",
    response_model=RunJson,
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
    return shape_response(run_json(result))


@router.post(
    "/match",
    response_model=MatchJson,
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
    matched = match_candidates(candidates, body.scope, options, body.query, explained=body.explain)
    return shape_response(matched.to_json())
