"""The metrics figures' former home: their names now live in ``backends.sql.metrics.report``."""

from __future__ import annotations

from contextstore.backends.sql.metrics.report import *  # noqa: F403
from contextstore.backends.sql.metrics.report import __all__ as __all__
