"""``connect()`` and ``connect_async()``: backends chosen from URLs and the environment,
wired into engines.
"""

from contextstore.store.aio import AsyncStore, connect_async
from contextstore.store.sync import Store, connect

__all__ = ["AsyncStore", "Store", "connect", "connect_async"]
