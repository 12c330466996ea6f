"""The lessons repository's former home: its names now live in ``backends.sql.lessons``."""

from __future__ import annotations

from contextstore.backends.sql.lessons import *  # noqa: F403
from contextstore.backends.sql.lessons import __all__ as __all__
