"""A store on a temporary SQLite file holding two runbooks and one lesson."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from contextstore import LessonRecord, Store, connect

FAILOVER = "Fail over Postgres by promoting the replica with the least lag."
BACKUP = "Postgres backups run nightly; restore one to a scratch replica."


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'integrations.db'}"


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    with connect(database_url=url, redis_url="") as opened:
        opened.knowledge.add(FAILOVER, "runbooks/failover.md", {"team": "db", "tier": 1})
        opened.knowledge.add(BACKUP, "runbooks/backup.md", {"team": "ops", "tier": 2})
        opened.lessons.add(
            LessonRecord("ops.lag", "Check replica lag first.", "critical", "active", ("tag:ops",))
        )
        yield opened


# Both databases for the tests of the LangGraph store (tests/backends/sql's fixtures).
from tests.backends.sql.conftest import database_url, empty_database_url  # noqa: E402, F401
