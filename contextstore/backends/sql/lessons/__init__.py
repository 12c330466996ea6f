"""Lessons in SQL: the repository (``repository``), its statements and row decoding
(``queries``), the candidate read of a run (``candidates``) and import planning
(``imports``)."""

from __future__ import annotations

from contextstore.backends.sql.lessons.candidates import (
    candidate_lessons,
    candidate_sql,
    keys_parameter,
)
from contextstore.backends.sql.lessons.imports import ImportSummary
from contextstore.backends.sql.lessons.repository import UNSET, LessonEvent, LessonRepository

__all__ = [
    "UNSET",
    "ImportSummary",
    "LessonEvent",
    "LessonRepository",
    "candidate_lessons",
    "candidate_sql",
    "keys_parameter",
]
