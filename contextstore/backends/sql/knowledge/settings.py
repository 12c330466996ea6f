"""A namespace's analyzer and embedder, stored in ``knowledge_settings`` so every process agrees.

Precedence (docs/decisions/0085-namespace-analyzer-and-embedder-in-sql.md):

* a namespace with a row is analysed and embedded as the row says, whatever the process;
* a process that asks for something else (``KnowledgeBase(analyzer=…, embed_fn=…)``, the
  ``engine.retrieval.analyzer`` / ``engine.retrieval.embedder`` settings, or the older
  ``engine.retrieval.embeddings``) gets one ``ValidationError`` naming the field, on its first
  search or write, and nothing is written;
* a namespace without a row uses the process's configuration (``simple``, no embedder unless
  asked), as before settings were stored; ``configure`` writes the row.

``Configuration`` resolves the two into what a knowledge base uses (``Active``) and keeps it
with the row's ``version``: a search that read another version plans again.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, cast

import sqlalchemy as sa

from contextstore.backends.sql.dialects import dialect_of
from contextstore.backends.sql.models import KnowledgeSettingsRow
from contextstore.core.analyzers import ANALYZER_NAMES, Analyzer, analyzer_named
from contextstore.core.embedding import EmbedFn
from contextstore.core.knowledge import embedder_name
from contextstore.errors import ValidationError

__all__ = [
    "SETTINGS",
    "UNCHANGED",
    "Active",
    "Configuration",
    "StoredSettings",
    "Unchanged",
    "build_embedder",
    "check_analyzer",
    "check_dimension",
    "check_embedder",
    "read_settings",
    "settings_version_column",
    "write_settings",
]

SETTINGS: Final = cast(sa.Table, KnowledgeSettingsRow.__table__)
EMBEDDER_CHOICES: Final = "hashing, wordllama, openai:<model>, none"


class Unchanged(enum.Enum):
    """``configure``'s default embedder: keep the namespace's (``None`` means lexical only)."""

    UNCHANGED = "unchanged"


UNCHANGED: Final = Unchanged.UNCHANGED


@dataclass(frozen=True)
class StoredSettings:
    """A ``knowledge_settings`` row; ``version`` 0 stands for "no row"."""

    analyzer: str
    embedder: str | None
    dimension: int | None
    version: int


@dataclass(frozen=True)
class Active:
    """What a knowledge base analyses and embeds with, and the row version it came from."""

    analyzer: Analyzer
    embed_fn: EmbedFn | None
    embedder: str | None  # the name recorded in each chunk's ``embedder`` column
    registry_name: str | None  # the name ``knowledge_settings`` records
    dimension: int | None
    version: int


def check_analyzer(name: object) -> str:
    """The analyzer's canonical name; ``ValidationError("analyzer")`` for any other."""
    if not isinstance(name, str):
        raise ValidationError("analyzer", f"must be one of {', '.join(ANALYZER_NAMES)}")
    return analyzer_named(name).name


def check_embedder(name: object) -> str | None:
    """The embedder's canonical registry name (``None`` for ``none``); ``ValidationError
    ("embedder")`` naming the choices for anything else. Builds nothing."""
    if name is None:
        return None
    if not isinstance(name, str):
        raise ValidationError("embedder", f"must be one of {EMBEDDER_CHOICES}")
    cleaned = name.strip()
    lowered = cleaned.lower()
    if lowered == "none":
        return None
    if lowered in ("hashing", "wordllama"):
        return lowered
    model = cleaned[len("openai:") :].strip() if lowered.startswith("openai:") else ""
    if model and len(model) <= 240 and model.isprintable():
        return f"openai:{model}"
    raise ValidationError(
        "embedder", f"unknown embedder {name!r}; expected one of {EMBEDDER_CHOICES}"
    )


def read_settings(connection: sa.Connection, namespace: str) -> StoredSettings | None:
    """The namespace's row, or ``None`` when it has never been configured."""
    row = connection.execute(
        sa.select(
            SETTINGS.c.analyzer, SETTINGS.c.embedder, SETTINGS.c.dimension, SETTINGS.c.version
        ).where(SETTINGS.c.namespace == namespace)
    ).first()
    if row is None:
        return None
    return StoredSettings(str(row[0]), row[1], None if row[2] is None else int(row[2]), int(row[3]))


def settings_version_column(namespace: sa.BindParameter[Any]) -> sa.ColumnElement[Any]:
    """The namespace's settings version as a scalar subquery (null: no row), so a search
    statement reads it in the same snapshot as the index it searches."""
    return sa.select(SETTINGS.c.version).where(SETTINGS.c.namespace == namespace).scalar_subquery()


def write_settings(
    connection: sa.Connection,
    namespace: str,
    analyzer: str,
    embedder: str | None,
    dimension: int | None,
    now: datetime,
) -> int:
    """Insert or replace the namespace's row, one version on; returns the new version."""
    insert = dialect_of(connection).insert()
    values = {"analyzer": analyzer, "embedder": embedder, "dimension": dimension, "updated_at": now}
    statement = (
        insert(SETTINGS)
        .values(namespace=namespace, version=1, **values)
        .on_conflict_do_update(
            index_elements=[SETTINGS.c.namespace],
            set_={**values, "version": SETTINGS.c.version + 1},
        )
        .returning(SETTINGS.c.version)
    )
    return int(connection.execute(statement).scalar_one())


