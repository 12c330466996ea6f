"""The metrics statements' former home: now ``backends.sql.metrics.queries``."""

from __future__ import annotations

from contextstore.backends.sql.metrics.queries import *  # noqa: F403
from contextstore.backends.sql.metrics.queries import __all__ as __all__
