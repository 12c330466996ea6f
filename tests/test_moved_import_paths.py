"""The import paths users wrote before the package was laid out by layer still work (the
changelog lists each move); they name the very objects ``contextstore`` exports."""

from __future__ import annotations

import contextstore


def test_the_store_and_engine_packages_still_export_what_users_imported_from_them() -> None:
    from contextstore.engine import AsyncContextEngine, ContextEngine
    from contextstore.store import AsyncStore, Store, connect, connect_async

    assert connect is contextstore.connect
    assert connect_async is contextstore.connect_async
    assert Store is contextstore.Store
    assert AsyncStore is contextstore.AsyncStore
    assert ContextEngine is contextstore.ContextEngine
    assert AsyncContextEngine is contextstore.AsyncContextEngine
