"""Alembic environment for contextstore.

Two ways in:
- From code (``backends.sql.database.migrate``): the caller passes an open connection in
  ``config.attributes["connection"]``, already inside a transaction holding the migration lock.
- From the command line (``alembic upgrade head`` in the repository root): the URL comes from
  ``-x url=…``, else ``CONTEXTSTORE_DATABASE_URL``, else ``sqlalchemy.url`` in alembic.ini,
  else the default SQLite file ``contextstore.db`` in the working directory.
"""

from __future__ import annotations

import os
import warnings
from logging.config import fileConfig

import sqlalchemy as sa
from alembic import context

from contextstore.backends.sql.database import create_database_engine
from contextstore.backends.sql.dialects.sqlite import SQLITE_ACTOR_TABLE
from contextstore.backends.sql.models import Base
from contextstore.config import DEFAULT_DATABASE_URL, ENV_DATABASE_URL

config = context.config
target_metadata = Base.metadata

# From the command line, alembic.ini's logging sections make `alembic upgrade head` say what
# it ran ("Running upgrade 0001 -> 0002"). From code there is no file, and the application's
# own logging is left alone.
if config.config_file_name is not None:
    fileConfig(config.config_file_name, disable_existing_loggers=False)

# Objects the migrations make for one dialect only, which the models cannot describe:
# SQLite's FTS5 table (and the shadow tables it keeps), PostgreSQL's generated tsvector
# column with its GIN index (and, with pgvector, the generated vector column with its HNSW
# indexes, 0018), and SQLite's index on an expression (the day of recorded_at,
# 0008). Comparing them would report drift that is not there.
_DIALECT_ONLY = frozenset(
    {
        "chunks_fts",
        "chunks_fts_config",
        "chunks_fts_data",
        "chunks_fts_docsize",
        "chunks_fts_idx",
        "search",
        "ix_chunks_search",
        "ix_query_metrics_day_latency",
        "embedding_vector",
        *(f"ix_chunks_embedding_{d}" for d in (256, 384, 512, 768, 1024, 1536)),
    }
)


# SQLAlchemy cannot reflect an index on an expression and says so while comparing; that one
# is listed above, so the comparison is right without it.
warnings.filterwarnings(
    "ignore",
    message="Skipped unsupported reflection of expression-based index ix_query_metrics_day_latency",
    category=sa.exc.SAWarning,
)


def _include_object(
    _object: object, name: str | None, _type: str, reflected: bool, compare_to: object
) -> bool:
    return not (reflected and compare_to is None and name in _DIALECT_ONLY)


def _include_name(name: str | None, type_: str, _parents: object) -> bool:
    # The SQLite audit-actor table is plumbing for the triggers, not a model (see 0003).
    return not (type_ == "table" and name == SQLITE_ACTOR_TABLE)


def _configure(connection: sa.Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        compare_type=True,
        include_object=_include_object,
        include_name=_include_name,
        # SQLite cannot ALTER most things; batch mode rebuilds tables for future revisions.
        render_as_batch=connection.dialect.name == "sqlite",
    )


def _url() -> str:
    return (
        context.get_x_argument(as_dictionary=True).get("url")
        or os.environ.get(ENV_DATABASE_URL)
        or config.get_main_option("sqlalchemy.url")
        or DEFAULT_DATABASE_URL
    )


def run_migrations_offline() -> None:
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = create_database_engine(_url())
    try:
        with engine.connect() as connection:
            _configure(connection)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
