"""Knowledge base: documents and chunks per namespace, full-text indexed, with BM25 statistics.

Revision ID: 0004_knowledge
Revises: 0002
Create Date: 2026-12-01

Tables ``documents``, ``chunks``, ``knowledge_stats`` and ``knowledge_terms``. The full-text
index is the database's own: SQLite an external-content FTS5 table ``chunks_fts``
(``unicode61``, diacritics removed) over ``chunks.terms``; PostgreSQL a generated
``chunks.search`` tsvector (``simple`` configuration: no stemming, no stop words, so Arabic
and English index alike) with the GIN index ``ix_chunks_search``.

Triggers keep everything in step for every writer, the library and SQL typed by hand alike:
the FTS5 rows; ``knowledge_stats`` (documents, chunks and tokens per namespace, and a
``generation`` that grows with every change so caches can tell a stale context); and
``knowledge_terms`` (chunks per index term). On PostgreSQL they are statement-level triggers
over transition tables, so a bulk insert updates each statistics row once per statement, not
once per chunk. Each trigger touches ``knowledge_stats`` before ``knowledge_terms``, so two
writers of one namespace queue on the statistics row and never deadlock on the terms.

The SQL is a frozen copy (not imported from ``contextstore.backends.sql.models``).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0004_knowledge"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
UTCDateTime = sa.DateTime(timezone=True)
JSON_VALUE = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
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

# -- SQLite ---------------------------------------------------------------------------------

_SQLITE_CHUNK_GONE = """
    INSERT INTO chunks_fts (chunks_fts, rowid, terms) VALUES ('delete', OLD.id, OLD.terms);
    UPDATE knowledge_stats
    SET generation = generation + 1, chunk_count = chunk_count - 1,
        total_length = total_length - OLD.length
    WHERE namespace = OLD.namespace;
    UPDATE knowledge_terms SET frequency = frequency - 1
    WHERE namespace = OLD.namespace AND term IN (SELECT key FROM json_each(OLD.term_counts));
    DELETE FROM knowledge_terms
    WHERE namespace = OLD.namespace AND frequency <= 0
      AND term IN (SELECT key FROM json_each(OLD.term_counts));
"""
_SQLITE_CHUNK_NEW = """
    INSERT INTO chunks_fts (rowid, terms) VALUES (NEW.id, NEW.terms);
    INSERT INTO knowledge_stats
        (namespace, generation, document_count, chunk_count, total_length)
    VALUES (NEW.namespace, 1, 0, 1, NEW.length)
    ON CONFLICT (namespace) DO UPDATE SET
        generation = generation + 1, chunk_count = chunk_count + 1,
        total_length = total_length + excluded.total_length;
    INSERT INTO knowledge_terms (namespace, term, frequency)
    SELECT NEW.namespace, key, 1 FROM json_each(NEW.term_counts) WHERE true
    ON CONFLICT (namespace, term) DO UPDATE SET frequency = frequency + 1;
