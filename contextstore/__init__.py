"""contextstore: one shared, durable context layer for fleets of LLM agents.

Every public name (SPEC §5) is importable from here; the modules they come from are listed
in the README's API map.
"""

from contextstore.adaptive.base import AsyncWindows, Sample, Windows, WindowSummary
from contextstore.adaptive.memory import AsyncMemoryWindows, MemoryWindows
from contextstore.adaptive.system import AdaptiveLearningSystem
from contextstore.analysis import (
    BudgetAllocationStrategy,
    ComplexityBasedAllocation,
    EqualBudgetAllocation,
    QueryAnalysis,
    QueryComplexity,
    QueryIntent,
    RuleBasedQueryAnalyzer,
    WeightedBudgetAllocation,
)
from contextstore.async_engine import AsyncContextEngine
from contextstore.async_store import AsyncStore, connect_async
from contextstore.budget import (
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
from contextstore.cache.base import AsyncContextCache, ContextCache, make_key
from contextstore.cache.memory import AsyncMemoryContextCache, MemoryContextCache
from contextstore.compose import Chunk, ComposedContext, compose_context
from contextstore.config import (
    AnalyzerConfig,
    CacheConfig,
    ContextEngineConfig,
    GuardConfig,
    LessonConfig,
    RetrievalConfig,
)
from contextstore.embedding import HashingEmbedder
from contextstore.engine import ContextEngine, ContextResult
from contextstore.errors import (
    BackendUnavailableError,
    ConfigurationError,
    ContextStoreError,
    MissingExtraError,
    NotFoundError,
    ValidationError,
)
from contextstore.guard import ContextGuard
from contextstore.knowledge import Document
from contextstore.lessons import InMemoryLessons, LessonRecord, LessonSource
from contextstore.matching import (
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
from contextstore.metrics import MemoryMetrics, MetricsSink, QueryMetric, RunTrace
from contextstore.redis.cache import AsyncRedisContextCache, RedisContextCache
from contextstore.redis.windows import AsyncRedisWindows, RedisWindows
from contextstore.retrieval import InMemoryRetriever, Retriever, VersionedRetriever
from contextstore.sql.aio import AsyncLessonRepository, AsyncMetricsRepository
from contextstore.sql.database import migrate
from contextstore.sql.knowledge import KnowledgeBase
from contextstore.sql.metrics import MetricsRepository
from contextstore.sql.report import (
    GroupRow,
    LessonStats,
    LessonUsage,
    MetricsFilter,
    MetricsReport,
)
from contextstore.sql.repository import ImportSummary, LessonRepository
from contextstore.store import Store, connect

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
    "AsyncMemoryContextCache",
    "AsyncMemoryWindows",
    "AsyncMetricsRepository",
    "AsyncRedisContextCache",
    "AsyncRedisWindows",
    "AsyncStore",
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
    "RedisContextCache",
    "RedisWindows",
    "RetrievalConfig",
    "Retriever",
    "RuleBasedQueryAnalyzer",
    "RunTrace",
    "Sample",
    "Scope",
    "Store",
    "TiktokenCounter",
    "TokenCounter",
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
