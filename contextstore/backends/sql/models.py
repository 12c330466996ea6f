"""SQLAlchemy models: the schema as Python sees it.

Alembic migrations (``migrations/``) are the only way a schema is made; these
models mirror them so ``alembic check`` reports no drift. Dialect-specific DDL — triggers and
trigger functions — lives only in the migrations. Check constraints are declared here too, as
documentation and for ``create_all`` in throwaway experiments, with the same names.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from contextstore.backends.sql.types import UTCDateTime

# Named constraints and indexes, so migrations can refer to them on every dialect.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# SQLite autoincrements only an ``INTEGER PRIMARY KEY``; PostgreSQL gets a 64-bit identity.
BigIntegerId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

ENTITY_ID_LENGTH = 255
ACTOR_LENGTH = 255
# A JSON array of strings: ``jsonb`` on PostgreSQL, so reports unnest it with
# ``jsonb_array_elements_text``; JSON text on SQLite, unnested with ``json_each``.
JsonList = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")

# Portable SQL for the rules of contextstore.core.lessons.validate_record. ``substr``/``length``
# rather than LIKE, because SQLite's LIKE is case-insensitive ('TAG:x' must be refused).
STATUS_CHECK = "status IN ('proposed', 'active', 'retired', 'superseded')"
SEVERITY_CHECK = "severity IN ('critical', 'warning', 'info')"
ENTITY_ID_CHECK = (
    "entity_id <> '' AND substr(entity_id, 1, 1) <> '.' "
    "AND substr(entity_id, length(entity_id), 1) <> '.' AND entity_id NOT LIKE '%..%'"
)
SUPERSEDED_CHECK = (
    "(status = 'superseded' AND superseded_by IS NOT NULL AND superseded_by <> entity_id) "
    "OR (status <> 'superseded' AND superseded_by IS NULL)"
)
SCOPE_KEY_CHECK = (
    "(substr(scope_key, 1, 4) = 'tag:' AND length(scope_key) > 4) "
    "OR (substr(scope_key, 1, 3) = 'id:' AND length(scope_key) > 3)"
)
# Bytes, not characters: PostgreSQL counts them with octet_length; SQLite by casting the
# (UTF-8) text to a blob.
INJECTION_FORM_CHECK = {
    "postgresql": "octet_length(injection_form) <= 320",
    "sqlite": "length(CAST(injection_form AS BLOB)) <= 320",
}


class Base(DeclarativeBase):
    metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)


class LessonRow(Base):
    """``lessons``: one durable lesson; ``entity_id`` and ``created_at`` never change."""

    __tablename__ = "lessons"

    entity_id: Mapped[str] = mapped_column(sa.String(ENTITY_ID_LENGTH), primary_key=True)
    status: Mapped[str] = mapped_column(
        sa.String(16), nullable=False, server_default=sa.text("'proposed'")
    )
    severity: Mapped[str] = mapped_column(
        sa.String(16), nullable=False, server_default=sa.text("'info'")
    )
    created_at: Mapped[datetime] = mapped_column(
        UTCDateTime(), nullable=False, server_default=sa.func.current_timestamp()
    )
    updated_at: Mapped[datetime] = mapped_column(
        UTCDateTime(), nullable=False, server_default=sa.func.current_timestamp()
    )
    summary: Mapped[str] = mapped_column(sa.Text(), nullable=False, server_default=sa.text("''"))
    detail: Mapped[str] = mapped_column(sa.Text(), nullable=False, server_default=sa.text("''"))
    injection_form: Mapped[str] = mapped_column(sa.Text(), nullable=False)
    superseded_by: Mapped[str | None] = mapped_column(
        sa.String(ENTITY_ID_LENGTH), sa.ForeignKey("lessons.entity_id"), nullable=True
    )
    evidence: Mapped[Any] = mapped_column(sa.JSON(), nullable=False, server_default=sa.text("'{}'"))

    __table_args__ = (
        sa.CheckConstraint(STATUS_CHECK, name="ck_lessons_status"),
        sa.CheckConstraint(SEVERITY_CHECK, name="ck_lessons_severity"),
        sa.CheckConstraint(ENTITY_ID_CHECK, name="ck_lessons_entity_id"),
        sa.CheckConstraint(SUPERSEDED_CHECK, name="ck_lessons_superseded_by"),
        sa.CheckConstraint(
            INJECTION_FORM_CHECK["postgresql"], name="ck_lessons_injection_form_size"
        ).ddl_if(dialect="postgresql"),
        sa.CheckConstraint(
            INJECTION_FORM_CHECK["sqlite"], name="ck_lessons_injection_form_size"
        ).ddl_if(dialect="sqlite"),
        sa.Index("ix_lessons_status", "status"),
        sa.Index("ix_lessons_superseded_by", "superseded_by"),
    )


class LessonScopeRow(Base):
    """``lesson_scopes``: one applies-to key of a lesson; ``position`` keeps the list order."""

    __tablename__ = "lesson_scopes"

    lesson_id: Mapped[str] = mapped_column(
        sa.String(ENTITY_ID_LENGTH),
        sa.ForeignKey("lessons.entity_id", ondelete="CASCADE"),
        primary_key=True,
    )
    scope_key: Mapped[str] = mapped_column(sa.Text(), primary_key=True)
    position: Mapped[int] = mapped_column(sa.Integer(), nullable=False)

    __table_args__ = (
        sa.CheckConstraint(SCOPE_KEY_CHECK, name="ck_lesson_scopes_scope_key"),
        # The candidate lookup: ``scope_key IN (...)`` → lesson ids, without touching the table.
        sa.Index("ix_lesson_scopes_scope_key", "scope_key", "lesson_id"),
    )


class LessonEventRow(Base):
    """``lesson_events``: the audit trail, written only by database triggers, append-only.

    ``event`` is ``insert``, ``update``, ``status``, ``scope`` or ``delete``;
    ``old_status``/``new_status`` are set for ``insert`` (new), ``status`` and ``delete`` (old).
    ``changes`` is JSON: the whole row for ``insert``/``delete``, ``{"column": {"old", "new"}}``
    for ``update``/``status``, ``{"added": key}``/``{"removed": key}`` for ``scope``. ``actor``
    is NULL only on events recorded before the audit knew actors. No foreign key, so a deleted
    lesson's history stays.
    """

    __tablename__ = "lesson_events"

    id: Mapped[int] = mapped_column(BigIntegerId, primary_key=True, autoincrement=True)
    lesson_id: Mapped[str] = mapped_column(sa.String(ENTITY_ID_LENGTH), nullable=False)
    event: Mapped[str] = mapped_column(sa.String(16), nullable=False)
    old_status: Mapped[str | None] = mapped_column(sa.String(16), nullable=True)
    new_status: Mapped[str | None] = mapped_column(sa.String(16), nullable=True)
    occurred_at: Mapped[datetime] = mapped_column(
        UTCDateTime(), nullable=False, server_default=sa.func.current_timestamp()
    )
    actor: Mapped[str | None] = mapped_column(sa.String(ACTOR_LENGTH), nullable=True)
    changes: Mapped[Any] = mapped_column(sa.JSON(), nullable=True)

    __table_args__ = (sa.Index("ix_lesson_events_lesson_id", "lesson_id", "id"),)


# What a report reads besides namespace, recorded_at, response_ms and complexity: every
# report index carries these too, so a report never reads the wide rows (their JSON traces).
REPORT_COLUMNS = (
    "intent",
    "worker",
    "cache_hit",
    "guard_passed",
    "context_length",
    "lessons_matched",
    "lessons_included",
)


class QueryMetricRow(Base):
    """``query_metrics``: one row per engine run (see ``contextstore.core.metrics.QueryMetric``)."""

    __tablename__ = "query_metrics"

    id: Mapped[int] = mapped_column(BigIntegerId, primary_key=True, autoincrement=True)
    recorded_at: Mapped[datetime] = mapped_column(UTCDateTime(), nullable=False)
    namespace: Mapped[str] = mapped_column(sa.String(128), nullable=False)
    worker: Mapped[str] = mapped_column(sa.String(128), nullable=False)
    query_hash: Mapped[str] = mapped_column(sa.String(32), nullable=False)
    query: Mapped[str | None] = mapped_column(sa.Text(), nullable=True)
    complexity: Mapped[str] = mapped_column(sa.String(16), nullable=False)
    intent: Mapped[str] = mapped_column(sa.String(16), nullable=False)
    budget: Mapped[int] = mapped_column(sa.Integer(), nullable=False)
    context_length: Mapped[int] = mapped_column(sa.Integer(), nullable=False)
    chunk_count: Mapped[int] = mapped_column(sa.Integer(), nullable=False)
    lessons_matched: Mapped[int] = mapped_column(sa.Integer(), nullable=False)
    lessons_included: Mapped[int] = mapped_column(sa.Integer(), nullable=False)
    response_ms: Mapped[float] = mapped_column(sa.Float(), nullable=False)
    guard_passed: Mapped[bool] = mapped_column(sa.Boolean(), nullable=False)
    guard_warnings: Mapped[list[str]] = mapped_column(sa.JSON(), nullable=False)
    cache_hit: Mapped[bool] = mapped_column(sa.Boolean(), nullable=False)
    # The run's trace (see contextstore.core.metrics.RunTrace); '[]' on rows older than traces.
    scope_entity_ids: Mapped[list[str]] = mapped_column(
        JsonList, nullable=False, server_default=sa.text("'[]'")
    )
    scope_tags: Mapped[list[str]] = mapped_column(
        JsonList, nullable=False, server_default=sa.text("'[]'")
    )
    lessons_matched_ids: Mapped[list[str]] = mapped_column(
        JsonList, nullable=False, server_default=sa.text("'[]'")
    )
    lessons_included_ids: Mapped[list[str]] = mapped_column(
        JsonList, nullable=False, server_default=sa.text("'[]'")
    )
    chunk_sources: Mapped[list[str]] = mapped_column(
        JsonList, nullable=False, server_default=sa.text("'[]'")
    )

    __table_args__ = (
        sa.Index("ix_query_metrics_recorded_at", "recorded_at"),
        # The report indexes (revision 0006): a namespace's time range (span, since/until,
        # a series' buckets), and response times in order, overall and per complexity, which
        # a percentile walks (OFFSET k) instead of sorting.
        sa.Index(
            "ix_query_metrics_time",
            "namespace",
            "recorded_at",
            "response_ms",
            "complexity",
            *REPORT_COLUMNS,
        ),
        sa.Index(
            "ix_query_metrics_latency",
            "namespace",
            "response_ms",
            "recorded_at",
            "complexity",
            *REPORT_COLUMNS,
        ),
        sa.Index(
            "ix_query_metrics_complexity_latency",
            "namespace",
            "complexity",
            "response_ms",
            "recorded_at",
            *REPORT_COLUMNS,
        ),
        # Revision 0009: each worker's response times in order, so a report by worker walks
        # every worker's own rows, however many workers there are.
        sa.Index(
            "ix_query_metrics_worker_latency",
            "namespace",
            "worker",
            "response_ms",
            "recorded_at",
            "complexity",
            *(column for column in REPORT_COLUMNS if column != "worker"),
        ),
    )


# The columns of ``query_metrics`` that ``query_metric_lessons`` copies: all a report filters,
# sums or orders on (revision 0009's triggers keep the copies).
RUN_LESSON_COPIES = ("namespace", "recorded_at", "response_ms", "complexity", *REPORT_COLUMNS)


class QueryMetricLessonRow(Base):
    """``query_metric_lessons``: one row per (``query_metrics`` row, lesson id its trace names).

    Written only by database triggers on ``query_metrics`` (revision 0009), from whatever
    writes it — the library, an import, a person typing SQL. ``matched`` and ``included``
    say which of the run's arrays name the lesson (a lesson named twice is one row); every
    other column is a copy of the run's, so reports by lesson and the lesson statistics read
    ``ix_query_metric_lessons_latency`` alone, never the runs' JSON.
    """

    __tablename__ = "query_metric_lessons"

    metric_id: Mapped[int] = mapped_column(BigIntegerId, primary_key=True)
    lesson_id: Mapped[str] = mapped_column(sa.Text(), primary_key=True)
    matched: Mapped[bool] = mapped_column(sa.Boolean(), nullable=False)
    included: Mapped[bool] = mapped_column(sa.Boolean(), nullable=False)
    namespace: Mapped[str] = mapped_column(sa.String(128), nullable=False)
    recorded_at: Mapped[datetime] = mapped_column(UTCDateTime(), nullable=False)
    response_ms: Mapped[float] = mapped_column(sa.Float(), nullable=False)
    complexity: Mapped[str] = mapped_column(sa.String(16), nullable=False)
    intent: Mapped[str] = mapped_column(sa.String(16), nullable=False)
    worker: Mapped[str] = mapped_column(sa.String(128), nullable=False)
    cache_hit: Mapped[bool] = mapped_column(sa.Boolean(), nullable=False)
    guard_passed: Mapped[bool] = mapped_column(sa.Boolean(), nullable=False)
    context_length: Mapped[int] = mapped_column(sa.Integer(), nullable=False)
    lessons_matched: Mapped[int] = mapped_column(sa.Integer(), nullable=False)
    lessons_included: Mapped[int] = mapped_column(sa.Integer(), nullable=False)

    __table_args__ = (
        # A lesson's runs in response-time order, those including it first-class: a report by
        # lesson walks (OFFSET k) each lesson's included runs; the statistics group the
        # lessons in index order.
        sa.Index(
            "ix_query_metric_lessons_latency",
            "namespace",
            "lesson_id",
            "included",
            "response_ms",
            "matched",
            "recorded_at",
            "complexity",
            *REPORT_COLUMNS,
        ),
    )


# JSON that PostgreSQL stores as jsonb: compared by value (metadata filters) and walked by the
# knowledge triggers with jsonb_object_keys.
JsonValue = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
NAMESPACE_LENGTH = 128
SOURCE_LENGTH = 1024
# Index terms are at most 64 characters (contextstore.core.tokens.index_term).
TERM_LENGTH = 64
EMBEDDING_CHECK = {
    "postgresql": (
        "(embedding IS NULL AND embedder IS NULL AND dimension IS NULL) OR "
        "(embedding IS NOT NULL AND embedder IS NOT NULL AND dimension > 0 "
        "AND octet_length(embedding) = 4 * dimension)"
    ),
    "sqlite": (
        "(embedding IS NULL AND embedder IS NULL AND dimension IS NULL) OR "
        "(embedding IS NOT NULL AND embedder IS NOT NULL AND dimension > 0 "
        "AND length(embedding) = 4 * dimension)"
    ),
}


class DocumentRow(Base):
    """``documents``: one knowledge document; ``source`` is unique within its namespace.

    ``content_hash`` (``contextstore.core.knowledge.content_hash``) makes re-imports idempotent;
    ``created_at`` never changes (a trigger refuses it).
    """

    __tablename__ = "documents"

    id: Mapped[int] = mapped_column(BigIntegerId, primary_key=True, autoincrement=True)
    namespace: Mapped[str] = mapped_column(sa.String(NAMESPACE_LENGTH), nullable=False)
    source: Mapped[str] = mapped_column(sa.String(SOURCE_LENGTH), nullable=False)
    # "metadata" is taken on declarative classes, hence the attribute name.
    meta: Mapped[Any] = mapped_column(
        "metadata", JsonValue, nullable=False, server_default=sa.text("'{}'")
    )
    content_hash: Mapped[str] = mapped_column(sa.String(64), nullable=False)
    created_at: Mapped[datetime] = mapped_column(
        UTCDateTime(), nullable=False, server_default=sa.func.current_timestamp()
    )
    updated_at: Mapped[datetime] = mapped_column(
        UTCDateTime(), nullable=False, server_default=sa.func.current_timestamp()
    )

    __table_args__ = (sa.UniqueConstraint("namespace", "source"),)


class ChunkRow(Base):
    """``chunks``: one passage of a document, as ``InMemoryRetriever`` would split it.

    ``terms`` (the distinct index terms, space-separated) feeds the full-text index: SQLite's
    FTS5 table ``chunks_fts`` and, on PostgreSQL, the generated ``search`` tsvector with its GIN
    index (both made by the migrations only). ``term_counts`` maps each index term to its
    occurrences and ``length`` counts tokens: BM25's inputs. ``embedding`` is the unit vector
    as little-endian float32 bytes, from ``embedder`` with ``dimension`` components.
    """

    __tablename__ = "chunks"

    id: Mapped[int] = mapped_column(BigIntegerId, primary_key=True, autoincrement=True)
    document_id: Mapped[int] = mapped_column(
        BigIntegerId, sa.ForeignKey("documents.id", ondelete="CASCADE"), nullable=False
    )
    namespace: Mapped[str] = mapped_column(sa.String(NAMESPACE_LENGTH), nullable=False)
    position: Mapped[int] = mapped_column(sa.Integer(), nullable=False)
    text: Mapped[str] = mapped_column(sa.Text(), nullable=False)
    terms: Mapped[str] = mapped_column(sa.Text(), nullable=False)
    term_counts: Mapped[Any] = mapped_column(JsonValue, nullable=False)
    length: Mapped[int] = mapped_column(sa.Integer(), nullable=False)
    embedding: Mapped[bytes | None] = mapped_column(sa.LargeBinary(), nullable=True)
    embedder: Mapped[str | None] = mapped_column(sa.String(255), nullable=True)
    dimension: Mapped[int | None] = mapped_column(sa.Integer(), nullable=True)

    __table_args__ = (
        sa.UniqueConstraint("document_id", "position"),
        sa.CheckConstraint(EMBEDDING_CHECK["postgresql"], name="ck_chunks_embedding").ddl_if(
            dialect="postgresql"
        ),
        sa.CheckConstraint(EMBEDDING_CHECK["sqlite"], name="ck_chunks_embedding").ddl_if(
            dialect="sqlite"
        ),
    )


class KnowledgeStatsRow(Base):
    """``knowledge_stats``: a namespace's BM25 statistics and knowledge generation.

    Kept by triggers on ``documents`` and ``chunks`` (any writer, SQL typed by hand too):
    ``chunk_count`` passages of ``total_length`` tokens in ``document_count`` documents.
    ``generation`` grows with every change and never goes back (the row is never deleted), so
    a context cached at an older generation is known to be stale.
    """

    __tablename__ = "knowledge_stats"

    namespace: Mapped[str] = mapped_column(sa.String(NAMESPACE_LENGTH), primary_key=True)
    generation: Mapped[int] = mapped_column(sa.BigInteger(), nullable=False)
    document_count: Mapped[int] = mapped_column(sa.BigInteger(), nullable=False)
    chunk_count: Mapped[int] = mapped_column(sa.BigInteger(), nullable=False)
    total_length: Mapped[int] = mapped_column(sa.BigInteger(), nullable=False)


class KnowledgeTermRow(Base):
    """``knowledge_terms``: in how many of a namespace's chunks each index term occurs.

    Kept by triggers on ``chunks``; a term no chunk holds any more has no row.
    """

    __tablename__ = "knowledge_terms"

    namespace: Mapped[str] = mapped_column(sa.String(NAMESPACE_LENGTH), primary_key=True)
    term: Mapped[str] = mapped_column(sa.String(TERM_LENGTH), primary_key=True)
    frequency: Mapped[int] = mapped_column(sa.BigInteger(), nullable=False)


class KnowledgeSettingsRow(Base):
    """``knowledge_settings``: a namespace's analyzer and embedder (migration 0017).

    ``embedder`` is a registry name (``hashing``, ``wordllama``, ``openai:<model>``) or null
    for lexical search only; ``dimension`` the length of its vectors once known. ``version``
    grows with every change: a search that planned with another version plans again.
    """

    __tablename__ = "knowledge_settings"
    __table_args__ = (
        sa.CheckConstraint(
            "(embedder IS NULL AND dimension IS NULL) OR "
            "(embedder IS NOT NULL AND (dimension IS NULL OR dimension > 0))",
            name="ck_knowledge_settings_dimension",
        ),
    )

    namespace: Mapped[str] = mapped_column(sa.String(NAMESPACE_LENGTH), primary_key=True)
    analyzer: Mapped[str] = mapped_column(sa.String(32), nullable=False)
    embedder: Mapped[str | None] = mapped_column(sa.String(255), nullable=True)
    dimension: Mapped[int | None] = mapped_column(sa.Integer(), nullable=True)
    version: Mapped[int] = mapped_column(sa.BigInteger(), nullable=False)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), nullable=False)


KEY_ID_LENGTH = 12
SECRET_NAME_LENGTH = 64


class ApiKeyRow(Base):
    """``api_keys``: the service's API keys when no key file is configured, so every
    ``contextstore serve`` process on the database checks the same keys (migration 0016).

    As in a key file: the key's public ``id``, what it reaches (``namespace``, ``role``), a
    random ``salt`` and ``HMAC-SHA256(salt, secret)`` in hex, never the key. The role is
    checked by the program, not the schema, so a new role needs no migration.
    """

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(sa.String(KEY_ID_LENGTH), primary_key=True)
    namespace: Mapped[str] = mapped_column(sa.String(NAMESPACE_LENGTH), nullable=False)
    role: Mapped[str] = mapped_column(sa.String(16), nullable=False)
    salt: Mapped[str] = mapped_column(sa.String(64), nullable=False)
    hash: Mapped[str] = mapped_column(sa.String(128), nullable=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), nullable=False)
    label: Mapped[str] = mapped_column(sa.Text(), nullable=False, server_default=sa.text("''"))


class ServiceSecretRow(Base):
    """``service_secrets``: secrets every service node must share, by name (``console``:
    the key that signs console sessions), made once by whichever node needs one first."""

    __tablename__ = "service_secrets"

    name: Mapped[str] = mapped_column(sa.String(SECRET_NAME_LENGTH), primary_key=True)
    value: Mapped[str] = mapped_column(sa.Text(), nullable=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), nullable=False)


# LangGraph's namespaces are tuples of labels without periods, so the labels joined by "."
# name one namespace unambiguously (``contextstore.backends.sql.graph_items``).
GRAPH_PATH_LENGTH = 1024


class GraphNamespaceRow(Base):
    """``graph_namespaces``: a LangGraph namespace holding at least one item, in one
    contextstore ``namespace``; ``path`` is its labels joined by ``.``.

    Made with its first item; deleted with its last, so ``list_namespaces`` reads only
    namespaces that hold items.
    """

    __tablename__ = "graph_namespaces"

    id: Mapped[int] = mapped_column(BigIntegerId, primary_key=True, autoincrement=True)
    namespace: Mapped[str] = mapped_column(sa.String(NAMESPACE_LENGTH), nullable=False)
    path: Mapped[str] = mapped_column(sa.String(GRAPH_PATH_LENGTH), nullable=False)

    __table_args__ = (sa.UniqueConstraint("namespace", "path"),)


class GraphItemRow(Base):
    """``graph_items``: one LangGraph store item, a JSON object under a key of a namespace.

    ``id`` orders the items of a namespace by when each key was first put (an update keeps
    it). No cascade from the namespace: removing a namespace that a concurrent writer has
    just given an item fails, and the writer's batch runs again.
    """

    __tablename__ = "graph_items"

    id: Mapped[int] = mapped_column(BigIntegerId, primary_key=True, autoincrement=True)
    namespace_id: Mapped[int] = mapped_column(
        BigIntegerId, sa.ForeignKey("graph_namespaces.id"), nullable=False
    )
    key: Mapped[str] = mapped_column(sa.Text(), nullable=False)
    value: Mapped[Any] = mapped_column(sa.JSON(), nullable=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), nullable=False)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), nullable=False)

    __table_args__ = (sa.UniqueConstraint("namespace_id", "key"),)


class LessonProposalRow(Base):
    """``lesson_proposals``: a lesson proposed by an agent — who, from which namespace, when
    — and its review once it is rejected (``reviewer``, ``reviewed_at``, ``reason``) or
    accepted (``reviewer``, ``reviewed_at``). The lesson itself is a ``lessons`` row with
    status ``proposed``; this row stays when the lesson is deleted, like its audit."""

    __tablename__ = "lesson_proposals"

    id: Mapped[int] = mapped_column(BigIntegerId, primary_key=True, autoincrement=True)
    lesson_id: Mapped[str] = mapped_column(sa.String(ENTITY_ID_LENGTH), nullable=False)
    namespace: Mapped[str] = mapped_column(sa.String(NAMESPACE_LENGTH), nullable=False)
    proposer: Mapped[str] = mapped_column(sa.String(ACTOR_LENGTH), nullable=False)
    proposed_at: Mapped[datetime] = mapped_column(UTCDateTime(), nullable=False)
    reviewer: Mapped[str | None] = mapped_column(sa.String(ACTOR_LENGTH), nullable=True)
    reviewed_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    reason: Mapped[str | None] = mapped_column(sa.Text(), nullable=True)

    __table_args__ = (
        # A namespace's proposals of the last hour are counted along this index.
        sa.Index("ix_lesson_proposals_namespace_proposed_at", "namespace", "proposed_at"),
        sa.Index("ix_lesson_proposals_lesson_id", "lesson_id", "id"),
    )


class ProposalLimitRow(Base):
    """``proposal_limits``: at most ``per_hour`` lessons proposed from a namespace in any
    hour; a namespace without a row has no cap."""

    __tablename__ = "proposal_limits"

    namespace: Mapped[str] = mapped_column(sa.String(NAMESPACE_LENGTH), primary_key=True)
    per_hour: Mapped[int] = mapped_column(sa.Integer(), nullable=False)

    __table_args__ = (sa.CheckConstraint("per_hour >= 0", name="ck_proposal_limits_per_hour"),)
