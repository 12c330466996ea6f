"""The context-manager protocol for everything that holds connections and has ``close()``."""

from __future__ import annotations

from typing import Self


class Closeable:
    """``with thing: ...`` closes ``thing`` on the way out; subclasses define ``close()``."""

    def close(self) -> None:
        """Release what this object holds; it may not be used afterwards."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
