"""The MCP server's tools, resources and prompt, on the official SDK's ``MCPServer``.

Every tool's input schema names its limits (lengths, counts, ranges), so a client sees them
before it calls; input outside them, or refused by the library, is a tool error naming the
field (``is_error`` with ``"<field>: <why>"``), never a failure of the session.

The tools are written once, against an ``Access`` that each call is given
(``contextstore.interfaces.mcp.access``): over stdio the local user's, with every tool
(decision 0055); over HTTP its bearer key's namespace and role (decision 0077), a role a tool
needs refused as a tool error naming it. A proposed lesson is written as ``proposed`` and
attributed in the audit to its proposer and counted against its namespace's cap
(``store.lessons.propose``); an owner activates it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Annotated, Any, Final, Literal

from mcp.server.mcpserver import Context, MCPServer, ResourceSecurity, UserMessage
from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError
from pydantic import Field

from contextstore.core.knowledge import MAX_FILTER_KEYS, MAX_SOURCE_LENGTH
from contextstore.core.lessons import (
    MAX_ENTITY_ID_LENGTH,
    MAX_INJECTION_FORM_BYTES,
    MAX_SCOPE_ENTITY_IDS,
    MAX_SCOPE_TAGS,
    MAX_SCOPE_VALUE_LENGTH,
    LessonRecord,
)
from contextstore.core.matching import MAX_K, MatchOptions, Scope
from contextstore.errors import ContextStoreError
from contextstore.interfaces.mcp.access import Access, missing_role
from contextstore.interfaces.results import (
    DocumentJson,
    MatchJson,
    RunJson,
    SearchJson,
    chunks_json,
    document_json,
    lesson_json,
    match_candidates,
    run_json,
)

__all__ = ["AccessFor", "build_server"]

# The access of the call a context belongs to (the same one for every call over stdio).
AccessFor = Callable[[Context], Access]

# Characters of a query: far beyond any question, short of an accidental document.
MAX_QUERY_CHARS: Final = 8_000
# Characters of one document's text added through a tool call.
MAX_DOCUMENT_CHARS: Final = 1_000_000
# Characters of a context budget (the engine accepts any positive budget).
MAX_BUDGET_CHARS: Final = 1_000_000
MAX_SEARCH_TOP_K: Final = 50
MAX_BYTE_BUDGET: Final = 65_536
MAX_LESSON_TEXT_CHARS: Final = 4_000

ScopeValue = Annotated[str, Field(min_length=1, max_length=MAX_SCOPE_VALUE_LENGTH)]
Tags = Annotated[
    list[ScopeValue],
    Field(max_length=MAX_SCOPE_TAGS, description="The agent's scope tags (e.g. 'ops')"),
]
EntityIds = Annotated[
    list[ScopeValue],
    Field(
        max_length=MAX_SCOPE_ENTITY_IDS,
        description="The agent's entity ids (dotted, e.g. 'acme.ops.agent-1')",
    ),
]
Query = Annotated[str, Field(min_length=1, max_length=MAX_QUERY_CHARS)]
Source = Annotated[
    str,
    Field(min_length=1, max_length=MAX_SOURCE_LENGTH, description="The document's name"),
]
Filters = Annotated[
    dict[str, str | int | float | bool | None] | None,
    Field(
        max_length=MAX_FILTER_KEYS,
        description="Keep chunks whose document metadata equals every given value",
    ),
]
LessonText = Annotated[str, Field(max_length=MAX_LESSON_TEXT_CHARS)]


@contextmanager
def refusals_as(error: Callable[[str], Exception]) -> Iterator[None]:
    """The library's refusals raised again as ``error`` with the same text."""
    try:
        yield
    except ContextStoreError as exc:
        raise error(str(exc)) from exc


def tool_errors() -> AbstractContextManager[None]:
    """The library's refusals as tool errors: the text names the field, the session lives."""
    return refusals_as(ToolError)


