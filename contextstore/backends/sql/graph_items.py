"""``GraphItems``: the items of a LangGraph store in SQL, shared by every process.

Framework-free: a LangGraph namespace is a tuple of labels (``path`` here), an item a JSON
object under a string key; ``contextstore.interfaces.integrations.langgraph`` maps LangGraph's
operations onto ``GraphItemSession``. Each ``GraphItems.transact`` is one transaction, run
again from the start after a conflict with a concurrent writer (a key or namespace made or
removed under it), so a batch of operations is atomic and sees one state.

Order: ``search`` returns items by namespace (label by label, in code point order, as
``list_namespaces`` sorts them), then by key, in the order each key was first put
(``graph_items.id``; an update keeps it). A namespace exists while it holds an item.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, TypeVar, cast

import sqlalchemy as sa
from sqlalchemy import exc
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.orm import Session
from sqlalchemy.util import greenlet_spawn

from contextstore.backends.sql.bridge import async_sleep
from contextstore.backends.sql.database import read_only, translate_errors
from contextstore.backends.sql.dialects import dialect_of
from contextstore.backends.sql.models import (
    GRAPH_PATH_LENGTH,
    GraphItemRow,
    GraphNamespaceRow,
)
from contextstore.backends.sql.transactions import utc_now
from contextstore.core.validation import check_count, check_optional_count, storable_text
from contextstore.errors import ValidationError

R = TypeVar("R")
Path = tuple[str, ...]

NAMESPACES: Final = cast(sa.Table, GraphNamespaceRow.__table__)
ITEMS: Final = cast(sa.Table, GraphItemRow.__table__)
# Conflicts with a concurrent transaction: a unique or foreign key violation (a namespace
# made or removed meanwhile), a serialization failure, a deadlock.
CONFLICTS: Final = ("23505", "23503", "40001", "40P01")
ATTEMPTS: Final = 8
MAX_KEY_LENGTH: Final = 1024


@dataclass(frozen=True)
class StoredItem:
    """One item as stored: its namespace ``path``, ``key``, ``value`` and timestamps (UTC)."""

    path: Path
    key: str
    value: dict[str, Any]
    created_at: datetime
    updated_at: datetime


def check_path(path: object, field: str = "namespace", *, empty: bool = False) -> Path:
    """A namespace (``ValidationError(field)`` otherwise): a tuple of non-empty strings
    without ``.`` or NUL, at most ``GRAPH_PATH_LENGTH`` characters joined; ``()`` only
    where ``empty`` (a prefix matching every namespace)."""
    if not isinstance(path, tuple) or (not path and not empty):
        raise ValidationError(field, "must be a non-empty tuple of strings")
    for label in path:
        storable_text(label, field)
        if not label or "." in label:
            raise ValidationError(field, f"label {label!r} must be non-empty and hold no '.'")
    if len(".".join(path)) > GRAPH_PATH_LENGTH:
        raise ValidationError(field, f"must be at most {GRAPH_PATH_LENGTH} characters joined")
    return path


def check_key(key: object) -> str:
    storable_text(key, "key")
    if len(cast(str, key)) > MAX_KEY_LENGTH:
        raise ValidationError("key", f"must be at most {MAX_KEY_LENGTH} characters")
    return cast(str, key)


def check_value(value: object) -> dict[str, Any]:
    """A JSON object every database stores as it is (no NaN, no NUL, valid Unicode)."""
    if not isinstance(value, dict):
        raise ValidationError("value", f"must be a dict, got {type(value).__name__}")
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as error:
        raise ValidationError("value", f"must be JSON-serialisable ({error})") from error
    storable_text(text.replace("\\u0000", "\x00"), "value")
    return value


class GraphItemSession:
    """The reads and writes of one transaction of ``GraphItems``."""

    def __init__(self, session: Session, namespace: str, now: datetime) -> None:
        self._session = session
        self._namespace = namespace
        self._now = now
        self._dialect = dialect_of(session.get_bind())

    def get(self, path: Path, key: str) -> StoredItem | None:
        query = self._items().where(NAMESPACES.c.path == ".".join(path), ITEMS.c.key == key)
        row = self._session.execute(query).first()
        return None if row is None else _item(row)

    def search(self, prefix: Path) -> list[StoredItem]:
        """The items of every namespace starting with ``prefix``, in the store's order."""
        query = self._items().order_by(ITEMS.c.id)
        if prefix:
            # substr, not LIKE: SQLite's LIKE ignores case.
            below = ".".join(prefix) + "."
            query = query.where(
                sa.or_(
                    NAMESPACES.c.path == below[:-1],
                    sa.func.substr(NAMESPACES.c.path, 1, len(below)) == below,
                )
            )
        items = [_item(row) for row in self._session.execute(query)]
        # Label by label in code point order (joined paths would not sort so: "a-b" < "a.b"),
        # then by when each key was first put (a stable sort keeps that).
        items.sort(key=lambda item: item.path)
        return items

    def paths(self) -> list[Path]:
        """Every namespace holding an item, as label tuples, unordered."""
        query = sa.select(NAMESPACES.c.path).where(NAMESPACES.c.namespace == self._namespace)
        return [tuple(path.split(".")) for path in self._session.scalars(query)]

    def put(self, path: Path, key: str, value: dict[str, Any]) -> None:
        """Insert or replace; a replaced item keeps its place and ``created_at``."""
        namespace_id = self._namespace_id(path)
        insert = self._dialect.insert()(ITEMS).values(
            namespace_id=namespace_id,
            key=key,
            value=value,
            created_at=self._now,
            updated_at=self._now,
        )
        self._session.execute(
            insert.on_conflict_do_update(
                index_elements=[ITEMS.c.namespace_id, ITEMS.c.key],
                set_={"value": insert.excluded.value, "updated_at": insert.excluded.updated_at},
            )
        )

    def delete(self, path: Path, key: str) -> None:
        """Remove the item if there is one, and its namespace with its last item."""
        # The row lock serialises deleters: two deleting the last two items would each see
        # the other's item and both keep the emptied namespace.
        found = self._session.scalar(
            sa.select(NAMESPACES.c.id)
            .where(NAMESPACES.c.namespace == self._namespace, NAMESPACES.c.path == ".".join(path))
            .with_for_update()
        )
        if found is None:
            return
        self._session.execute(
            sa.delete(ITEMS).where(ITEMS.c.namespace_id == found, ITEMS.c.key == key)
        )
        remaining = sa.select(ITEMS.c.id).where(ITEMS.c.namespace_id == found).exists()
        self._session.execute(sa.delete(NAMESPACES).where(NAMESPACES.c.id == found, ~remaining))

    def _namespace_id(self, path: Path) -> int:
        joined = ".".join(path)
        query = sa.select(NAMESPACES.c.id).where(
            NAMESPACES.c.namespace == self._namespace, NAMESPACES.c.path == joined
        )
        found = self._session.scalar(query)
        if found is None:
            self._session.execute(
                self._dialect.insert()(NAMESPACES)
                .values(namespace=self._namespace, path=joined)
                .on_conflict_do_nothing()
            )
            found = self._session.scalar(query)
        return int(cast(int, found))

    def _items(self) -> sa.Select[Any]:
        return (
            sa.select(
                NAMESPACES.c.path,
                ITEMS.c.key,
                ITEMS.c.value,
                ITEMS.c.created_at,
                ITEMS.c.updated_at,
            )
            .select_from(ITEMS.join(NAMESPACES, ITEMS.c.namespace_id == NAMESPACES.c.id))
            .where(NAMESPACES.c.namespace == self._namespace)
        )


