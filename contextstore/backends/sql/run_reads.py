"""A run's SQL read: the lesson candidates and the knowledge generation in one statement.

An engine run needs both before it can decide anything: the candidates to match, the
generation to know whether a cached context is still current. Read separately they cost two
round trips on every run, hit or miss. ``LessonsAndKnowledge`` reads them with one statement
in autocommit (no BEGIN/COMMIT round trips): the candidate rows of
``repository.candidate_sql``, then ``UNION ALL`` one row holding the namespace's generation
(0 before its first document), told apart by its null ``entity_id`` (a lesson always has
one). So the generation comes back even when no lesson matches, and each half keeps its own
plan: the candidates start from ``ix_lesson_scopes_scope_key``, the generation is one
primary-key lookup.

It implements the engine's run-reads port (``contextstore.engine.ports.RunReads``);
``connect()`` hands it to an engine whose lessons and retriever are the store's own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import sqlalchemy as sa

from contextstore.backends.sql.database import tolerating_bytes, translate_errors
from contextstore.backends.sql.dialects import DIALECTS, dialect_of
from contextstore.backends.sql.direct import DirectStatement
from contextstore.backends.sql.knowledge import KnowledgeBase
from contextstore.backends.sql.repository import candidate_lessons
from contextstore.core.matching import Lesson, Scope, lookup_keys

__all__ = ["LessonsAndKnowledge", "split_rows"]

# The generation row: the candidate columns null, the generation last. Candidate rows carry
# a null generation, typed as a bigint where a UNION types each column from both halves
# (``Dialect.typed_null``: PostgreSQL).
_GENERATION: Final = (
    "SELECT NULL, NULL, NULL, NULL, NULL, NULL, COALESCE(("
    "SELECT generation FROM knowledge_stats WHERE namespace = :ns), 0)"
)
_JOINT: Final = {
    dialect.name: sa.text(
        dialect.candidate_sql(f", {dialect.typed_null('bigint')}") + " UNION ALL " + _GENERATION
    )
    for dialect in DIALECTS.values()
}


def split_rows(rows: Sequence[Sequence[Any]]) -> tuple[list[Lesson], int]:
    """(lessons, generation) from the rows of the joint statement."""
    generation = 0
    candidates: list[Sequence[Any]] = []
    for row in rows:
        if row[0] is None:
            generation = int(row[6])
        else:
            candidates.append(row[:6])  # the candidate columns only: no status, no generation
    return candidate_lessons(candidates), generation


class LessonsAndKnowledge:
    """The lessons of ``engine`` and the generation of ``knowledge``, read together.

    ``knowledge`` must live in ``engine``'s database (``connect()`` ensures it). A
    ``LessonSource`` too: ``candidates(scope)`` is the first half of the same read.
    """

    def __init__(self, engine: sa.Engine, knowledge: KnowledgeBase) -> None:
        self._engine = engine
        self._dialect = dialect_of(engine)
        self._statement = DirectStatement(engine, _JOINT[self._dialect.name])
        self.knowledge = knowledge

    def candidates(self, scope: Scope) -> list[Lesson]:
        """``LessonRepository.candidates``: active lessons sharing a key with ``scope``."""
        return self.candidates_with_generation(scope)[0]

    def candidates_read(self, keys: Sequence[str]) -> tuple[DirectStatement, dict[str, Any]]:
        """The joint statement and its values for ``keys`` (sorted lookup keys), as
        ``LessonRepository.candidates_read`` gives its own."""
        values = {"keys": self._dialect.keys_parameter(keys), "ns": self.knowledge.namespace}
        return self._statement, values

    def candidates_with_generation(self, scope: Scope) -> tuple[list[Lesson], int]:
        """(``LessonRepository.candidates(scope)``, ``knowledge.generation()``): one
        statement, one round trip, whatever the scope (an empty one matches no lesson)."""
        statement, values = self.candidates_read(sorted(lookup_keys(scope)))

        def select() -> Sequence[Any]:
            with translate_errors(self._engine.url):
                return statement.rows(values)

        # A lesson typed into SQLite as bytes that are not UTF-8 is skipped, as every lesson
        # reader does (``tolerating_bytes``), rather than failing the run.
        return split_rows(tolerating_bytes(self._engine, select))