"""
SQLITE_UPGRADE = [
    """
    CREATE VIRTUAL TABLE chunks_fts USING fts5(
        terms, content='chunks', content_rowid='id',
        tokenize='unicode61 remove_diacritics 2'
    )
    """,
    """
    CREATE TRIGGER documents_immutable BEFORE UPDATE OF namespace, created_at ON documents
    FOR EACH ROW
    WHEN NEW.namespace IS NOT OLD.namespace OR NEW.created_at IS NOT OLD.created_at
    BEGIN
        SELECT RAISE(ABORT, 'documents.namespace and documents.created_at are immutable');
    END
    """,
    """
    CREATE TRIGGER documents_stats_insert AFTER INSERT ON documents FOR EACH ROW
    BEGIN
        INSERT INTO knowledge_stats
            (namespace, generation, document_count, chunk_count, total_length)
        VALUES (NEW.namespace, 1, 1, 0, 0)
        ON CONFLICT (namespace) DO UPDATE SET
            generation = generation + 1, document_count = document_count + 1;
    END
    """,
    """
    CREATE TRIGGER documents_stats_update AFTER UPDATE ON documents FOR EACH ROW
    BEGIN
        UPDATE knowledge_stats SET generation = generation + 1
        WHERE namespace = NEW.namespace;
    END
    """,
    """
    CREATE TRIGGER documents_stats_delete AFTER DELETE ON documents FOR EACH ROW
    BEGIN
        UPDATE knowledge_stats
        SET generation = generation + 1, document_count = document_count - 1
        WHERE namespace = OLD.namespace;
    END
    """,
    f"""
    CREATE TRIGGER chunks_index_insert AFTER INSERT ON chunks FOR EACH ROW
    BEGIN
        {_SQLITE_CHUNK_NEW}
    END
    """,
    f"""
    CREATE TRIGGER chunks_index_delete AFTER DELETE ON chunks FOR EACH ROW
    BEGIN
        {_SQLITE_CHUNK_GONE}
    END
    """,
    f"""
    CREATE TRIGGER chunks_index_update AFTER UPDATE ON chunks FOR EACH ROW
    BEGIN
        {_SQLITE_CHUNK_GONE}
        {_SQLITE_CHUNK_NEW}
    END
    """,
]
SQLITE_DOWNGRADE = [
    "DROP TRIGGER IF EXISTS chunks_index_update",
    "DROP TRIGGER IF EXISTS chunks_index_delete",
    "DROP TRIGGER IF EXISTS chunks_index_insert",
    "DROP TRIGGER IF EXISTS documents_stats_delete",
    "DROP TRIGGER IF EXISTS documents_stats_update",
    "DROP TRIGGER IF EXISTS documents_stats_insert",
    "DROP TRIGGER IF EXISTS documents_immutable",
    "DROP TABLE IF EXISTS chunks_fts",
]

# -- PostgreSQL -----------------------------------------------------------------------------

POSTGRES_UPGRADE = [
    """
    ALTER TABLE chunks ADD COLUMN search tsvector
        GENERATED ALWAYS AS (to_tsvector('simple'::regconfig, terms)) STORED
    """,
    "CREATE INDEX ix_chunks_search ON chunks USING gin (search)",
    """
    CREATE FUNCTION contextstore_documents_immutable() RETURNS trigger
    LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
    BEGIN
        IF NEW.namespace IS DISTINCT FROM OLD.namespace
           OR NEW.created_at IS DISTINCT FROM OLD.created_at THEN
            RAISE EXCEPTION 'documents.namespace and documents.created_at are immutable (%)',
                OLD.source USING ERRCODE = '23000';
        END IF;
        RETURN NEW;
    END
    $$
    """,
    """
    CREATE TRIGGER documents_immutable BEFORE UPDATE ON documents
    FOR EACH ROW EXECUTE FUNCTION contextstore_documents_immutable()
    """,
    """
    CREATE FUNCTION contextstore_documents_stats() RETURNS trigger
    LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
    BEGIN
        IF TG_OP = 'INSERT' THEN
            INSERT INTO knowledge_stats AS s
                (namespace, generation, document_count, chunk_count, total_length)
            SELECT namespace, 1, count(*), 0, 0 FROM new_rows
            GROUP BY namespace ORDER BY namespace
            ON CONFLICT (namespace) DO UPDATE SET
                generation = s.generation + 1,
                document_count = s.document_count + EXCLUDED.document_count;
        ELSIF TG_OP = 'UPDATE' THEN
            UPDATE knowledge_stats s SET generation = s.generation + 1
            WHERE s.namespace IN (SELECT namespace FROM new_rows);
        ELSE
            UPDATE knowledge_stats s
            SET generation = s.generation + 1, document_count = s.document_count - gone.n
            FROM (SELECT namespace, count(*) AS n FROM old_rows GROUP BY namespace) gone
            WHERE s.namespace = gone.namespace;
        END IF;
        RETURN NULL;
    END
    $$
    """,
    """
    CREATE TRIGGER documents_stats_insert AFTER INSERT ON documents
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION contextstore_documents_stats()
    """,
    """
    CREATE TRIGGER documents_stats_update AFTER UPDATE ON documents
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION contextstore_documents_stats()
    """,
    """
    CREATE TRIGGER documents_stats_delete AFTER DELETE ON documents
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION contextstore_documents_stats()
    """,
    """
    CREATE FUNCTION contextstore_chunks_stats() RETURNS trigger
    LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
    BEGIN
        IF TG_OP IN ('DELETE', 'UPDATE') THEN
            UPDATE knowledge_stats s
            SET generation = s.generation + 1,
                chunk_count = s.chunk_count - gone.n,
                total_length = s.total_length - gone.l
            FROM (
                SELECT namespace, count(*) AS n, sum(length) AS l FROM old_rows
                GROUP BY namespace
            ) gone
            WHERE s.namespace = gone.namespace;
            UPDATE knowledge_terms t SET frequency = t.frequency - gone.n
            FROM (
                SELECT namespace, term, count(*) AS n
                FROM old_rows, jsonb_object_keys(term_counts) AS term
                GROUP BY namespace, term
            ) gone
            WHERE t.namespace = gone.namespace AND t.term = gone.term;
            DELETE FROM knowledge_terms t
            WHERE t.frequency <= 0 AND (t.namespace, t.term) IN (
                SELECT namespace, term FROM old_rows, jsonb_object_keys(term_counts) AS term
            );
        END IF;
        IF TG_OP IN ('INSERT', 'UPDATE') THEN
            INSERT INTO knowledge_stats AS s
                (namespace, generation, document_count, chunk_count, total_length)
            SELECT namespace, 1, 0, count(*), sum(length) FROM new_rows
            GROUP BY namespace ORDER BY namespace
            ON CONFLICT (namespace) DO UPDATE SET
                generation = s.generation + 1,
                chunk_count = s.chunk_count + EXCLUDED.chunk_count,
                total_length = s.total_length + EXCLUDED.total_length;
            INSERT INTO knowledge_terms AS t (namespace, term, frequency)
            SELECT namespace, term, count(*)
            FROM new_rows, jsonb_object_keys(term_counts) AS term
            GROUP BY namespace, term ORDER BY namespace, term
            ON CONFLICT (namespace, term) DO UPDATE SET
                frequency = t.frequency + EXCLUDED.frequency;
        END IF;
        RETURN NULL;
    END
    $$
    """,
    """
    CREATE TRIGGER chunks_stats_insert AFTER INSERT ON chunks
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION contextstore_chunks_stats()
    """,
    """
    CREATE TRIGGER chunks_stats_update AFTER UPDATE ON chunks
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION contextstore_chunks_stats()
    """,
    """
    CREATE TRIGGER chunks_stats_delete AFTER DELETE ON chunks
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION contextstore_chunks_stats()
    """,
]
POSTGRES_DOWNGRADE = [
    "DROP TRIGGER IF EXISTS chunks_stats_delete ON chunks",
    "DROP TRIGGER IF EXISTS chunks_stats_update ON chunks",
    "DROP TRIGGER IF EXISTS chunks_stats_insert ON chunks",
    "DROP FUNCTION IF EXISTS contextstore_chunks_stats()",
    "DROP TRIGGER IF EXISTS documents_stats_delete ON documents",
    "DROP TRIGGER IF EXISTS documents_stats_update ON documents",
    "DROP TRIGGER IF EXISTS documents_stats_insert ON documents",
    "DROP FUNCTION IF EXISTS contextstore_documents_stats()",
    "DROP TRIGGER IF EXISTS documents_immutable ON documents",
    "DROP FUNCTION IF EXISTS contextstore_documents_immutable()",
]


def _statements(postgres: list[str], sqlite: list[str]) -> list[str]:
    dialect = op.get_bind().dialect.name
    if dialect == "postgresql":
        return postgres
    if dialect == "sqlite":
        return sqlite
    raise NotImplementedError(
        f"contextstore migrations support sqlite and postgresql, not {dialect}"
    )


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    op.create_table(
        "documents",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("namespace", sa.String(128), nullable=False),
        sa.Column("source", sa.String(1024), nullable=False),
        sa.Column("metadata", JSON_VALUE, server_default=sa.text("'{}'"), nullable=False),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.Column(
            "created_at", UTCDateTime, server_default=sa.func.current_timestamp(), nullable=False
        ),
        sa.Column(
            "updated_at", UTCDateTime, server_default=sa.func.current_timestamp(), nullable=False
        ),
        sa.PrimaryKeyConstraint("id", name="pk_documents"),
        sa.UniqueConstraint("namespace", "source", name="uq_documents_namespace_source"),
    )
    op.create_table(
        "chunks",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("document_id", BIG_ID, nullable=False),
        sa.Column("namespace", sa.String(128), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("terms", sa.Text(), nullable=False),
        sa.Column("term_counts", JSON_VALUE, nullable=False),
        sa.Column("length", sa.Integer(), nullable=False),
        sa.Column("embedding", sa.LargeBinary(), nullable=True),
        sa.Column("embedder", sa.String(255), nullable=True),
        sa.Column("dimension", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_chunks"),
        sa.ForeignKeyConstraint(
            ["document_id"],
            ["documents.id"],
            name="fk_chunks_document_id_documents",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint("document_id", "position", name="uq_chunks_document_id_position"),
        sa.CheckConstraint(EMBEDDING_CHECK[dialect], name="ck_chunks_embedding"),
    )
    op.create_table(
        "knowledge_stats",
        sa.Column("namespace", sa.String(128), nullable=False),
        sa.Column("generation", sa.BigInteger(), nullable=False),
        sa.Column("document_count", sa.BigInteger(), nullable=False),
        sa.Column("chunk_count", sa.BigInteger(), nullable=False),
        sa.Column("total_length", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("namespace", name="pk_knowledge_stats"),
    )
    op.create_table(
        "knowledge_terms",
        sa.Column("namespace", sa.String(128), nullable=False),
        sa.Column("term", sa.String(64), nullable=False),
        sa.Column("frequency", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("namespace", "term", name="pk_knowledge_terms"),
    )
    for statement in _statements(POSTGRES_UPGRADE, SQLITE_UPGRADE):
        op.execute(statement)


def downgrade() -> None:
    for statement in _statements(POSTGRES_DOWNGRADE, SQLITE_DOWNGRADE):
        op.execute(statement)
    op.drop_table("knowledge_terms")
    op.drop_table("knowledge_stats")
    op.drop_table("chunks")
    op.drop_table("documents")
