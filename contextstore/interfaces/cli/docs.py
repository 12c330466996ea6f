"""``contextstore docs``: the fleet's knowledge base — import, add, list, show, delete, search.

Every command opens the store from ``--database-url`` and ``--namespace`` (else the
``CONTEXTSTORE_*`` environment, else ``sqlite:///contextstore.db`` and ``default``),
migrating it on first use. A refused input prints one ``error:`` line naming the field or the
line of the file, exits with status 2, and writes nothing.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC
from pathlib import Path
from typing import Annotated, Any

import typer

from contextstore.backends.sql.knowledge import KnowledgeBase
from contextstore.backends.sql.knowledge.reindex import stale_embeddings
from contextstore.backends.sql.knowledge.settings import UNCHANGED
from contextstore.core.compose import Chunk
from contextstore.core.knowledge import Document, parse_jsonl
from contextstore.interfaces.cli.common import (
    EXIT_USAGE,
    cli_errors,
    console,
    console_err,
    fail,
    plural,
    print_import_summary,
    print_json,
    print_record,
    progress_bar,
    table,
)
from contextstore.interfaces.cli.options import (
    DatabaseUrl,
    Json,
    MissingOk,
    Namespace,
    jsonl_file,
    open_store,
)
from contextstore.interfaces.cli.output import Format, OutputFormat, chosen_format, emit_rows
from contextstore.interfaces.results import rfc3339

app = typer.Typer(
    help="The knowledge base every process of the fleet retrieves from, in SQL.",
    no_args_is_help=True,
)

Embeddings = Annotated[
    bool,
    typer.Option(
        "--embeddings",
        help="Embed passages with HashingEmbedder when writing, and fuse cosine when searching",
    ),
]


@contextmanager
def knowledge(
    database_url: str | None, namespace: str | None, embeddings: bool = False
) -> Iterator[KnowledgeBase]:
    with cli_errors(), open_store(database_url, None, namespace) as store:
        if embeddings:
            store.config.retrieval.embeddings = True
        yield store.knowledge


_DOCUMENT_FIELDS = ["source", "metadata", "content_hash", "chunks", "created_at", "updated_at"]


def _document_json(document: Document) -> dict[str, Any]:
    data: dict[str, Any] = {
        "source": document.source,
        "metadata": dict(document.metadata),
        "content_hash": document.content_hash,
        "chunks": document.chunk_count,
        "created_at": rfc3339(document.created_at),
        "updated_at": rfc3339(document.updated_at),
    }
    if document.passages:
        data["passages"] = list(document.passages)
    return data


@app.command("import")
def import_documents(
    path: Annotated[Path, typer.Argument(help="JSON Lines file, '-' for stdin")],
    database_url: DatabaseUrl = None,
    namespace: Namespace = None,
    embeddings: Embeddings = False,
    as_json: Json = False,
) -> None:
    """Import documents {"source", "text", "metadata"}; all or nothing, unchanged ones skipped."""
    with cli_errors(), jsonl_file(path) as lines:
        documents = parse_jsonl(lines)
    with (
        knowledge(database_url, namespace, embeddings) as base,
        progress_bar(console_err) as progress,
    ):
        task = progress.add_task("importing", total=len(documents))
        summary = base.import_documents(documents, progress=lambda n: progress.advance(task, n))
    print_import_summary(summary, f"imported {path.name}", as_json)


@app.command("add")
def add(
    source: Annotated[str, typer.Argument(help="Name of the document, unique in the namespace")],
    text: Annotated[
        str | None, typer.Option("--text", help="The text (default: read from stdin)")
    ] = None,
    metadata: Annotated[
        str | None, typer.Option("--metadata", "-m", help="Metadata as a JSON object")
    ] = None,
    database_url: DatabaseUrl = None,
    namespace: Namespace = None,
    embeddings: Embeddings = False,
    as_json: Json = False,
) -> None:
    """Add a document, or replace the one of the same source."""
    parsed: Any = None
    if metadata is not None:
        try:
            parsed = json.loads(metadata)
        except ValueError as error:
            fail(f"metadata: is not valid JSON: {error}", code=EXIT_USAGE)
        except RecursionError:
            fail("metadata: is nested too deeply to read", code=EXIT_USAGE)
    if text is None:
        with cli_errors():
            text = sys.stdin.read()
    with knowledge(database_url, namespace, embeddings) as base:
        document = base.add(text, source, parsed)
    _show(document, as_json)


@app.command("list")
def list_documents(
    prefix: Annotated[str | None, typer.Option(help="Only sources starting with this")] = None,
    limit: Annotated[int | None, typer.Option(help="At most this many")] = None,
    offset: Annotated[int, typer.Option(help="Skip this many first")] = 0,
    output: Format = None,
    database_url: DatabaseUrl = None,
    namespace: Namespace = None,
    as_json: Json = False,
) -> None:
    """List documents by source (a table cuts long text; other formats keep it whole)."""
    fmt = chosen_format(output, as_json)
    with knowledge(database_url, namespace) as base:
        documents = base.list(prefix, limit, offset)
    empty = f"no documents in namespace {base.namespace!r}"
    if prefix:
        empty += f" with a source starting with {prefix!r}"
    if offset:
        empty += f" after the first {offset}"
    records = [_document_json(d) for d in documents]
    if fmt is OutputFormat.TABLE:
        # To the minute, so the source and metadata keep the width.
        records = [
            {
                "source": d.source,
                "chunks": d.chunk_count,
                "metadata": dict(d.metadata),
                "updated (UTC)": f"{d.updated_at.astimezone(UTC):%Y-%m-%d %H:%M}",
            }
            for d in documents
        ]
    emit_rows(
        fmt,
        plural(len(documents), "document"),
        records,
        fields=_DOCUMENT_FIELDS,
        flexible="metadata",
        identifiers="source",
        empty=empty,
    )


def _show(document: Document, as_json: bool) -> None:
    if as_json:
        print_json(_document_json(document))
        return
    fields = _document_json(document)
    fields.pop("passages", None)
    fields["metadata"] = json.dumps(fields["metadata"], ensure_ascii=False)
    rows: list[list[Any]] = [[name, value] for name, value in fields.items()]
    console.print(table(document.source, ["field", "value"], rows, flexible="value", wrap=True))
    passages: list[list[Any]] = [[i, text] for i, text in enumerate(document.passages)]
    if passages:
        console.print(table("passages", ["#", "text"], passages, flexible="text", wrap=True))


@app.command("show")
def show(
    source: Annotated[str, typer.Argument(help="The document's source")],
    database_url: DatabaseUrl = None,
    namespace: Namespace = None,
    as_json: Json = False,
) -> None:
    """Show one document with its passages."""
    with knowledge(database_url, namespace) as base:
        document = base.get(source)
    _show(document, as_json)


@app.command("delete")
def delete(
    source: Annotated[str, typer.Argument(help="The document's source")],
    missing_ok: MissingOk = False,
    database_url: DatabaseUrl = None,
    namespace: Namespace = None,
) -> None:
    """Delete a document and its passages."""
    with knowledge(database_url, namespace) as base:
        deleted = base.delete(source, missing_ok=missing_ok)
    shown = f"deleted {source}" if deleted else f"no document {source}: nothing to delete"
    console.print(shown, markup=False, highlight=False)


def _filters(pairs: list[str]) -> dict[str, Any]:
    """``k=v`` pairs; a repeated key means any of its values; a JSON value keeps its type."""
    filters: dict[str, list[Any]] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            fail(f"--filter: expected key=value, got {pair!r}", code=EXIT_USAGE)
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError):
            value = raw
        if isinstance(value, dict | list):
            value = raw
        filters.setdefault(key, []).append(value)
    return {key: values[0] if len(values) == 1 else values for key, values in filters.items()}


_CHUNK_FIELDS = ["source", "passage", "score", "text", "metadata"]


def _chunk_json(chunk: Chunk) -> dict[str, Any]:
    return {
        "source": chunk.source,
        "passage": chunk.metadata.get("passage"),
        "score": chunk.score,
        "text": chunk.text,
        "metadata": {k: v for k, v in chunk.metadata.items() if k != "passage"},
    }


@app.command("search")
def search(
    query: Annotated[str, typer.Argument(help="What to look for")],
    top_k: Annotated[int, typer.Option("--top-k", help="At most this many chunks")] = 5,
    filter_pairs: Annotated[
        list[str] | None,
        typer.Option("--filter", help="Metadata key=value (repeatable; a repeated key = any of)"),
    ] = None,
    output: Format = None,
    database_url: DatabaseUrl = None,
    namespace: Namespace = None,
    embeddings: Embeddings = False,
    as_json: Json = False,
    mode: Annotated[
        str,
        typer.Option("--mode", help="hybrid (the default), lexical or vector (needs embeddings)"),
    ] = "hybrid",
) -> None:
    """Search the knowledge base as the engine does: best chunks first."""
    fmt = chosen_format(output, as_json)
    filters = _filters(filter_pairs or [])
    with knowledge(database_url, namespace, embeddings) as base:
        chunks = base.search(query, top_k, filters or None, mode)  # type: ignore[arg-type]
    records: list[dict[str, Any]] = [_chunk_json(chunk) for chunk in chunks]
    if fmt is OutputFormat.TABLE:
        records = [
            {
                "#": i + 1,
                "score": f"{c.score:.4f}",
                "source": c.source,
                "passage": c.metadata.get("passage"),
                "text": c.text,
            }
            for i, c in enumerate(chunks)
        ]
    empty = f"no passage in namespace {base.namespace!r} matches {query!r}"
    emit_rows(
        fmt,
        f"{plural(len(chunks), 'chunk')} for {query!r}",
        records,
        fields=_CHUNK_FIELDS,
        flexible="text",
        identifiers="source",
        empty=empty + (" with these filters" if filters else ""),
    )


@app.command("configure")
def configure(
    analyzer: Annotated[
        str | None,
        typer.Option("--analyzer", help="simple or english (default: keep the namespace's)"),
    ] = None,
    embedder: Annotated[
        str | None,
        typer.Option(
            "--embedder",
            help="hashing, wordllama, openai:<model> or none (default: keep the namespace's)",
        ),
    ] = None,
    database_url: DatabaseUrl = None,
    namespace: Namespace = None,
    as_json: Json = False,
) -> None:
    """Store the namespace's analyzer and embedder for every process, and reindex.

    Terms are analysed again for a new analyzer and vectors computed again for a new
    embedder; searches answer from the old index until the new one is complete.
    """
    with knowledge(database_url, namespace) as base, progress_bar(console_err) as progress:
        task = progress.add_task("reindexing", total=None)
        summary = base.configure(
            analyzer,
            UNCHANGED if embedder is None else embedder,
            progress=lambda n: progress.advance(task, n),
            total=lambda n: progress.update(task, total=n),
        )
    record = summary.as_dict()
    print_record("configure", record, as_json)


@app.command("settings")
def settings(
    database_url: DatabaseUrl = None,
    namespace: Namespace = None,
    as_json: Json = False,
) -> None:
    """The namespace's analyzer, embedder and dimension, as every process uses them."""
    with knowledge(database_url, namespace) as base:
        active = base.settings()
    record = {
        "namespace": base.namespace,
        "analyzer": active.analyzer.name,
        "embedder": active.registry_name,
        "dimension": active.dimension,
        "version": active.version,
    }
    print_record("settings", record, as_json)


@app.command("reembed")
def reembed(
    database_url: DatabaseUrl = None,
    namespace: Namespace = None,
    as_json: Json = False,
) -> None:
    """Embed every chunk another embedder, or none, embedded.

    With the namespace's embedder (``HashingEmbedder`` for a namespace never configured).
    """
    with knowledge(database_url, namespace) as base, progress_bar(console_err) as progress:
        if base.settings().version == 0 and base.embed_fn is None:
            base = KnowledgeBase(base._engine, base.namespace, embedder="hashing")
        task = progress.add_task("embedding", total=stale_embeddings(base))
        done = base.reembed(progress=lambda n: progress.advance(task, n))
    print_record("reembed", {"reembedded": done, "embedder": base.embedder}, as_json)