class Configuration:
    """One knowledge base's view of its namespace's settings: what the process asked for,
    and what it resolved the stored row to (kept until the row's version changes).

    ``requested_analyzer`` / ``requested_embedder`` are ``None`` when the process did not ask
    (it follows the namespace). ``embed_fn`` is an embedder object the process passed; it is
    used when its ``registry_name`` is the namespace's. ``build`` turns a registry name into
    an embedder (``contextstore.backends.embedders.embedder_named``).
    """

    def __init__(
        self,
        namespace: str,
        *,
        requested_analyzer: str | None,
        requested_embedder: str | None,
        embed_fn: EmbedFn | None,
        build: Callable[[str], EmbedFn | None],
    ) -> None:
        self.namespace = namespace
        self.requested_analyzer = requested_analyzer
        self.requested_embedder = requested_embedder
        self._embed_fn = embed_fn
        self._build = build
        self._lock = threading.Lock()
        self._active: Active | None = None
        self._built: dict[str, EmbedFn | None] = {}

    @property
    def active(self) -> Active | None:
        """The last resolution (``None`` before the first read of the row)."""
        return self._active

    def resolve(self, stored: StoredSettings | None) -> Active:
        """What to use for the namespace's row ``stored`` (``None``: no row); raises
        ``ValidationError`` naming the field the process asked for differently."""
        version = 0 if stored is None else stored.version
        with self._lock:
            active = self._active
            if active is not None and active.version == version:
                return active
        active = self._resolve(stored)
        with self._lock:
            self._active = active
        return active

    def _resolve(self, stored: StoredSettings | None) -> Active:
        if stored is None:
            analyzer = self.requested_analyzer or "simple"
            if self._embed_fn is not None:
                name = _registry_name(self._embed_fn)
                return _active(analyzer, self._embed_fn, name, None, 0)
            wanted = self.requested_embedder
            return _active(analyzer, self._embedder(wanted), wanted, None, 0)
        where = f"namespace {self.namespace!r} is configured with"
        change = "change it with `contextstore docs configure` or leave the process setting unset"
        if self.requested_analyzer is not None and self.requested_analyzer != stored.analyzer:
            raise ValidationError(
                "analyzer",
                f"{where} analyzer {stored.analyzer!r}, this process asks for "
                f"{self.requested_analyzer!r}; {change}",
            )
        asked = self.requested_embedder
        given = None if self._embed_fn is None else _registry_name(self._embed_fn)
        for wanted in (asked, given):
            if wanted is not None and wanted != stored.embedder:
                raise ValidationError(
                    "embedder",
                    f"{where} embedder {stored.embedder or 'none'!r}, this process asks for "
                    f"{wanted!r}; {change}",
                )
        dim = getattr(self._embed_fn, "_dim", None) if self._embed_fn is not None else None
        if isinstance(dim, int) and stored.dimension is not None and dim != stored.dimension:
            raise ValidationError(
                "embedder",
                f"{where} {stored.dimension}-dimension vectors of {stored.embedder!r}, this "
                f"process's embedder makes {dim}; {change}",
            )
        if stored.embedder is None:
            embed_fn = None
        elif self._embed_fn is not None:
            embed_fn = self._embed_fn
        else:
            embed_fn = self._embedder(stored.embedder)
        return _active(stored.analyzer, embed_fn, stored.embedder, stored.dimension, stored.version)

    def _embedder(self, name: str | None) -> EmbedFn | None:
        if name is None:
            return None
        if name not in self._built:
            self._built[name] = self._build(name)
        return self._built[name]


def _registry_name(embed_fn: EmbedFn) -> str:
    name = getattr(embed_fn, "registry_name", None)
    return name if isinstance(name, str) and name else embedder_name(embed_fn)


def _active(
    analyzer: str,
    embed_fn: EmbedFn | None,
    registry_name: str | None,
    dimension: int | None,
    version: int,
) -> Active:
    return Active(
        analyzer=analyzer_named(analyzer),
        embed_fn=embed_fn,
        embedder=None if embed_fn is None else embedder_name(embed_fn),
        registry_name=None if embed_fn is None else registry_name,
        dimension=dimension,
        version=version,
    )


def build_embedder(name: str) -> EmbedFn | None:
    """The embedder a registry name stands for (``contextstore.backends.embedders``)."""
    from contextstore.backends.embedders import embedder_named

    return embedder_named(name)


def check_dimension(vectors: Sequence[Any], active: Active, namespace: str) -> None:
    """Refuse vectors whose length is not the namespace's recorded dimension."""
    if active.dimension is None:
        return
    for vector in vectors:
        if vector is not None and int(vector.shape[0]) != active.dimension:
            raise ValidationError(
                "embedder",
                f"{active.registry_name} returned {int(vector.shape[0])}-dimension vectors; "
                f"namespace {namespace!r} records {active.dimension} dimensions",
            )
