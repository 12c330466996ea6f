"""What ``contextstore serve`` is configured by: the store's environment plus the service's own.

Worker processes are started by the server, not by us, so every setting travels through the
environment: the command line writes its options there before the workers start, and each
worker reads them back with ``ServiceSettings.from_env()``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from contextstore.config import ContextEngineConfig
from contextstore.config.settings import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_REQUEST_TIMEOUT,
    MAX_REQUEST_TIMEOUT,
)
from contextstore.config.sources import load_settings
from contextstore.errors import ValidationError
from contextstore.interfaces.apikeys import keys_path

# prometheus_client reads it when first imported: set it before anything imports that.
ENV_MULTIPROC: Final = "PROMETHEUS_MULTIPROC_DIR"
ENV_MAX_BODY_BYTES: Final = "CONTEXTSTORE_MAX_BODY_BYTES"
ENV_REQUEST_TIMEOUT: Final = "CONTEXTSTORE_REQUEST_TIMEOUT"

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_REQUEST_TIMEOUT",
    "ENV_MAX_BODY_BYTES",
    "ENV_MULTIPROC",
    "ENV_REQUEST_TIMEOUT",
    "MAX_REQUEST_TIMEOUT",
    "ServiceSettings",
]


@dataclass(frozen=True)
class ServiceSettings:
    """The key file, the request limits, and the store configuration every namespace shares."""

    keys_file: Path | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    store: ContextEngineConfig = field(default_factory=ContextEngineConfig)

    def __post_init__(self) -> None:
        if self.max_body_bytes < 1:
            raise ValidationError("max_body_bytes", f"must be ≥ 1, got {self.max_body_bytes}")
        # NaN fails both comparisons; infinity would overflow the server's shutdown timer.
        if not 0 < self.request_timeout <= MAX_REQUEST_TIMEOUT:
            raise ValidationError(
                "request_timeout",
                f"must be more than 0 and at most {MAX_REQUEST_TIMEOUT:g} seconds, "
                f"got {self.request_timeout}",
            )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ServiceSettings:
        """The key file (``service.api_keys``; unset: the keys live in the database, shared
        by every server on it), the two limits and the store's settings, from
        ``contextstore.toml`` and the environment (``load_settings``)."""
        env = os.environ if environ is None else environ
        settings = load_settings(env)
        keys_file = settings["service.api_keys"]
        return cls(
            keys_file=keys_path(keys_file) if keys_file else None,
            max_body_bytes=settings["service.max_body_bytes"],
            request_timeout=settings["service.request_timeout"],
            store=settings.engine_config(),
        )
