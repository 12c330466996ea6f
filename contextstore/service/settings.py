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
from typing import Final, TypeVar

from contextstore.apikeys import ENV_API_KEYS, keys_path
from contextstore.config import ContextEngineConfig
from contextstore.errors import ConfigurationError

T = TypeVar("T", int, float)

# prometheus_client reads it when first imported: set it before anything imports that.
ENV_MULTIPROC: Final = "PROMETHEUS_MULTIPROC_DIR"
ENV_MAX_BODY_BYTES: Final = "CONTEXTSTORE_MAX_BODY_BYTES"
ENV_REQUEST_TIMEOUT: Final = "CONTEXTSTORE_REQUEST_TIMEOUT"

DEFAULT_MAX_BODY_BYTES: Final = 1024 * 1024
"""Largest request body accepted, in bytes (1 MiB); larger ones get 413."""
DEFAULT_REQUEST_TIMEOUT: Final = 30.0
"""Seconds a request may take before it is answered 503 (type ``timeout``)."""


@dataclass(frozen=True)
class ServiceSettings:
    """The key file, the request limits, and the store configuration every namespace shares."""

    keys_file: Path
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    store: ContextEngineConfig = field(default_factory=ContextEngineConfig)

    def __post_init__(self) -> None:
        if self.max_body_bytes < 1:
            raise ConfigurationError(f"max_body_bytes: must be ≥ 1, got {self.max_body_bytes}")
        if not self.request_timeout > 0:
            raise ConfigurationError(f"request_timeout: must be > 0, got {self.request_timeout}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ServiceSettings:
        """``CONTEXTSTORE_API_KEYS`` (required), the two limits, and the store's variables."""
        env = os.environ if environ is None else environ
        if not env.get(ENV_API_KEYS):
            raise ConfigurationError(
                f"{ENV_API_KEYS} is not set: the service needs a key file "
                "(create one with 'contextstore keys add')"
            )
        return cls(
            keys_file=keys_path(env[ENV_API_KEYS]),
            max_body_bytes=_number(env, ENV_MAX_BODY_BYTES, int, DEFAULT_MAX_BODY_BYTES),
            request_timeout=_number(env, ENV_REQUEST_TIMEOUT, float, DEFAULT_REQUEST_TIMEOUT),
            store=ContextEngineConfig.from_env(env),
        )


def _number(env: Mapping[str, str], name: str, kind: type[T], default: T) -> T:
    text = env.get(name)
    if not text:
        return default
    try:
        return kind(text)
    except ValueError as exc:
        raise ConfigurationError(f"{name}: {text!r} is not a number") from exc
