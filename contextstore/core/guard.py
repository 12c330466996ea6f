"""Sanity checks on a composed context before it reaches a model. docs/design/guard.md.

The guard only reports: ``passed=False`` never stops the engine from returning the context;
it sets ``guard_passed`` and keeps the result out of the cache.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import replace
from typing import Final

import numpy as np
import numpy.typing as npt

from contextstore.config import ContextEngineConfig, GuardConfig
from contextstore.core.analysis import QueryAnalysis
from contextstore.core.embedding import EmbedFn

logger = logging.getLogger(__name__)


# A citation marker written by compose_context (any template) or the chunk separator. The
# a looser pattern would also accept a bare ``[:`` by accident; that is deliberately not here.
SOURCE_MARKERS: Final = ("[Source:", "[source:", "[المصدر:", "---")
RELEVANCE_PREFIX_CHARS: Final = 512

EMPTY_WARNING: Final = "context is empty ⚠"
NO_SOURCE_WARNING: Final = "no valid source found in context."


class ContextGuard:
    """Validates a composed context against ``config.guard`` (a copy taken at construction).

    ``embed_fn`` maps a text to a vector; it is used only when ``check_relevance`` is on.
    Turning relevance on (in an enabled guard) without an ``embed_fn`` logs one WARNING here
    and the check is skipped on every call. Safe to share between threads: the settings are a
    private copy and the only mutable state, :attr:`relevance_errors`, is guarded by a lock.
    """

    def __init__(self, config: ContextEngineConfig, embed_fn: EmbedFn | None = None) -> None:
        # A private copy: a caller mutating its config later cannot change a running guard
        # half-way through a validate() on another thread.
        self._settings: GuardConfig = replace(config.guard)
        self._embed_fn = embed_fn
        self._lock = threading.Lock()
        self._relevance_errors = 0
        if self._settings.enabled and self._settings.check_relevance and embed_fn is None:
            logger.warning(
                "context guard: check_relevance is on but no embed_fn was given; "
                "the relevance check is skipped"
            )

    @property
    def relevance_errors(self) -> int:
        """How many relevance checks failed open because embedding or similarity raised."""
        with self._lock:
            return self._relevance_errors

    def validate(
        self, context: str, query: str, analysis: QueryAnalysis | None = None
    ) -> tuple[bool, list[str]]:
        """Run the checks in the documented order (docs/design/guard.md) and return ``(passed,
        warnings)``.

        1. guard disabled → ``(True, [])``; nothing else runs, nothing is logged.
        2. ``check_empty`` and ``context`` blank → ``(False, ["context is empty ⚠"])`` at once.
        3. ``len(context) < min_context_length`` → ``context is too short ({n} characters <
           {min}).``, fails, checks continue.
        4. ``len(context) > max_context_length`` → ``context is too long ({n} > {max}).
           consider compressing it.``, a warning only.
        5. ``check_source_coverage`` and none of ``[Source:``, ``[source:``, ``[المصدر:``,
           ``---`` in the context → ``no valid source found in context.``, a warning only.
        6. ``check_relevance`` with an ``embed_fn``: cosine of ``embed_fn(query)`` and
           ``embed_fn(context[:512])`` below ``relevance_threshold`` → ``context is not
           relevant to the query (similarity={sim:.3f} < {threshold}).``, fails. A zero vector
           has similarity 0.0. If embedding raises, the vectors differ in size, or the
           similarity is not finite, the check passes (fail-open), a WARNING is logged and
           :attr:`relevance_errors` rises.
        Any warnings are then logged together at WARNING (the empty case too), else one DEBUG
        line. ``analysis`` is accepted for interface conformance and not read. Never raises.
        """
        settings = self._settings
        if not settings.enabled:
            return True, []
        if settings.check_empty and not context.strip():
            warnings = [EMPTY_WARNING]
            _log(warnings)
            return False, warnings

        passed = True
        warnings = []
        length = len(context)
        if length < settings.min_context_length:
            passed = False
            warnings.append(
                f"context is too short ({length} characters < {settings.min_context_length})."
            )
        if length > settings.max_context_length:
            warnings.append(
                f"context is too long ({length} > {settings.max_context_length}). "
                "consider compressing it."
            )
        if settings.check_source_coverage and not any(m in context for m in SOURCE_MARKERS):
            warnings.append(NO_SOURCE_WARNING)
        if settings.check_relevance and self._embed_fn is not None:
            relevance_warning = self._check_relevance(context, query, settings)
            if relevance_warning is not None:
                passed = False
                warnings.append(relevance_warning)
        _log(warnings)
        return passed, warnings

    def _check_relevance(self, context: str, query: str, settings: GuardConfig) -> str | None:
        """The failure warning, or ``None`` when relevant enough or when the check failed open."""
        assert self._embed_fn is not None
        try:
            similarity = cosine_similarity(
                self._embed_fn(query), self._embed_fn(context[:RELEVANCE_PREFIX_CHARS])
            )
        except Exception as exc:  # fail-open on anything the user's embed_fn does
            with self._lock:
                self._relevance_errors += 1
            logger.warning(
                "context guard: relevance check skipped, embedding failed: %s: %s",
                type(exc).__name__,
                exc,
            )
            return None
        if similarity < settings.relevance_threshold:
            threshold = str(settings.relevance_threshold)
            return (
                f"context is not relevant to the query (similarity={similarity:.3f} < {threshold})."
            )
        return None


def cosine_similarity(a: npt.ArrayLike, b: npt.ArrayLike) -> float:
    """Cosine of two vectors (flattened to 1-D float64).

    Returns 0.0 when either vector has zero norm (an embedding of nothing is related to
    nothing). Raises ``ValueError`` when the sizes differ or the result is not finite (NaN or
    infinite components), so the guard treats those as embedding failures.
    """
    left = np.asarray(a, dtype=np.float64).ravel()
    right = np.asarray(b, dtype=np.float64).ravel()
    if left.shape != right.shape:
        raise ValueError(f"embedding sizes differ ({left.size} != {right.size})")
    norms = float(np.linalg.norm(left)) * float(np.linalg.norm(right))
    if norms == 0.0:
        return 0.0
    similarity = float(np.dot(left, right)) / norms
    if not np.isfinite(similarity):
        raise ValueError("similarity is not a finite number")
    return similarity


def _log(warnings: list[str]) -> None:
    if warnings:
        logger.warning("context guard: %s", " | ".join(warnings))
    else:
        logger.debug("context guard: all checks passed")
