"""``/v1/search`` (any key) and ``/v1/documents`` (admin keys): the namespace's knowledge.

The namespace is always the key's: a key never searches, lists or changes another
namespace's documents. A change is seen by the next run of every process (docs/design/retrieval.md).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from contextstore.backends.sql.repository import ImportSummary
from contextstore.core.compose import Chunk
from contextstore.core.knowledge import Document
from contextstore.interfaces.service import auth
from contextstore.interfaces.service.auth import Admin
from contextstore.interfaces.service.body import body_spec, parse_body
from contextstore.interfaces.service.direct import DirectRoute
from contextstore.interfaces.service.errors import error_responses
from contextstore.interfaces.service.models import NewDocument, SearchRequest, json_response
from contextstore.interfaces.service.routes.agent import backends

router = APIRouter(prefix="/v1", tags=["knowledge"], route_class=DirectRoute)

ERRORS = error_responses(400, 401, 403, 404, 413, 422, 503)
Chunks = list[Chunk]
Documents = list[Document]
JSON_LINES = "application/x-ndjson"


class DocumentQuery(BaseModel):
    """Arguments of ``KnowledgeBase.list``."""

    model_config = ConfigDict(extra="forbid")

    prefix: str | None = None
    limit: int | None = None
    offset: int = Field(default=0)


@router.post(
    "/search",
    response_model=Chunks,
    responses=ERRORS,
    openapi_extra=body_spec(SearchRequest),
    summary="Search the namespace's knowledge",
)
async def search(request: Request) -> Response:
    """Chunks best first (score, then source, then position), as a run retrieves them."""
    namespace = auth.caller(request).namespace
    body = await parse_body(request, SearchRequest)
    store = backends(request)
    found = await store.search(namespace, body.query, body.top_k, body.filters)
    return json_response(Chunks, found)


@router.get("/documents", response_model=Documents, responses=ERRORS, summary="List documents")
async def list_documents(
    filters: Annotated[DocumentQuery, Query()], caller: Admin, request: Request
) -> Response:
    """Documents ordered by source, without their passages."""
    store = backends(request)
    found = await store.call(
        lambda: store.documents(caller.namespace).list(
            filters.prefix, filters.limit, filters.offset
        )
    )
    return json_response(Documents, found)


@router.post(
    "/documents",
    status_code=201,
    response_model=Document,
    responses=ERRORS,
    openapi_extra=body_spec(NewDocument),
    summary="Add or replace a document",
)
async def add_document(request: Request) -> Response:
    namespace = auth.admin_caller(request).namespace
    body = await parse_body(request, NewDocument)
    store = backends(request)
    added = await store.call(
        lambda: store.documents(namespace).add(body.text, body.source, body.metadata)
    )
    return json_response(Document, added, 201)


@router.post(
    "/documents/import",
    response_model=ImportSummary,
    responses=ERRORS,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {JSON_LINES: {"schema": {"type": "string"}}},
            "description": 'JSON Lines: one {"source", "text", "metadata"} object a line.',
        }
    },
    summary="Import documents from JSON Lines (all or nothing)",
)
async def import_documents(request: Request) -> Response:
    """Idempotent by source and content hash; a bad line refuses the whole body, naming it."""
    namespace = auth.admin_caller(request).namespace
    lines = (await request.body()).split(b"\n")
    store = backends(request)
    summary = await store.call(lambda: store.documents(namespace).import_jsonl(lines))
    return json_response(ImportSummary, summary)


@router.get(
    "/documents/{source:path}", response_model=Document, responses=ERRORS, summary="A document"
)
async def get_document(source: str, caller: Admin, request: Request) -> Response:
    """The document with its passages in order."""
    store = backends(request)
    found = await store.call(lambda: store.documents(caller.namespace).get(source))
    return json_response(Document, found)


@router.delete(
    "/documents/{source:path}", status_code=204, responses=ERRORS, summary="Delete a document"
)
async def delete_document(source: str, caller: Admin, request: Request) -> Response:
    store = backends(request)
    await store.call(lambda: store.documents(caller.namespace).delete(source))
    return Response(status_code=204)
