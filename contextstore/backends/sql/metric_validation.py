"""The metrics validation's former home: now ``backends.sql.metrics.validation``."""

from __future__ import annotations

from contextstore.backends.sql.metrics.validation import *  # noqa: F403
from contextstore.backends.sql.metrics.validation import __all__ as __all__
