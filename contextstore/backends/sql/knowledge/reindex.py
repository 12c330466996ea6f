"""Reconfigure a namespace: re-analyse and re-embed its chunks, then switch in one transaction.

``configure`` works in two phases (docs/decisions/0085-namespace-analyzer-and-embedder-in-sql.md):

1. **Build.** The chunks are read in batches of ``batch_size`` (each batch its own short
   read) and their new terms and vectors computed in Python, outside any write transaction;
   searches and writes go on against the current index meanwhile. ``progress(n)`` follows.
2. **Switch.** One write transaction locks the namespace (writers queue behind it), catches
   up on the chunks written or rewritten during the build, rewrites every chunk's terms and
   vectors (the migrations' triggers move the full-text index and the statistics with them)
   and the ``knowledge_settings`` row. Readers keep their snapshot of the old index until it
   commits, then see the new one whole: no search ever reads a mixed index. A search planned
   for the old settings that meets the new index plans again (``KnowledgeBase.finish``).

If another process reconfigures the namespace during the build, the build starts over.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any, Final

import sqlalchemy as sa

from contextstore.backends.sql.knowledge.settings import (
    UNCHANGED,
    StoredSettings,
    Unchanged,
    build_embedder,
    check_analyzer,
    check_embedder,
    read_settings,
    write_settings,
)
from contextstore.backends.sql.knowledge.strategies import strategy_of
from contextstore.backends.sql.knowledge.tables import CHUNKS
from contextstore.core.analyzers import SIMPLE, Analyzer, analyzer_named
from contextstore.core.embedding import EmbedFn
from contextstore.core.knowledge import embed_passages, embedder_name
from contextstore.core.tokens import index_term, tokenize
from contextstore.errors import ConfigurationError, ValidationError

if TYPE_CHECKING:
    from contextstore.backends.sql.knowledge.repository import KnowledgeBase

__all__ = ["ConfigureSummary", "configure", "stale_embeddings"]

BATCH_SIZE: Final = 500
# Builds one configure makes at most when other processes keep reconfiguring the namespace.
ATTEMPTS: Final = 3
Progress = Callable[[int], None]


@dataclass(frozen=True)
class ConfigureSummary:
    """What ``configure`` stored and how many chunks it rewrote."""

    namespace: str
    analyzer: str
    embedder: str | None
    dimension: int | None
    version: int
    reanalysed: int
    reembedded: int
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "analyzer": self.analyzer,
            "embedder": self.embedder,
            "dimension": self.dimension,
            "version": self.version,
            "reanalysed": self.reanalysed,
            "reembedded": self.reembedded,
            "seconds": round(self.seconds, 3),
        }


@dataclass(frozen=True)
class _Target:
    analyzer: Analyzer
    embedder: str | None  # registry name
    embed_fn: EmbedFn | None
    chunk_embedder: str | None  # what each chunk's ``embedder`` column records
    dimension: int | None
    reanalyse: bool


def configure(
    base: KnowledgeBase,
    analyzer: str | None = None,
    embedder: str | Unchanged | None = UNCHANGED,
    *,
    progress: Progress | None = None,
    total: Callable[[int], None] | None = None,
    batch_size: int = BATCH_SIZE,
) -> ConfigureSummary:
    """Store ``base``'s namespace's analyzer and embedder, reindexing what they change.

    ``analyzer`` ``None`` keeps the namespace's (``simple`` for a namespace never configured);
    ``embedder`` left out keeps the namespace's, ``None``/``"none"`` is lexical only. A bad
    name raises ``ValidationError`` naming the field before anything is read or written; an
    embedder that cannot be built or called raises before anything is written.
    ``total(n)`` is told how many chunks the build reads, ``progress(n)`` each batch done.
    """
    started = time.monotonic()
    wanted_analyzer = None if analyzer is None else check_analyzer(analyzer)
    wanted_embedder = embedder if isinstance(embedder, Unchanged) else check_embedder(embedder)
    for _ in range(ATTEMPTS):
        stored = base._read(partial(read_settings, namespace=base.namespace))
        target = _target(base, stored, wanted_analyzer, wanted_embedder)
        built = _build(base, target, progress, total, batch_size)
        version = 0 if stored is None else stored.version
        switched = base._write(partial(_switch, base, target, built, version))
        if switched is not None:
            new_version, reanalysed, reembedded = switched
            # This process's own request may now disagree: its next search says so, while
            # the configure it asked for has succeeded.
            with contextlib.suppress(ValidationError):
                base.settings()
            return ConfigureSummary(
                namespace=base.namespace,
                analyzer=target.analyzer.name,
                embedder=target.embedder,
                dimension=target.dimension,
                version=new_version,
                reanalysed=reanalysed,
                reembedded=reembedded,
                seconds=time.monotonic() - started,
            )
    raise ConfigurationError(
        f"namespace {base.namespace!r} was reconfigured by another process during each of "
        f"{ATTEMPTS} attempts; run configure again"
    )


def _target(
    base: KnowledgeBase,
    stored: StoredSettings | None,
    analyzer: str | None,
    embedder: str | Unchanged | None,
) -> _Target:
    current = base._configuration.active or base._configuration.resolve(None)
    if isinstance(embedder, Unchanged):
        embedder = stored.embedder if stored is not None else current.registry_name
    name = analyzer or (stored.analyzer if stored is not None else "simple")
    embed_fn = None
    dimension = None
    if embedder is not None:
        given = current.embed_fn
        same = given is not None and getattr(given, "registry_name", None) == embedder
        embed_fn = given if same else build_embedder(embedder)
        assert embed_fn is not None  # a registry name other than "none" builds an embedder
        dimension = _dimension(embed_fn, embedder)
    # A namespace never configured may hold terms of any analyzer a process asked for.
    reanalyse = stored is None or stored.analyzer != name
    return _Target(
        analyzer=analyzer_named(name),
        embedder=embedder,
        embed_fn=embed_fn,
        chunk_embedder=None if embed_fn is None else embedder_name(embed_fn),
        dimension=dimension,
        reanalyse=reanalyse,
    )


def _dimension(embed_fn: EmbedFn, name: str) -> int:
    """The embedder's vector length, from one embedding (which also proves it works)."""
    vectors = embed_passages(embed_fn, ["dimension"])
    if vectors[0] is None:
        raise ValidationError("embedder", f"{name} failed to embed a test text; nothing changed")
    return int(vectors[0].shape[0])


