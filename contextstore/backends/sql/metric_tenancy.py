"""The metrics tenancy's former home: now ``backends.sql.metrics.tenancy``."""

from __future__ import annotations

from contextstore.backends.sql.metrics.tenancy import *  # noqa: F403
from contextstore.backends.sql.metrics.tenancy import __all__ as __all__
