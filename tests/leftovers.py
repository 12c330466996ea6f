"""What a test run left behind in the shared Redis and PostgreSQL servers, checked at its end.

Other runs (other developers, CI) share both servers at the same time, so the check looks
only at what carries this run's token (``RUN_TOKEN``): every namespace and database a test
names through ``unique_name`` holds it, and nothing another run makes can.
"""

from __future__ import annotations

import os
import uuid
from typing import Final

# This process's id and a random suffix: no other live run has it, nor one that ran before
# with a recycled id.
RUN_TOKEN: Final = f"r{os.getpid()}{uuid.uuid4().hex[:4]}"
# Schemas left in the run's own database when it was dropped (found by its fixture).
SCHEMAS_LEFT: list[str] = []
# Each of this run's Redis keys, by the test after which it was first seen: a leftover is
# reported with the test that most likely wrote it.
FIRST_SEEN: dict[str, str] = {}
BUILT_IN_SCHEMAS: Final = ("public", "information_schema")


def unique_name(prefix: str) -> str:
    """A name no other test (or test run) uses, carrying this run's token."""
    return f"{prefix}_{RUN_TOKEN}_{uuid.uuid4().hex[:8]}"


def redis_keys_left(url: str) -> list[str]:
    """The keys of this run's namespaces still in Redis, sorted."""
    import redis

    client = redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=30)
    try:
        found = client.scan_iter(match=f"cs:{{*_{RUN_TOKEN}_*}}:*", count=1000)
        return sorted(key.decode("utf-8", "replace") for key in found)
    finally:
        client.close()


def user_schemas(url: str) -> list[str]:
    """The schemas in the database at ``url`` that neither PostgreSQL nor a new database has."""
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    try:
        with engine.connect() as connection:
            names = connection.execute(
                sa.text("SELECT nspname FROM pg_namespace WHERE nspname NOT LIKE 'pg\\_%'")
            ).scalars()
            return sorted(name for name in names if name not in BUILT_IN_SCHEMAS)
    finally:
        engine.dispose()


def postgres_databases_left(url: str) -> list[str]:
    """This run's databases still on the PostgreSQL server at ``url``, sorted."""
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    try:
        with engine.connect() as connection:
            names = connection.execute(
                sa.text("SELECT datname FROM pg_database WHERE strpos(datname, :token) > 0"),
                {"token": f"_{RUN_TOKEN}_"},
            ).scalars()
            return sorted(names)
    finally:
        engine.dispose()


def note_new_keys(redis_url: str, test: str) -> None:
    """Remember the keys of this run not seen before as first seen after ``test``."""
    for key in redis_keys_left(redis_url):
        FIRST_SEEN.setdefault(key, test)


def leftovers(redis_url: str | None, postgres_url: str | None) -> list[str]:
    """One line per thing this run left behind (empty: it left nothing)."""
    keys = redis_keys_left(redis_url) if redis_url else []
    lines = [f"Redis key {key} (first seen after {FIRST_SEEN.get(key, '?')})" for key in keys]
    if postgres_url:
        lines += [f"PostgreSQL database {name}" for name in postgres_databases_left(postgres_url)]
    lines += [f"PostgreSQL schema {name} (in the run's database)" for name in SCHEMAS_LEFT]
    return lines