# A chunk's rewritten columns, keyed by chunk id, with the hash of the text they came from.
Built = dict[int, tuple[int, dict[str, Any]]]


def _build(
    base: KnowledgeBase,
    target: _Target,
    progress: Progress | None,
    total: Callable[[int], None] | None,
    batch_size: int,
) -> Built:
    namespace = CHUNKS.c.namespace == base.namespace
    if total is not None:
        count = base._read(
            lambda c: c.execute(sa.select(sa.func.count()).where(namespace)).scalar_one()
        )
        total(int(count))
    built: Built = {}
    last = 0
    while True:
        statement = (
            sa.select(CHUNKS.c.id, CHUNKS.c.text, CHUNKS.c.embedder)
            .where(namespace, CHUNKS.c.id > last)
            .order_by(CHUNKS.c.id)
            .limit(batch_size)
        )
        rows = base._read(partial(_all, statement))
        if not rows:
            return built
        built.update(_rewrite(rows, target, base.namespace))
        last = int(rows[-1][0])
        if progress is not None:
            progress(len(rows))


def _all(statement: sa.Select[Any], connection: sa.Connection) -> list[Any]:
    return list(connection.execute(statement).all())


def _rewrite(rows: Sequence[Any], target: _Target, namespace: str) -> Built:
    """The new columns of each chunk ``(id, text, embedder)`` that ``target`` changes."""
    changes: Built = {int(row[0]): (hash(row[1]), {}) for row in rows}
    if target.reanalyse:
        for chunk_id, text, _ in rows:
            changes[int(chunk_id)][1].update(analysed(text, target.analyzer))
    if target.embed_fn is None:
        for chunk_id, _, embedder in rows:
            if embedder is not None:
                changes[int(chunk_id)][1].update(embedding=None, embedder=None, dimension=None)
        return changes
    stale = [row for row in rows if row[2] != target.chunk_embedder]
    vectors = embed_passages(target.embed_fn, [row[1] for row in stale])
    for (chunk_id, _, _), vector in zip(stale, vectors, strict=True):
        if vector is not None and int(vector.shape[0]) != target.dimension:
            raise ValidationError(
                "embedder",
                f"{target.embedder} returned {int(vector.shape[0])}-dimension vectors, not "
                f"{target.dimension}; namespace {namespace!r} is unchanged",
            )
        columns: dict[str, Any] = {"embedding": None, "embedder": None, "dimension": None}
        if vector is not None:
            columns = {
                "embedding": vector.astype("<f4").tobytes(),
                "embedder": target.chunk_embedder,
                "dimension": int(vector.shape[0]),
            }
        changes[int(chunk_id)][1].update(columns)
    return changes