def build_server(access_for: AccessFor) -> MCPServer:
    """The tools, resources and prompt, each call reaching what ``access_for`` gives it."""
    server = MCPServer(
        "contextstore",
        # Warnings and errors only: the client shows the server's stderr as its log.
        log_level="WARNING",
        instructions="Build an agent's context (lessons, then retrieved knowledge) with "
        "build_context; send its 'prompt' field before the question.",
    )

    def allowed(ctx: Context, tool: str) -> Access:
        access = access_for(ctx)
        refusal = missing_role(tool, access.role)
        if refusal is not None:
            raise ToolError(refusal)
        return access

    async def run(
        access: Access,
        query: str,
        tags: list[str],
        entity_ids: list[str],
        filters: dict[str, Any] | None = None,
        budget: int | None = None,
    ) -> Any:
        scope = Scope(entity_ids=tuple(entity_ids), tags=tuple(tags))
        with tool_errors():
            return await access.run(query, scope, filters, budget)

    @server.tool()
    async def build_context(
        ctx: Context,
        query: Query,
        tags: Tags = [],  # noqa: B006 (the SDK reads defaults into the schema; never mutated)
        entity_ids: EntityIds = [],  # noqa: B006
        filters: Filters = None,
        budget: Annotated[
            int | None, Field(ge=1, le=MAX_BUDGET_CHARS, description="Characters")
        ] = None,
    ) -> RunJson:
        """Build the context for a query: the lessons of the agent's scope, then the
        knowledge retrieved within a budget. Send 'prompt' (the lesson block, then the
        context) to the model before the question."""
        access = allowed(ctx, "build_context")
        return run_json(await run(access, query, tags, entity_ids, filters, budget))

    @server.tool()
    async def match_lessons(
        ctx: Context,
        tags: Tags = [],  # noqa: B006
        entity_ids: EntityIds = [],  # noqa: B006
        k: Annotated[int, Field(ge=0, le=MAX_K, description="At most this many (0: 10)")] = 0,
        byte_budget: Annotated[
            int, Field(ge=0, le=MAX_BYTE_BUDGET, description="UTF-8 bytes of forms (0: 4096)")
        ] = 0,
        order: Literal["severity", "relevance"] = "severity",
        query: Annotated[str | None, Field(max_length=MAX_QUERY_CHARS)] = None,
        explain: Annotated[
            bool, Field(description="Also say, for every lesson of the scope, why it is in or out")
        ] = False,
    ) -> MatchJson:
        """The lessons that apply to a scope, ranked and bounded, and the block an agent gets."""
        access = allowed(ctx, "match_lessons")
        scope = Scope(entity_ids=tuple(entity_ids), tags=tuple(tags))
        with tool_errors():
            options = MatchOptions(k, byte_budget, order)
            candidates = await access.candidates(scope, explain)
            return match_candidates(candidates, scope, options, query, explained=explain).to_json()

    @server.tool()
    async def search_knowledge(
        ctx: Context,
        query: Query,
        top_k: Annotated[int, Field(ge=1, le=MAX_SEARCH_TOP_K)] = 5,
        filters: Filters = None,
    ) -> SearchJson:
        """Passages of the knowledge base for a query, best first."""
        access = allowed(ctx, "search_knowledge")
        with tool_errors():
            return {"chunks": chunks_json(await access.search(query, top_k, filters))}

    @server.tool()
    async def get_document(ctx: Context, source: Source) -> DocumentJson:
        """One document of the knowledge base with its passages."""
        access = allowed(ctx, "get_document")
        with tool_errors():
            return document_json(await access.document(source))

    @server.tool()
    async def add_document(
        ctx: Context,
        source: Source,
        text: Annotated[str, Field(min_length=1, max_length=MAX_DOCUMENT_CHARS)],
        metadata: dict[str, Any] | None = None,
    ) -> DocumentJson:
        """Store a document (a known source is replaced); returns it as stored. Admins only."""
        access = allowed(ctx, "add_document")
        with tool_errors():
            return document_json(await access.add_document(text, source, metadata))

    @server.tool()
    async def delete_document(ctx: Context, source: Source) -> dict[str, Any]:
        """Delete a document and its passages. Admins only."""
        access = allowed(ctx, "delete_document")
        with tool_errors():
            await access.delete_document(source)
        return {"deleted": source}

    @server.tool()
    async def propose_lesson(
        ctx: Context,
        entity_id: Annotated[str, Field(min_length=1, max_length=MAX_ENTITY_ID_LENGTH)],
        injection_form: Annotated[
            str,
            Field(
                min_length=1,
                max_length=MAX_INJECTION_FORM_BYTES,
                description=f"What agents are told: at most {MAX_INJECTION_FORM_BYTES} UTF-8 bytes",
            ),
        ],
        applies_to: Annotated[
            list[Annotated[str, Field(max_length=MAX_SCOPE_VALUE_LENGTH + 3)]],
            Field(min_length=1, max_length=64, description="'tag:<name>' or 'id:<prefix>'"),
        ],
        severity: Literal["critical", "warning", "info"] = "info",
        summary: LessonText = "",
        detail: LessonText = "",
        evidence: Annotated[
            dict[str, Any] | None,
            Field(description="What taught it: {'query': the question} and/or {'run': …}"),
        ] = None,
    ) -> dict[str, Any]:
        """Propose a lesson learned from this work. It is stored as 'proposed' and applies to
        no agent until an owner activates it. Refused: without evidence, as the twin of a
        stored lesson (same form, same keys), past the namespace's hourly cap."""
        access = allowed(ctx, "propose_lesson")
        with tool_errors():
            record = LessonRecord(
                entity_id=entity_id,
                injection_form=injection_form,
                severity=severity,
                status="proposed",
                applies_to=tuple(applies_to),
                summary=summary,
                detail=detail,
                evidence=evidence or {},
            )
            return lesson_json(await access.propose(record))

    @server.resource(
        "lesson://{entity_id}", mime_type="application/json", description="One lesson record"
    )
    async def lesson(entity_id: str, ctx: Context) -> str:
        with refusals_as(ResourceNotFoundError):
            found = await allowed(ctx, "lesson").lesson(entity_id)
        return json.dumps(lesson_json(found), ensure_ascii=False)

    # A source is a name in the database, not a path: slashes and dots are its own.
    @server.resource(
        "document://{+source}",
        mime_type="application/json",
        description="One document of the knowledge base with its passages",
        security=ResourceSecurity(exempt_params={"source"}),
    )
    async def document(source: str, ctx: Context) -> str:
        with refusals_as(ResourceNotFoundError):
            found = await allowed(ctx, "document").document(source)
        return json.dumps(document_json(found), ensure_ascii=False)

    @server.prompt()
    async def answer_with_context(
        ctx: Context, question: str, tags: str = "", entity_ids: str = ""
    ) -> UserMessage:
        """The question preceded by its lesson block and context (tags and entity ids:
        comma-separated)."""
        access = allowed(ctx, "answer_with_context")
        result = await run(access, question, _listed(tags), _listed(entity_ids))
        return UserMessage(f"{result.prompt}\n\nQuestion: {question}")

    return server


def _listed(values: str) -> list[str]:
    return [value.strip() for value in values.split(",") if value.strip()]
