"""The PostgreSQL schemas the tests get are the schema a migration makes.

``database_url`` replays, into each test's empty schema, the statements one real ``migrate``
sent earlier in the run (``postgres_migration_script``). This test migrates one schema for
real, replays into another, and compares everything the catalog says about the two, with
each schema's name read as the same.
"""

from __future__ import annotations

import uuid

import sqlalchemy as sa

from contextstore.backends.sql.database import head_revision, migrate
from tests.backends.sql.conftest import POSTGRES_ONLY, replay_migration, schema_url

# Each query describes one kind of object of the current schema, in a fixed order.
CATALOG = {
    "columns": """
        SELECT c.relname, c.relkind, a.attname, format_type(a.atttypid, a.atttypmod),
               a.attnotnull, pg_get_expr(d.adbin, d.adrelid), a.attgenerated, a.attcollation
        FROM pg_class c
        JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
        LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
        WHERE c.relnamespace = current_schema()::regnamespace ORDER BY 1, 3""",
    "relations": """
        SELECT relname, relkind, reloptions::text, relacl::text, relpersistence, relhastriggers,
               reltuples
        FROM pg_class WHERE relnamespace = current_schema()::regnamespace ORDER BY 1""",
    "constraints": """
        SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid)
        FROM pg_constraint WHERE connamespace = current_schema()::regnamespace ORDER BY 1, 2""",
    "indexes": """
        SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema()
        ORDER BY 1""",
    "triggers": """
        SELECT tgname, tgenabled, pg_get_triggerdef(t.oid) FROM pg_trigger t
        JOIN pg_class c ON c.oid = t.tgrelid
        WHERE c.relnamespace = current_schema()::regnamespace AND NOT tgisinternal ORDER BY 1""",
    "functions": """
        SELECT proname, prosecdef, proconfig::text, pg_get_functiondef(oid) FROM pg_proc
        WHERE pronamespace = current_schema()::regnamespace ORDER BY 1""",
    "revision": "SELECT version_num FROM alembic_version",
}


def catalog(url: str, schema: str) -> dict[str, list[tuple[str, ...]]]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as connection:
            return {
                kind: [
                    tuple(str(value).replace(schema, "<schema>") for value in row)
                    for row in connection.execute(sa.text(query))
                ]
                for kind, query in CATALOG.items()
            }
    finally:
        engine.dispose()


@POSTGRES_ONLY
def test_a_replayed_migration_makes_the_schema_a_migration_makes(
    empty_database_url: str, postgres_server_url: str, postgres_migration_script: str
) -> None:
    migrate(empty_database_url)
    options = str(sa.make_url(empty_database_url).query["options"]).split()
    (migrated_schema,) = (o.partition("=")[2] for o in options if o.startswith("-csearch_path="))
    schema = f"r_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(postgres_server_url)
    with admin.begin() as connection:
        connection.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    try:
        replayed = schema_url(postgres_server_url, schema)
        replay_migration(replayed, postgres_migration_script)
        expected = catalog(empty_database_url, migrated_schema)
        assert expected["revision"] == [(head_revision(),)]
        assert len(expected["functions"]) >= 12 and len(expected["triggers"]) >= 20
        assert catalog(replayed, schema) == expected
    finally:
        with admin.begin() as connection:
            connection.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()