def analysed(text: str, analyzer: Analyzer) -> dict[str, Any]:
    """A passage's ``terms``, ``term_counts`` and ``length`` under ``analyzer``, as an import
    with that analyzer writes them (``contextstore.core.knowledge.prepare_passages``)."""
    tokens = tokenize(text) if analyzer is SIMPLE else analyzer.terms(text)
    counts = Counter(index_term(token) for token in tokens)
    return {"terms": " ".join(counts), "term_counts": dict(counts), "length": len(tokens)}


def _switch(
    base: KnowledgeBase, target: _Target, built: Built, version: int, connection: sa.Connection
) -> tuple[int, int, int] | None:
    """Under the namespace's lock: catch up, rewrite every chunk, store the settings.
    ``None`` when another process reconfigured the namespace since ``version``."""
    base._lock(connection)
    stored = read_settings(connection, base.namespace)
    if (0 if stored is None else stored.version) != version:
        return None
    rows = connection.execute(
        sa.select(CHUNKS.c.id, CHUNKS.c.text, CHUNKS.c.embedder)
        .where(CHUNKS.c.namespace == base.namespace)
        .order_by(CHUNKS.c.id)
    ).all()
    # Chunks written (or an id reused) since the build were analysed the old way: again.
    late = [row for row in rows if built.get(int(row[0]), (None,))[0] != hash(row[1])]
    if late:
        built.update(_rewrite(late, target, base.namespace))
    present = {int(row[0]) for row in rows}
    updates = [(i, columns) for i, (_, columns) in built.items() if i in present and columns]
    reanalysed = len(present) if target.reanalyse else 0
    reembedded = sum(1 for _, columns in updates if columns.get("embedder") is not None)
    _update(connection, updates)
    now = datetime.now(UTC)
    new_version = write_settings(
        connection, base.namespace, target.analyzer.name, target.embedder, target.dimension, now
    )
    return new_version, reanalysed, reembedded


def _update(connection: sa.Connection, updates: Sequence[tuple[int, dict[str, Any]]]) -> None:
    """Rewrite the chunks' columns: one statement per batch and set of columns."""
    by_columns: dict[tuple[str, ...], list[tuple[int, dict[str, Any]]]] = {}
    for chunk_id, columns in updates:
        by_columns.setdefault(tuple(sorted(columns)), []).append((chunk_id, columns))
    strategy = strategy_of(connection)
    for names, group in by_columns.items():
        strategy.update_chunks(connection, names, group)


def stale_embeddings(base: KnowledgeBase) -> int:
    """How many of the namespace's chunks ``base.reembed`` would embed (a progress total)."""
    active = base.settings()
    if active.embedder is None:
        return 0
    stale = sa.or_(CHUNKS.c.embedder.is_(None), CHUNKS.c.embedder != active.embedder)
    statement = sa.select(sa.func.count()).where(CHUNKS.c.namespace == base.namespace, stale)
    return int(base._read(lambda c: c.execute(statement).scalar_one()))
