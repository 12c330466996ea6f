"""contextstore: one shared, durable context layer for fleets of LLM agents.

Every public name (docs/reference/index.md) is importable from here; the modules they come
from are listed in the README's API map.
"""

from contextstore.backends.cache import AsyncContextCache, ContextCache, make_key
from contextstore.backends.memory.cache import AsyncMemoryContextCache, MemoryContextCache
from contextstore.backends.memory.windows import AsyncMemoryWindows, MemoryWindows
from contextstore.backends.redis.cache import AsyncRedisContextCache, RedisContextCache
from contextstore.backends.redis.windows import AsyncRedisWindows, RedisWindows
from contextstore.backends.sql.aio import AsyncLessonRepository, AsyncMetricsRepository
from contextstore.backends.sql.database import migrate
from contextstore.backends.sql.knowledge import KnowledgeBase
from contextstore.backends.sql.metrics import MetricsRepository
from contextstore.backends.sql.metrics.report import (
    GroupRow,
    LessonStats,
    LessonUsage,
    MetricsFilter,
    MetricsReport,
)
from contextstore.backends.sql.repository import ImportSummary, LessonRepository
from contextstore.backends.windows import AsyncWindows, Sample, Windows, WindowSummary
from contextstore.config import (
    AnalyzerConfig,
    CacheConfig,
    ContextEngineConfig,
    GuardConfig,
    LessonConfig,
    RetrievalConfig,
    TracingConfig,
)
from contextstore.core.analysis import (
    BudgetAllocationStrategy,
    ComplexityBasedAllocation,
    EqualBudgetAllocation,
    QueryAnalysis,
    QueryComplexity,
    QueryIntent,
    RuleBasedQueryAnalyzer,
    WeightedBudgetAllocation,
)
from contextstore.core.budget import (
    BudgetAllocation,
    CharTokenCounter,
    ContextAssembler,
    ContextBudget,
    ContextSources,
    PreparedContext,
    TiktokenCounter,
    TokenCounter,
    default_token_counter,
)
from contextstore.core.compose import Chunk, ComposedContext, compose_context
from contextstore.core.embedding import HashingEmbedder
from contextstore.core.guard import ContextGuard
from contextstore.core.knowledge import Document
from contextstore.core.lessons import AsyncLessonSource, InMemoryLessons, LessonRecord, LessonSource
from contextstore.core.matching import (
    DEFAULT_BYTE_BUDGET,
    DEFAULT_K,
    MAX_K,
    Lesson,
    LessonExplanation,
    MatchedLesson,
    MatchOptions,
    MatchResult,
    Scope,
    explain,
    match,
    render_lesson_block,
)
from contextstore.core.metrics import (
    AsyncMetricsSink,
    MemoryMetrics,
    MetricsSink,
    QueryMetric,
    RunTrace,
)
from contextstore.core.retrieval import (
    AsyncRetriever,
    AsyncVersionedRetriever,
    InMemoryRetriever,
    Retriever,
    VersionedRetriever,
)
from contextstore.engine.adaptive import AdaptiveLearningSystem
from contextstore.engine.aio import AsyncContextEngine
from contextstore.engine.ports import AsyncRunReads, AsyncRunState, RunReads, RunState
from contextstore.engine.sync import ContextEngine, ContextResult
from contextstore.errors import (
    BackendUnavailableError,
    ConfigurationError,
    ContextStoreError,
    MissingExtraError,
    NotFoundError,
    RateLimitedError,
    SettingError,
    ValidationError,
)
from contextstore.store.aio import AsyncStore, connect_async
from contextstore.store.sync import Store, connect

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_BYTE_BUDGET",
    "DEFAULT_K",
    "MAX_K",
    "AdaptiveLearningSystem",
    "AnalyzerConfig",
    "AsyncContextCache",
    "AsyncContextEngine",
    "AsyncLessonRepository",
    "AsyncLessonSource",
    "AsyncMemoryContextCache",
    "AsyncMemoryWindows",
    "AsyncMetricsRepository",
    "AsyncMetricsSink",
    "AsyncRedisContextCache",
    "AsyncRedisWindows",
    "AsyncRetriever",
    "AsyncRunReads",
    "AsyncRunState",
    "AsyncStore",
    "AsyncVersionedRetriever",
    "AsyncWindows",
    "BackendUnavailableError",
    "BudgetAllocation",
    "BudgetAllocationStrategy",
    "CacheConfig",
    "CharTokenCounter",
    "Chunk",
    "ComplexityBasedAllocation",
    "ComposedContext",
    "ConfigurationError",
    "ContextAssembler",
    "ContextBudget",
    "ContextCache",
    "ContextEngine",
    "ContextEngineConfig",
    "ContextGuard",
    "ContextResult",
    "ContextSources",
    "ContextStoreError",
    "Document",
    "EqualBudgetAllocation",
    "GroupRow",
    "GuardConfig",
    "HashingEmbedder",
    "ImportSummary",
    "InMemoryLessons",
    "InMemoryRetriever",
    "KnowledgeBase",
    "Lesson",
    "LessonConfig",
    "LessonExplanation",
    "LessonRecord",
    "LessonRepository",
    "LessonSource",
    "LessonStats",
    "LessonUsage",
    "MatchOptions",
    "MatchResult",
    "MatchedLesson",
    "MemoryContextCache",
    "MemoryMetrics",
    "MemoryWindows",
    "MetricsFilter",
    "MetricsReport",
    "MetricsRepository",
    "MetricsSink",
    "MissingExtraError",
    "NotFoundError",
    "PreparedContext",
    "QueryAnalysis",
    "QueryComplexity",
    "QueryIntent",
    "QueryMetric",
    "RateLimitedError",
    "RedisContextCache",
    "RedisWindows",
    "RetrievalConfig",
    "Retriever",
    "RuleBasedQueryAnalyzer",
    "RunReads",
    "RunState",
    "RunTrace",
    "Sample",
    "Scope",
    "SettingError",
    "Store",
    "TiktokenCounter",
    "TokenCounter",
    "TracingConfig",
    "ValidationError",
    "VersionedRetriever",
    "WeightedBudgetAllocation",
    "WindowSummary",
    "Windows",
    "__version__",
    "compose_context",
    "connect",
    "connect_async",
    "default_token_counter",
    "explain",
    "make_key",
    "match",
    "migrate",
    "render_lesson_block",
]
