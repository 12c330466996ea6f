"""``contextstore demo`` (the main job), ``run`` (one query) and ``match`` (lessons only)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from contextstore.backends.sql.repository import ImportSummary
from contextstore.core.budget import BudgetAllocation, ContextBudget, default_token_counter
from contextstore.core.embedding import HashingEmbedder
from contextstore.core.lessons import InMemoryLessons, read_jsonl
from contextstore.core.matching import (
    ORDERS,
    LessonExplanation,
    MatchOptions,
    Scope,
)
from contextstore.engine.adaptive import PerformanceReport
from contextstore.engine.sync import ContextResult
from contextstore.errors import MissingExtraError, ValidationError
from contextstore.interfaces.cli.common import (
    EXIT_USAGE,
    cli_errors,
    console,
    console_err,
    fail,
    percent,
    print_json,
    progress_bar,
    table,
)
from contextstore.interfaces.cli.options import (
    DatabaseUrl,
    Entities,
    Json,
    Namespace,
    RedisUrl,
    Tags,
    describe_store,
    open_store,
)
from contextstore.interfaces.cli.visible import visible
from contextstore.interfaces.results import match_candidates, run_json
from contextstore.sample_data import (
    DEMO_KNOWLEDGE,
    demo_corpus_lines,
    load_demo_queries,
    load_lessons,
)
from contextstore.store.sync import Store

if TYPE_CHECKING:
    from contextstore.backends.sql.knowledge import KnowledgeBase

# The session budget the demo splits: an 8k-token model with 15 % kept for the answer.
DEMO_MAX_TOKENS = 8192
DEMO_RESERVE = 0.15
DEMO_SYSTEM_PROMPT = (
    "You are an agent of the Northwind Cloud fleet. Answer from the context and the lessons; "
    "say so when the context does not cover the question."
)
DEMO_SKILLS_PROMPT = "Tools: search_docs(query), open_ticket(summary), page_oncall(service)."
SHOWN_CHARACTERS = 900

Order = Annotated[
    str,
    typer.Option(
        "--order",
        help="Lesson order: severity (severity, newest, id) or relevance (the query's terms "
        "first within one severity)",
    ),
]


def _check_order(order: str) -> str:
    if order not in ORDERS:
        fail(f"--order: expected one of {', '.join(ORDERS)}, got {order!r}", code=EXIT_USAGE)
    return order


def demo(
    database_url: DatabaseUrl = None,
    redis_url: RedisUrl = None,
    namespace: Namespace = None,
    details: Annotated[int, typer.Option(help="How many runs to show in full", min=0)] = 3,
) -> None:
    """Run the sample fleet workload: lessons, retrieval, budgets, guard, cache and metrics.

    The only command that loads the sample lessons and documents (into the database and
    namespace it is given; unchanged ones are skipped).
    """
    with cli_errors(), open_store(database_url, redis_url, namespace) as store:
        console.print(Text("contextstore demo", style="bold"))
        console.print(Text(describe_store(store), style="dim"))
        imported = store.lessons.import_records(load_lessons())
        knowledge, choice = demo_knowledge(store)
        documents = _load_sample_corpus(knowledge)
        queries = load_demo_queries()
        engine = store.engine(retriever=knowledge, embed_fn=HashingEmbedder(), worker="demo")
        console.print(
            f"sample lessons: {imported.total} in the file, {imported.written} written now "
            f"(re-import is idempotent) · sample documents: {documents.total} (the fleet's and "
            f"Python's reference), {documents.written} written now into the knowledge base, "
            f"searched with {escape(choice)} · {len(queries)} queries from 3 agent roles\n"
        )
        results: list[tuple[Scope, ContextResult]] = []
        with progress_bar(console) as progress:
            task = progress.add_task("running queries", total=len(queries))
            for item in queries:
                scope = Scope(entity_ids=item.entity_ids, tags=item.tags)
                results.append((scope, engine.run(item.query, scope=scope, filters=item.filters)))
                progress.advance(task)

        shown_roles: set[str] = set()
        for scope, result in results:
            role = scope.tags[0] if scope.tags else "—"
            if len(shown_roles) >= details or role in shown_roles or result.cache_hit:
                continue
            shown_roles.add(role)
            _show_result(scope, result)

        console.print(_runs_table(results))
        for line in _guard_warnings(results):
            console.print(Text(f"guard warning, {line}", style="yellow"))
        console.print(_adaptive_table(engine.adaptive.get_performance_report(), store))
        console.print(_durable_metrics_table(store))


def demo_knowledge(store: Store) -> tuple[KnowledgeBase, str]:
    """The namespace's knowledge base configured as ``DEMO_KNOWLEDGE`` says, and its
    description.

    The configuration is stored in the namespace, so every later process (``contextstore
    run``, the service, MCP) searches the same way; without the ``embeddings`` extra the
    namespace embeds with ``HashingEmbedder``.
    """
    knowledge = store.knowledge
    try:
        knowledge.configure(analyzer=DEMO_KNOWLEDGE.analyzer, embedder=DEMO_KNOWLEDGE.embedder)
        described = DEMO_KNOWLEDGE.embedder
    except MissingExtraError:
        knowledge.configure(analyzer=DEMO_KNOWLEDGE.analyzer, embedder="hashing")
        described = "hashing (pip install 'contextstore[embeddings]' for wordllama)"
    return knowledge, f"hybrid search, analyzer {DEMO_KNOWLEDGE.analyzer}, embedder {described}"


def _load_sample_corpus(knowledge: KnowledgeBase) -> ImportSummary:
    """The demo's documents in the knowledge base (unchanged documents are skipped), embedded
    with its embedder so the engine fuses cosine with BM25."""
    with progress_bar(console) as progress:
        task = progress.add_task("loading the sample corpus", total=None)
        summary = knowledge.import_jsonl(
            demo_corpus_lines(), progress=lambda n: progress.advance(task, n)
        )
    return summary


def run(
    query: Annotated[str, typer.Argument(help="The agent's query")],
    tag: Tags = None,
    entity: Entities = None,
    budget: Annotated[
        int | None, typer.Option("--budget", help="Context budget in characters", min=1)
    ] = None,
    order: Order = "severity",
    database_url: DatabaseUrl = None,
    redis_url: RedisUrl = None,
    namespace: Namespace = None,
    as_json: Json = False,
) -> None:
    """Build one context from the knowledge base and the lessons, and show it.

    The run every process gives (the HTTP API's, the MCP tools'): the database and namespace
    as they are, ranked as the store is configured. It writes only the run's own metrics:
    'contextstore demo' loads the sample, 'contextstore docs import' your documents.
    """
    scope = Scope(entity_ids=tuple(entity or ()), tags=tuple(tag or ()))
    _check_order(order)
    with cli_errors(), open_store(database_url, redis_url, namespace) as store:
        # The store as every process of the fleet opens it, so this is the run the HTTP API
        # and the MCP tools give for the same query (decision 0078).
        engine = store.engine()
        engine.config.lessons.order = order
        result = engine.run(query, scope=scope, override_budget=budget)
        empty = not result.chunks_used and not store.knowledge.list(limit=1)
    if empty:
        console_err.print(
            f"note: namespace {store.namespace!r} has no documents; 'contextstore docs import "
            "FILE' adds yours, 'contextstore demo' the sample",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
    if not as_json:
        _show_result(scope, result, shown_characters=None)
        return
    print_json(run_json(result))


def match_command(
    tag: Tags = None,
    entity: Entities = None,
    k: Annotated[int, typer.Option("--k", help="At most this many lessons (0: 10, max 25)")] = 0,
    byte_budget: Annotated[
        int, typer.Option("--bytes", help="UTF-8 byte budget for the forms (0: 4096)")
    ] = 0,
    order: Order = "severity",
    query: Annotated[
        str | None,
        typer.Option("--query", "-q", help="The agent's query (what --order relevance ranks by)"),
    ] = None,
    explain_all: Annotated[
        bool,
        typer.Option(
            "--explain", help="Show every candidate: matched keys, rank, and why it was left out"
        ),
    ] = False,
    lessons_file: Annotated[
        Path | None,
        typer.Option("--lessons", help="Match against this JSON Lines file instead of the store"),
    ] = None,
    database_url: DatabaseUrl = None,
    as_json: Json = False,
) -> None:
    """Show which lessons apply to a scope, ranked and bounded, and the block agents get."""
    scope = Scope(entity_ids=tuple(entity or ()), tags=tuple(tag or ()))
    options = MatchOptions(k, byte_budget, _check_order(order))
    # The explanation covers every lesson of the scope, retired, proposed and superseded ones
    # too (as "not active"), and from a file every lesson in it; match accepts only the
    # active ones with a matching key among the same candidates, so the block and the
    # explanation come from one read and cannot disagree.
    with cli_errors():
        if lessons_file is not None:
            source = _read_lessons_file(lessons_file)
            if explain_all:
                candidates = [record.to_lesson() for record in source.all()]
            else:
                candidates = source.candidates(scope)
        else:
            with open_store(database_url, None, None) as store:
                candidates = store.lessons.candidates(scope, include_inactive=explain_all)
    matched = match_candidates(candidates, scope, options, query, explained=explain_all)
    if as_json:
        print_json(matched.to_json())
        return
    result, block, explained = matched.result, matched.lesson_block, matched.explanation or ()
    title = f"matched {result.matched_count}, showing {result.included_count}"
    if not (explained if explain_all else result.included):
        # Nothing to list: one line says so, and why.
        if explain_all or result.matched_count == 0:
            why = "no lesson to explain" if explain_all else "no lesson applies to this scope"
        else:
            why = "the first lesson's form does not fit the byte budget"
        console.print(f"{title}: {why}", highlight=False, markup=False, soft_wrap=True)
        return
    if explain_all:
        console.print(_explanation_table(title, explained))
    else:
        rows = [
            [rank, item.entity_id, item.injection_form]
            for rank, item in enumerate(result.included, 1)
        ]
        console.print(
            table(
                title,
                ["#", "lesson", "injection form"],
                rows,
                flexible="injection form",
                identifiers="lesson",
            )
        )
    console.print(
        Panel(Text(visible(block) or "(no lesson applies to this scope)"), title="lesson block")
    )


_OUTCOMES = {"k": "out: k reached", "byte_budget": "out: byte budget"}


def _explanation_table(title: str, explained: tuple[LessonExplanation, ...]) -> Table:
    """Every candidate: rank, id, the keys that matched, what happened to it (and its score)."""
    scored = any(item.relevance is not None for item in explained)
    rows: list[list[object]] = []
    for item in explained:
        if item.included:
            outcome = "included"
        elif item.excluded_by is not None:
            outcome = _OUTCOMES[item.excluded_by]
        else:
            outcome = f"no: {item.reason}"
        row: list[object] = [item.rank, item.entity_id, ", ".join(item.matched_keys), outcome]
        if scored:
            row.append(item.relevance)
        rows.append(row)
    columns = ["#", "lesson", "matched keys", "outcome"] + (["relevance"] if scored else [])
    return table(title, columns, rows, flexible="matched keys", identifiers="lesson", compact=True)


def _read_lessons_file(path: Path) -> InMemoryLessons:
    try:
        with path.open(encoding="utf-8") as handle:
            return InMemoryLessons(read_jsonl(handle))
    except OSError as exc:
        raise ValidationError("--lessons", f"cannot read {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ValidationError("--lessons", f"{path} is not UTF-8 text") from exc


def _show_result(
    scope: Scope, result: ContextResult, shown_characters: int | None = SHOWN_CHARACTERS
) -> None:
    analysis = result.query_analysis
    who = ", ".join([*scope.tags, *scope.entity_ids]) or "no scope"
    console.rule(Text(visible(analysis.original_query), style="bold"))
    console.print(
        f"scope: {escape(who)}\n"
        f"analysis: complexity [bold]{analysis.complexity.value}[/bold] · intent "
        f"{analysis.intent.value} · language {analysis.language} · budget {result.budget:,} "
        f"characters · guard {'passed' if result.guard_passed else 'FAILED'}"
        + (f" ({escape('; '.join(result.guard_warnings))})" if result.guard_warnings else ""),
        highlight=False,
    )
    console.print(
        Panel(
            Text(visible(result.lesson_block) or "(no lesson applies to this scope)"),
            title=f"lessons: matched {result.lessons.matched_count}, "
            f"included {result.lessons.included_count}",
            title_align="left",
        )
    )
    context = result.context
    if shown_characters is not None and len(context) > shown_characters:
        context = (
            context[:shown_characters]
            + f"\n… ({len(result.context) - shown_characters:,} more characters)"
        )
    console.print(
        Panel(
            Text(visible(context)),
            title=f"context: {result.context_length:,} characters from {len(result.chunks_used)} "
            f"chunks · {result.pipeline_ms:.1f} ms",
            title_align="left",
        )
    )
    console.print(_budget_table(result))


def _budget_table(result: ContextResult) -> Table:
    counter = default_token_counter()
    allocation = ContextBudget(DEMO_MAX_TOKENS, DEMO_RESERVE).allocate_with_opts(
        DEMO_SYSTEM_PROMPT,
        DEMO_SKILLS_PROMPT,
        counter,
        graph_enabled=False,
        lesson_tokens=counter.count(result.lesson_block),
    )
    rows = [
        [name.replace("_", " "), tokens, percent(tokens / DEMO_MAX_TOKENS)]
        for name in BudgetAllocation.__dataclass_fields__
        if (tokens := getattr(allocation, name))
    ]
    return table(
        f"session token budget: {DEMO_MAX_TOKENS:,} tokens, "
        f"{DEMO_RESERVE:.0%} reserved for the answer (empty slots not shown)",
        ["slot", "tokens", "share"],
        rows,
    )


def _runs_table(results: list[tuple[Scope, ContextResult]]) -> Table:
    rows = []
    for number, (scope, result) in enumerate(results, 1):
        rows.append(
            [
                number,
                scope.tags[0] if scope.tags else "—",
                result.query_analysis.original_query,
                result.query_analysis.complexity.value,
                result.budget,
                result.context_length,
                "pass" if result.guard_passed else "FAIL",
                result.cache_hit,
                f"{result.lessons.matched_count}/{result.lessons.included_count}",
                round(result.pipeline_ms, 1),
            ]
        )
    columns = ["#", "role", "query", "complexity", "budget", "length", "guard", "hit"]
    return table(
        "All runs (budget and length in characters; lessons matched/included)",
        [*columns, "lessons", "ms"],
        rows,
        flexible="query",
        compact=True,
    )


def _guard_warnings(results: list[tuple[Scope, ContextResult]]) -> list[str]:
    return [
        f"run {number}: {warning}"
        for number, (_, result) in enumerate(results, 1)
        for warning in result.guard_warnings
    ]


def _adaptive_table(report: PerformanceReport, store: Store) -> Table:
    whose = (
        f"every process of namespace {store.namespace!r}" if store.uses_redis else "this process"
    )
    return table(
        f"Adaptive windows: the last 100 runs of {whose}",
        ["runs", "in window", "mean ms", "mean length", "mean chunks", "guard failures"],
        [
            [
                report["runs"],
                report["samples"],
                _rounded(report["mean_response_ms"], 1),
                _rounded(report["mean_context_length"], 1),
                _rounded(report["mean_chunk_count"], 2),
                percent(report["guard_failure_rate"]),
            ]
        ],
    )


def _rounded(value: float | int | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def _durable_metrics_table(store: Store) -> Table:
    report = store.metrics.report(namespace=store.namespace)
    return table(
        f"Durable metrics in SQL: every run in namespace {store.namespace!r} so far",
        ["runs", "p50 ms", "p95 ms", "p99 ms", "mean length", "guard failures", "cache hits"],
        [
            [
                report.runs,
                report.p50_ms,
                report.p95_ms,
                report.p99_ms,
                report.mean_context_length,
                percent(report.guard_failure_rate),
                percent(report.cache_hit_rate),
            ]
        ],
    )
