"""The PostgreSQL role a service runs as: it owns nothing and holds grants only.

The owner of a table can switch its triggers off (``ALTER TABLE … DISABLE TRIGGER``), and a
superuser can skip them all (``SET session_replication_role = replica``): the audit is only
as strong as the role that can do neither. So migrations run as the owner, and the service
runs as a role granted what its work needs and nothing more: it reads every table, writes
lessons, scope keys, documents and metrics, and only reads ``lesson_events`` (the audit
triggers write there with their owner's rights, revision 0013) and ``alembic_version``.
See docs/decisions/0063.
"""

from __future__ import annotations

import re
from typing import Final

import sqlalchemy as sa

from contextstore.backends.sql.database import create_database_engine, translate_errors
from contextstore.backends.sql.dialects import dialect_of
from contextstore.errors import ValidationError

# A plain lower-case identifier: never quoted differently than it was typed.
_ROLE_NAME: Final = re.compile(r"[a-z_][a-z0-9_]{0,62}")
READ_ONLY_TABLES: Final = ("lesson_events", "alembic_version")


def service_role_grants(schema: str, role: str) -> list[str]:
    """The statements ``grant_service_role`` runs, in order."""
    read_only = ", ".join(f'"{schema}".{table}' for table in READ_ONLY_TABLES)
    return [
        f'GRANT USAGE ON SCHEMA "{schema}" TO {role}',
        f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "{schema}" TO {role}',
        f"REVOKE INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER ON {read_only} FROM {role}",
        f'GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA "{schema}" TO {role}',
    ]


def grant_service_role(database_url: str, role: str) -> list[str]:
    """Grant ``role`` what the service needs in the migrated schema of ``database_url`` (the
    first schema of its search path) and return the statements run.

    Refused (``ValidationError("role")``): a name that is not a plain lower-case identifier,
    a role that does not exist, a superuser, and a role that owns (or may act as the owner
    of) the schema or any table in it. Refused (``ValidationError("database_url")``): SQLite,
    where whoever can write the file is its owner, and a database never migrated.
    """
    if not _ROLE_NAME.fullmatch(role):
        raise ValidationError(
            "role", f"{role!r} must be a lower-case identifier (a-z, 0-9, _; 63 at most)"
        )
    engine = create_database_engine(database_url)
    try:
        if not dialect_of(engine).grants_roles:
            raise ValidationError(
                "database_url",
                "service roles are PostgreSQL's: a SQLite file is guarded by who may write it",
            )
        with translate_errors(engine.url), engine.begin() as connection:
            schema = connection.execute(sa.text("SELECT current_schema()")).scalar_one_or_none()
            exists = connection.execute(
                sa.text("SELECT to_regclass('lessons') IS NOT NULL")
            ).scalar_one()
            if schema is None or not exists:
                raise ValidationError(
                    "database_url", "has no contextstore tables: run 'contextstore db upgrade'"
                )
            _refuse_unsafe(connection, schema, role)
            statements = service_role_grants(schema, role)
            for statement in statements:
                connection.execute(sa.text(statement))
        return statements
    finally:
        engine.dispose()


def _refuse_unsafe(connection: sa.Connection, schema: str, role: str) -> None:
    found = connection.execute(
        sa.text("SELECT rolsuper FROM pg_roles WHERE rolname = :role"), {"role": role}
    ).first()
    if found is None:
        raise ValidationError(
            "role", f"no role {role!r}: create it first (CREATE ROLE {role} LOGIN PASSWORD …)"
        )
    if found.rolsuper:
        raise ValidationError("role", f"{role!r} is a superuser: it could switch triggers off")
    owned = connection.execute(
        sa.text(
            "SELECT n.nspname AS name FROM pg_namespace n "
            "WHERE n.nspname = :schema AND pg_has_role(:role, n.nspowner, 'MEMBER') "
            "UNION ALL SELECT c.relname FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = :schema AND pg_has_role(:role, c.relowner, 'MEMBER') "
            "LIMIT 1"
        ),
        {"schema": schema, "role": role},
    ).scalar_one_or_none()
    if owned is not None:
        raise ValidationError(
            "role",
            f"{role!r} owns or may act as the owner of {owned!r}: the service's role must own "
            "nothing (run migrations as the owner, the service as another role)",
        )
