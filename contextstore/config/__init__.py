"""Configuration: every default in one place, each with its unit, plus ``from_env()``.

The dataclasses below are the engine's settings. ``contextstore.config.settings`` names each
of them (and the store's, the service's and the console's) as a key of ``contextstore.toml``
and an environment variable; ``contextstore.config.sources`` reads the file, the environment
and the command line into them.

The per-query context budget (``AnalyzerConfig.budget_*``, ``override_budget``) is measured
in characters of composed context, the same unit the guard and the adaptive windows use, so
the adaptive suggestion compares like with like. The session-level ``ContextBudget`` is the
token-based tool; it is separate and counts with a ``TokenCounter``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from contextstore.errors import ConfigurationError

DEFAULT_DATABASE_URL = "sqlite:///contextstore.db"
DEFAULT_NAMESPACE = "default"

ENV_DATABASE_URL = "CONTEXTSTORE_DATABASE_URL"
ENV_REDIS_URL = "CONTEXTSTORE_REDIS_URL"
ENV_NAMESPACE = "CONTEXTSTORE_NAMESPACE"

DEFAULT_CONCURRENCY = 4
"""Runs of one ``AsyncContextEngine`` in flight at once; more wait for a free slot (first
come, first served). More in flight raise a busy engine's throughput (their requests go out
together) and lengthen the event loop's longest turn; the benchmarks' throughput rows use 32
(``docs/decisions/0011-async-engine-concurrency.md`` has the measurements)."""

TEMPLATES = ("english", "arabic", "minimal", "structured")


@dataclass
class GuardConfig:
    """Sanity checks on a composed context. Lengths are characters."""

    enabled: bool = True
    check_empty: bool = True
    min_context_length: int = 10
    max_context_length: int = 8000
    check_source_coverage: bool = True
    check_relevance: bool = False
    relevance_threshold: float = 0.10


@dataclass
class CacheConfig:
    """Context cache sizing: ``max_size`` entries, ``ttl_seconds`` seconds of life each."""

    enabled: bool = True
    max_size: int = 256
    ttl_seconds: float = 300


@dataclass
class AnalyzerConfig:
    """Per-query context budgets, in characters, by complexity."""

    budget_low: int = 800
    budget_medium: int = 2000
    budget_high: int = 4000


@dataclass
class RetrievalConfig:
    """How many chunks the retriever returns (``top_k``) and the chunk length window (chars).

    For the SQL knowledge base: ``candidate_limit`` chunks at most are read per search (the
    full-text index picks them), and ``embeddings`` turns on ``HashingEmbedder`` fusion
    (vectors computed once, when a document is written). ``analyzer`` and ``embedder``
    (``None``: the namespace's, as ``docs configure`` stored it) are what this process
    requires; a namespace configured otherwise is refused, naming the field.
    """

    top_k: int = 8
    min_chunk_length: int = 20
    max_chunk_length: int = 4000
    candidate_limit: int = 1000
    embeddings: bool = False
    analyzer: str | None = None
    embedder: str | None = None


@dataclass
class LessonConfig:
    """Lesson selection bounds: at most ``k`` lessons, ``byte_budget`` UTF-8 bytes of forms.

    ``0`` means the matcher's defaults (10 lessons, 4096 bytes). ``order`` is the matcher's:
    ``"severity"`` (default) or ``"relevance"`` (the run's query ranks lessons within one
    severity); see ``contextstore.core.matching.match``.
    """

    k: int = 0
    byte_budget: int = 0
    order: str = "severity"


@dataclass
class TracingConfig:
    """OpenTelemetry spans for each run and its phases (and each HTTP request of the service).

    Off by default; on, it needs ``contextstore[otel]``. Spans carry counts and labels, never
    the query's text unless ``query_text`` is set too.
    """

    enabled: bool = False
    query_text: bool = False


@dataclass
class ContextEngineConfig:
    """The one configuration object. ``from_env()`` fills the connection settings."""

    guard: GuardConfig = field(default_factory=GuardConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    analyzer: AnalyzerConfig = field(default_factory=AnalyzerConfig)
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    lessons: LessonConfig = field(default_factory=LessonConfig)
    tracing: TracingConfig = field(default_factory=TracingConfig)
    enable_adaptive: bool = True
    template: str = "english"
    # Durable metrics keep an MD5 hash of the query; the raw text only when asked for.
    store_raw_query: bool = False
    # Runs of one AsyncContextEngine in flight at once (DEFAULT_CONCURRENCY's note).
    concurrency: int = DEFAULT_CONCURRENCY
    database_url: str = DEFAULT_DATABASE_URL
    redis_url: str | None = None
    namespace: str = DEFAULT_NAMESPACE

    def __post_init__(self) -> None:
        if self.template not in TEMPLATES:
            choices = ", ".join(TEMPLATES)
            raise ConfigurationError(
                f"template: unknown template {self.template!r}; choose one of {choices}"
            )
        # Braces would break the Redis hash tag; 128 is the width of the metrics column.
        if not 0 < len(self.namespace) <= 128 or any(c in self.namespace for c in "{}"):
            raise ConfigurationError(
                f"namespace: {self.namespace!r} must be 1 to 128 characters with no braces"
            )

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, **overrides: object
    ) -> ContextEngineConfig:
        """Every engine and store setting from ``contextstore.toml`` and the environment.

        The file is the one ``CONTEXTSTORE_CONFIG`` names, else ``contextstore.toml`` in the
        working directory, else none; an environment variable (``CONTEXTSTORE_DATABASE_URL``,
        ``CONTEXTSTORE_CACHE_MAX_SIZE`` …) wins over the file, ``overrides`` over both. Unset
        or empty variables keep the file's value, else the default: a SQLite file in the
        working directory, in-process memory instead of Redis, namespace ``default``. A bad
        key or value raises ``SettingError`` naming it and where it was set.
        """
        from contextstore.config.sources import load_settings

        config = load_settings(os.environ if environ is None else environ).engine_config()
        return replace(config, **overrides) if overrides else config  # type: ignore[arg-type]
