"""Loading ``sqlite-vec`` into every SQLite connection, when it is installed.

``sqlite-vec`` (``pip install 'contextstore[vectors]'``) adds ``vec_distance_cosine``, which
the knowledge base's vector search orders chunks by inside SQLite. Loading an extension must
be switched on per connection, and some Python builds leave ``enable_load_extension`` out of
``sqlite3`` while their SQLite library supports it; on CPython the switch is then flipped
through the library's own C function (docs/decisions/0087-vector-search-in-the-database.md).
Loading is switched off again at once, so SQL can never load anything else. Without the
package, or where neither way works, searches scan vectors in Python instead.
"""

from __future__ import annotations

import ctypes
import logging
import sys
from typing import Any

__all__ = ["load_sqlite_vec", "sqlite_vec_path"]

logger = logging.getLogger(__name__)

_SWITCH: Any = None


def sqlite_vec_path() -> str | None:
    """The extension's shared library, or ``None`` when ``sqlite-vec`` is not installed."""
    try:
        import sqlite_vec
    except ImportError:
        return None
    path: str = sqlite_vec.loadable_path()
    return path


def _c_switch() -> Any:
    """``sqlite3_enable_load_extension`` of the library the ``sqlite3`` module runs on."""
    global _SWITCH
    if _SWITCH is None:
        import _sqlite3

        function: Any = False
        try:
            function = ctypes.CDLL(_sqlite3.__file__).sqlite3_enable_load_extension
        except (AttributeError, OSError):
            pass
        else:
            function.argtypes = [ctypes.c_void_p, ctypes.c_int]
            function.restype = ctypes.c_int
        _SWITCH = function
    return _SWITCH


def _switch(raw: Any, on: bool) -> bool:
    enable = getattr(raw, "enable_load_extension", None)
    if enable is not None:
        try:
            enable(on)
            return True
        except Exception:  # another thread's connection (aiosqlite): the C switch below
            pass
    switch = _c_switch()
    if not switch or sys.implementation.name != "cpython":
        return False
    # CPython's connection object holds its ``sqlite3 *`` right after the object header.
    handle = ctypes.c_void_p.from_address(id(raw) + object.__basicsize__).value
    return handle is not None and switch(handle, 1 if on else 0) == 0


def _raw_connection(dbapi_connection: Any) -> Any:
    """The ``sqlite3.Connection`` behind pysqlite's or aiosqlite's adapted connection."""
    driver = getattr(dbapi_connection, "driver_connection", dbapi_connection)
    return getattr(driver, "_conn", driver)


def load_sqlite_vec(dbapi_connection: Any) -> bool:
    """Load ``sqlite-vec`` into one new connection; ``True`` when its functions are there."""
    path = sqlite_vec_path()
    if path is None:
        return False
    raw = _raw_connection(dbapi_connection)
    if not _switch(raw, True):
        return False
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("SELECT load_extension(?, 'sqlite3_vec_init')", (path,))
        return True
    except Exception:
        logger.warning("sqlite-vec is installed but could not be loaded", exc_info=True)
        return False
    finally:
        cursor.close()
        _switch(raw, False)