def _item(row: sa.Row[Any]) -> StoredItem:
    return StoredItem(
        path=tuple(row.path.split(".")),
        key=row.key,
        value=row.value,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


class GraphItems:
    """The LangGraph items of one contextstore ``namespace`` in the database of ``engine``."""

    def __init__(
        self,
        engine: sa.Engine,
        namespace: str,
        *,
        clock: Callable[[], datetime] = utc_now,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._engine = engine
        self._namespace = namespace
        self._clock = clock
        self._sleep = sleep

    @property
    def namespace(self) -> str:
        return self._namespace

    def transact(self, work: Callable[[GraphItemSession], R], *, writes: bool) -> R:
        """``work`` in one transaction (a read-only one unless ``writes``), run again from
        the start after a conflict with a concurrent writer."""
        for attempt in range(1, ATTEMPTS + 1):
            try:
                with self._session(writes) as session:
                    return work(GraphItemSession(session, self._namespace, self._clock()))
            except _Conflict:
                if attempt == ATTEMPTS:
                    raise
                self._sleep(0.01 * attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    @contextmanager
    def _session(self, writes: bool) -> Iterator[Session]:
        engine = self._engine if writes else read_only(self._engine)
        with (
            translate_errors(engine.url),
            _conflicts(),
            Session(engine) as session,
            session.begin(),
        ):
            yield session


class _Conflict(ValidationError):
    """A conflict with a concurrent writer (retried by ``transact``)."""


@contextmanager
def _conflicts() -> Iterator[None]:
    try:
        yield
    except exc.DBAPIError as error:
        if getattr(error.orig, "sqlstate", None) in CONFLICTS:
            message = f"conflicts with a concurrent writer: {error.orig}"
            raise _Conflict("record", message) from error
        raise


def page(limit: object, offset: object) -> tuple[int | None, int]:
    """A search's or a listing's ``limit`` (``None``: all) and ``offset``, checked."""
    return check_optional_count(limit, "limit"), check_count(offset, "offset")


__all__: Sequence[str] = (
    "AsyncGraphItems",
    "GraphItemSession",
    "GraphItems",
    "StoredItem",
    "check_key",
    "check_path",
    "check_value",
    "page",
)


class AsyncGraphItems:
    """``GraphItems`` awaited: the same transactions on the ``AsyncEngine``'s sync engine,
    through SQLAlchemy's greenlet bridge; ``ready`` (the store's migration) awaited first."""

    def __init__(
        self,
        engine: AsyncEngine,
        namespace: str,
        *,
        ready: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._items = GraphItems(engine.sync_engine, namespace, sleep=async_sleep)
        self._ready = ready

    @property
    def namespace(self) -> str:
        return self._items.namespace

    async def transact(self, work: Callable[[GraphItemSession], R], *, writes: bool) -> R:
        if self._ready is not None:
            await self._ready()
        result: R = await greenlet_spawn(self._items.transact, work, writes=writes)
        return result
