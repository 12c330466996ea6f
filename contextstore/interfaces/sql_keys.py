"""``SqlKeyStore``: API keys and the console secret in the shared SQL database.

The ``KeyStore`` a service uses when no key file is configured: every ``contextstore serve``
process on one database reads the same ``api_keys`` and ``service_secrets`` rows, so a key
added or revoked through any of them (or ``contextstore keys``) counts on all of them from
their next request. Each check is one primary-key read in autocommit (one round trip);
nothing is cached, which is what makes a revocation immediate everywhere
(docs/decisions/0074). Rows hold what a key file holds: the salted hash, never the key.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import cast

import sqlalchemy as sa

from contextstore.backends.sql.database import (
    autocommit,
    create_database_engine,
    migrate,
    translate_errors,
)
from contextstore.backends.sql.models import ApiKeyRow, ServiceSecretRow
from contextstore.backends.urls import mask_url
from contextstore.errors import NotFoundError
from contextstore.interfaces.apikeys import (
    SECRET_HEX_CHARS,
    FileKeyStore,
    KeyEntry,
    KeyStore,
    check_role,
    key_id_of,
    new_key,
)

CONSOLE_SECRET = "console"
"""The ``service_secrets`` row whose value signs console sessions."""

_KEYS = cast(sa.Table, ApiKeyRow.__table__)
_SECRETS = cast(sa.Table, ServiceSecretRow.__table__)
_FIND = sa.select(_KEYS).where(_KEYS.c.id == sa.bindparam("key_id"))


class SqlKeyStore:
    """The keys of the database at ``database_url``, migrated to head on first use."""

    blocking = True

    def __init__(self, database_url: str) -> None:
        self.database_url = database_url
        self.where = f"the database {mask_url(database_url)}"

    @cached_property
    def engine(self) -> sa.Engine:
        engine = create_database_engine(self.database_url)
        try:
            migrate(engine)
        except BaseException:
            engine.dispose()
            raise
        return engine

    @cached_property
    def reader(self) -> sa.Engine:
        """The same pool in autocommit: a check is its one statement, with no BEGIN and no
        ROLLBACK round trips around it."""
        return autocommit(self.engine)

    def find(self, key_id: str) -> KeyEntry | None:
        with translate_errors(), self.reader.connect() as connection:
            row = connection.execute(_FIND, {"key_id": key_id}).first()
        return None if row is None else _entry(row)

    def entries(self) -> list[KeyEntry]:
        query = sa.select(_KEYS).order_by(_KEYS.c.created_at, _KEYS.c.id)
        with translate_errors(), self.reader.connect() as connection:
            return [_entry(row) for row in connection.execute(query)]

    def add(self, namespace: str, role: str, *, label: str = "") -> tuple[str, KeyEntry]:
        key, entry = new_key(namespace, role, label=label)
        row = {
            "id": entry.id,
            "namespace": entry.namespace,
            "role": entry.role,
            "salt": entry.salt,
            "hash": entry.hash,
            "created_at": datetime.fromisoformat(entry.created_at),
            "label": entry.label,
        }
        with translate_errors(), self.engine.begin() as connection:
            connection.execute(sa.insert(_KEYS), row)
        return key, entry

    def revoke(self, id_or_key: str) -> KeyEntry:
        key_id = key_id_of(id_or_key)
        with translate_errors(), self.engine.begin() as connection:
            row = connection.execute(_FIND, {"key_id": key_id}).first()
            if row is None:
                raise NotFoundError(f"no key with id {key_id} in {self.where}")
            connection.execute(sa.delete(_KEYS).where(_KEYS.c.id == key_id))
        return _entry(row)

    def console_secret(self) -> bytes:
        """The stored secret; the first process to ask makes it (the primary key lets one
        insert win, and every process then reads the winner's)."""
        query = sa.select(_SECRETS.c.value).where(_SECRETS.c.name == CONSOLE_SECRET)
        with translate_errors(), self.engine.connect() as connection:
            found = connection.execute(query).scalar()
        if found is None:
            made = {
                "name": CONSOLE_SECRET,
                "value": secrets.token_hex(SECRET_HEX_CHARS // 2),
                "created_at": datetime.now(UTC),
            }
            try:
                with self.engine.begin() as connection:
                    connection.execute(sa.insert(_SECRETS), made)
            except sa.exc.IntegrityError:
                pass  # another process made it first: read theirs
            with translate_errors(), self.engine.connect() as connection:
                found = connection.execute(query).scalar_one()
        return str(found).encode("ascii")

    def close(self) -> None:
        if "engine" in self.__dict__:
            self.engine.dispose()


def _entry(row: sa.Row[tuple[object, ...]]) -> KeyEntry:
    created: datetime = row.created_at
    return KeyEntry(
        id=row.id,
        namespace=row.namespace,
        role=check_role(row.role),
        salt=row.salt,
        hash=row.hash,
        created_at=created.isoformat(timespec="seconds"),
        label=row.label,
    )


def key_store(keys_file: Path | None, database_url: str, *, required: bool = False) -> KeyStore:
    """The key file when one is configured (one node), else the shared database's keys."""
    if keys_file is not None:
        return FileKeyStore(keys_file, required=required)
    return SqlKeyStore(database_url)
