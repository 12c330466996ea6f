"""What every section gets: the run's size settings, services, status line and shared data."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import sqlalchemy as sa

from benchmarks import workload
from benchmarks.services import Services


@dataclass
class Bench:
    quick: bool
    services: Services
    say: Callable[[str], None]  # replaces the status line under the progress bar
    notes: list[str] = field(default_factory=list)
    # dialect -> (url, lessons loaded): one synthetic-lesson database per dialect, grown in
    # place from the small to the large size and reused by the engine section.
    _lesson_dbs: dict[str, tuple[str, int]] = field(default_factory=dict)

    @property
    def lesson_sizes(self) -> tuple[int, int]:
        return (2_000, 20_000) if self.quick else (20_000, 200_000)

    def pick(self, quick: int, full: int) -> int:
        return quick if self.quick else full

    def lesson_database(self, dialect: str, at_least: int) -> tuple[str, sa.Engine, int]:
        """The synthetic-lesson database of ``dialect`` holding ≥ ``at_least`` lessons."""
        url, loaded = self._lesson_dbs.get(dialect, ("", 0))
        if not url:
            self.say(f"{dialect}: creating a scratch database")
            url = self.services.database_url(dialect, "lessons")
        engine = self.services.engine(url)
        if loaded < at_least:
            self.say(f"{dialect}: bulk-loading lessons {loaded:,} → {at_least:,}")

            def progress(done: int) -> None:
                self.say(f"{dialect}: bulk-loading lessons {done:,} / {at_least:,}")

            workload.bulk_load(engine, loaded, at_least, progress)
            loaded = at_least
        self._lesson_dbs[dialect] = (url, loaded)
        return url, engine, loaded

    def loaded_lessons(self, dialect: str) -> int:
        return self._lesson_dbs.get(dialect, ("", 0))[1]
