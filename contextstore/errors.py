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


class SettingError(ConfigurationError, ValidationError):
    """A setting was refused: ``key`` is its name (``engine.cache.max_size``), ``origin`` where
    it was set (the configuration file's path, an environment variable, a flag).

    ``str()`` names both: ``contextstore.toml: engine.cache.max_sise: unknown setting``.
    """

    def __init__(self, origin: str, key: str | None, message: str) -> None:
        self.origin = origin
        self.key = key
        ValidationError.__init__(self, origin if key is None else f"{origin}: {key}", message)


class BackendUnavailableError(ContextStoreError):
    """A storage service could not be reached; raised only where no fallback exists."""


class MissingExtraError(ConfigurationError):
    """An optional dependency is not installed; the message names the extra that brings it.

    ``str()`` reads, for example: ``PostgreSQL needs the psycopg driver, which is not
    installed: pip install 'contextstore[postgres]'``; of several packages (``"FastAPI and
    uvicorn"``), "which are not installed".
    """

    def __init__(self, purpose: str, package: str, extra: str) -> None:
        self.package = package
        self.extra = extra
        verb = "are" if " and " in package else "is"
        super().__init__(
            f"{purpose} needs {package}, which {verb} not installed: "
            f"pip install 'contextstore[{extra}]'"
        )


class RateLimitedError(ContextStoreError):
    """Too many requests of one kind in a window (a namespace's lesson proposals per hour);
    ``retry_after`` is the seconds until one more would be accepted. Nothing was written."""

    def __init__(self, message: str, retry_after: int) -> None:
        self.retry_after = retry_after
        super().__init__(message)
