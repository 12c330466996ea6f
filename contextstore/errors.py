"""One rooted exception tree: every error contextstore raises on purpose is a ContextStoreError.

Backend errors (SQLAlchemy, redis-py) are translated at the storage boundary with
``raise ... from exc`` so callers never need to import a driver to catch our failures.
"""

from __future__ import annotations


class ContextStoreError(Exception):
    """Root of every error raised by contextstore."""


class ValidationError(ContextStoreError, ValueError):
    """A value was refused; ``field`` names the offending field. Nothing was written."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


class NotFoundError(ContextStoreError, LookupError):
    """The named object (a lesson, usually) does not exist."""


class ConfigurationError(ContextStoreError):
    """A URL, option or environment variable cannot be used as given."""


class BackendUnavailableError(ContextStoreError):
    """A storage service could not be reached; raised only where no fallback exists."""


class MissingExtraError(ConfigurationError):
    """An optional dependency is not installed; the message names the extra that brings it.

    ``str()`` reads, for example: ``PostgreSQL needs the psycopg driver, which is not
    installed: pip install 'contextstore[postgres]'``.
    """

    def __init__(self, purpose: str, package: str, extra: str) -> None:
        self.package = package
        self.extra = extra
        super().__init__(
            f"{purpose} needs {package}, which is not installed: "
            f"pip install 'contextstore[{extra}]'"
        )
