"""Every setting of contextstore, defined once: its key, type, default, bounds and names.

A setting is a key of ``contextstore.toml`` (``engine.cache.max_size``: the table
``[engine.cache]``, the key ``max_size``), an environment variable and, for some, a command
line flag. The engine's defaults are the dataclasses' of ``contextstore.config`` (read from
them, not repeated); the service's and the console's are the constants below. The settings
table of the documentation is rendered from ``SETTINGS`` (``settings_table``), and
``contextstore config show`` lists them in this order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import reduce
from typing import Final

from contextstore.config import (
    DEFAULT_DATABASE_URL,
    DEFAULT_NAMESPACE,
    ENV_DATABASE_URL,
    ENV_NAMESPACE,
    ENV_REDIS_URL,
    TEMPLATES,
    ContextEngineConfig,
)

Value = bool | int | float | str

ENV_CONFIG: Final = "CONTEXTSTORE_CONFIG"
"""Names the configuration file; unset, ``contextstore.toml`` in the working directory."""
CONFIG_FILE_NAME: Final = "contextstore.toml"

DEFAULT_MAX_BODY_BYTES: Final = 1024 * 1024
"""Largest request body accepted, in bytes (1 MiB); larger ones get 413."""
DEFAULT_REQUEST_TIMEOUT: Final = 30.0
"""Seconds a request may take before it is answered 503 (type ``timeout``)."""
MAX_REQUEST_TIMEOUT: Final = 86400.0
"""The longest request time limit accepted, in seconds (a day)."""
MAX_SERVICE_WORKERS: Final = 64
"""Worker processes ``contextstore serve`` starts at most."""
MIN_CONSOLE_SECRET_CHARS: Final = 32
"""Characters the console's signing secret has at least."""


@dataclass(frozen=True)
class Setting:
    """One setting. ``default`` ``None`` means unset (``unset`` says what that means);
    ``minimum``/``maximum`` bound a number (``minimum`` excluded when ``above``), or a
    text's length; ``choices`` lists a text's allowed values. A ``secret`` is never shown, a
    ``url``'s password is masked."""

    key: str
    kind: type[Value]
    default: Value | None
    meaning: str
    env: str
    flag: str | None = None
    minimum: float | None = None
    maximum: float | None = None
    above: bool = False
    choices: tuple[str, ...] = ()
    forbidden: str = ""
    secret: bool = False
    url: bool = False
    unset: str = ""

    def check(self, value: object) -> tuple[Value | None, str | None]:
        """``value`` (as a TOML reader or ``parse`` gives it) as this setting's type, or the
        reason it is refused."""
        if self.kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        problem = self._problem(value)
        if problem is not None:
            secret = self.secret and isinstance(value, str)
            shown = f"{len(value)} characters" if secret else _shown(value)  # type: ignore[arg-type]
            return None, f"{problem}, got {shown}"
        assert isinstance(value, bool | int | float | str)
        return value, None

    def _problem(self, value: object) -> str | None:
        if not isinstance(value, self.kind) or (self.kind is int and isinstance(value, bool)):
            return f"must be {_KIND_NAMES[self.kind]}"
        if isinstance(value, float) and not math.isfinite(value):
            return "must be a finite number"
        measure = float(len(value)) if isinstance(value, str) else float(value)
        unit = " characters" if isinstance(value, str) else ""
        if self.minimum is not None and (
            measure <= self.minimum if self.above else measure < self.minimum
        ):
            return f"must be {'>' if self.above else '≥'} {_number(self.minimum)}{unit}"
        if self.maximum is not None and measure > self.maximum:
            return f"must be ≤ {_number(self.maximum)}{unit}"
        if self.choices and value not in self.choices:
            return f"must be one of {', '.join(self.choices)}"
        if isinstance(value, str) and any(char in value for char in self.forbidden):
            return f"must not contain {' or '.join(self.forbidden)}"
        return None

    def parse(self, text: str) -> tuple[Value | None, str | None]:
        """An environment variable's or a flag's text as this setting's value, or the reason
        it is refused."""
        if self.kind is bool:
            lowered = text.strip().lower()
            if lowered in _TRUE or lowered in _FALSE:
                return lowered in _TRUE, None
            return None, f"must be true or false, got {text!r}"
        if self.kind is int or self.kind is float:
            try:
                number: int | float = int(text) if self.kind is int else float(text)
            except ValueError:
                return None, f"must be {_KIND_NAMES[self.kind]}, got {text!r}"
            return self.check(number)
        return self.check(text)


_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})
_KIND_NAMES: Final[dict[type, str]] = {
    bool: "true or false",
    int: "an integer",
    float: "a number",
    str: "a string",
}


def _number(value: float) -> str:
    return f"{value:g}" if value != int(value) or abs(value) < 1e15 else str(int(value))


def _shown(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return repr(value)


_ENGINE_DEFAULTS = ContextEngineConfig()


def _engine(key: str, kind: type[Value], meaning: str, **bounds: object) -> Setting:
    """An engine setting: ``engine.a.b`` is ``ContextEngineConfig().a.b``, whose default it
    takes; its variable is ``CONTEXTSTORE_A_B``."""
    path = key.split(".")[1:]
    default = reduce(getattr, path, _ENGINE_DEFAULTS)
    env = "CONTEXTSTORE_" + "_".join(path).upper()
    return Setting(key, kind, default, meaning, env, **bounds)  # type: ignore[arg-type]


SETTINGS: Final[tuple[Setting, ...]] = (
    Setting(
        "store.database_url",
        str,
        DEFAULT_DATABASE_URL,
        "lessons, knowledge and metrics: `sqlite:///path` or `postgresql+psycopg://…`",
        ENV_DATABASE_URL,
        flag="--database-url",
        minimum=1,
        url=True,
    ),
    Setting(
        "store.redis_url",
        str,
        None,
        "cache and windows: `redis://`, `rediss://`, `unix://`, `redis+cluster://`",
        ENV_REDIS_URL,
        flag="--redis-url",
        url=True,
        unset="process memory",
    ),
    Setting(
        "store.namespace",
        str,
        DEFAULT_NAMESPACE,
        "isolates tenants: cache, windows, documents and metrics rows",
        ENV_NAMESPACE,
        flag="--namespace",
        minimum=1,
        maximum=128,
        forbidden="{}",
    ),
    _engine("engine.template", str, "composition template", choices=TEMPLATES),
    _engine("engine.enable_adaptive", bool, "let the adaptive windows suggest budgets"),
    _engine("engine.store_raw_query", bool, "metrics keep the query's text, not only its MD5"),
    _engine(
        "engine.concurrency", int, "runs of one `AsyncContextEngine` in flight at once", minimum=1
    ),
    _engine("engine.analyzer.budget_low", int, "characters of context, LOW complexity", minimum=1),
    _engine("engine.analyzer.budget_medium", int, "characters, MEDIUM", minimum=1),
    _engine("engine.analyzer.budget_high", int, "characters, HIGH", minimum=1),
    _engine("engine.cache.enabled", bool, "use the context cache"),
    _engine("engine.cache.max_size", int, "entries", minimum=1),
    _engine(
        "engine.cache.ttl_seconds", float, "seconds of life of an entry", minimum=0, above=True
    ),
    _engine("engine.guard.enabled", bool, "run the guard at all"),
    _engine("engine.guard.check_empty", bool, "an empty context fails the guard"),
    _engine(
        "engine.guard.min_context_length", int, "characters; shorter fails the guard", minimum=0
    ),
    _engine("engine.guard.max_context_length", int, "characters; longer is a warning", minimum=0),
    _engine("engine.guard.check_source_coverage", bool, "warn when the context cites no source"),
    _engine("engine.guard.check_relevance", bool, "the relevance check (needs an `embed_fn`)"),
    _engine(
        "engine.guard.relevance_threshold",
        float,
        "cosine similarity below which the relevance check fails",
        minimum=-1,
        maximum=1,
    ),
    _engine("engine.retrieval.top_k", int, "chunks a retriever returns", minimum=1),
    _engine(
        "engine.retrieval.min_chunk_length",
        int,
        "characters; shorter chunks are dropped",
        minimum=0,
    ),
    _engine(
        "engine.retrieval.max_chunk_length", int, "characters; longer chunks are dropped", minimum=1
    ),
    _engine(
        "engine.retrieval.candidate_limit",
        int,
        "chunks the full-text index hands to ranking at most",
        minimum=1,
    ),
    _engine("engine.retrieval.embeddings", bool, "fuse `HashingEmbedder` cosine with BM25"),
    Setting(
        "engine.retrieval.analyzer",
        str,
        None,
        "analyzer this process requires of the namespace: `simple` or `english`",
        "CONTEXTSTORE_RETRIEVAL_ANALYZER",
        choices=("simple", "english"),
        unset="the namespace's (`docs configure`)",
    ),
    Setting(
        "engine.retrieval.embedder",
        str,
        None,
        "embedder this process requires: `hashing`, `wordllama`, `openai:<model>`, `none`",
        "CONTEXTSTORE_RETRIEVAL_EMBEDDER",
        minimum=1,
        maximum=255,
        unset="the namespace's (`docs configure`)",
    ),
    _engine("engine.lessons.k", int, "lessons in a block; 0: the matcher's 10", minimum=0),
    _engine("engine.lessons.byte_budget", int, "UTF-8 bytes of forms; 0: 4096", minimum=0),
    _engine(
        "engine.lessons.order",
        str,
        "how lessons are ordered in a block",
        choices=("severity", "relevance"),
    ),
    _engine("engine.tracing.enabled", bool, "OpenTelemetry spans (`contextstore[otel]`)"),
    _engine("engine.tracing.query_text", bool, "spans carry the query's text"),
    Setting(
        "service.api_keys",
        str,
        None,
        "the key file of `contextstore serve` (unset: the keys live in the database)",
        "CONTEXTSTORE_API_KEYS",
        minimum=1,
        unset="none",
    ),
    Setting(
        "service.host",
        str,
        "127.0.0.1",
        "interface `serve` listens on",
        "CONTEXTSTORE_HOST",
        flag="--host",
        minimum=1,
    ),
    Setting(
        "service.port",
        int,
        8080,
        "TCP port of `serve`",
        "CONTEXTSTORE_PORT",
        flag="--port",
        minimum=0,
        maximum=65535,
    ),
    Setting(
        "service.workers",
        int,
        1,
        "worker processes of `serve`",
        "CONTEXTSTORE_WORKERS",
        flag="--workers",
        minimum=1,
        maximum=MAX_SERVICE_WORKERS,
    ),
    Setting(
        "service.max_body_bytes",
        int,
        DEFAULT_MAX_BODY_BYTES,
        "largest request body, bytes (larger: 413)",
        "CONTEXTSTORE_MAX_BODY_BYTES",
        flag="--max-body-bytes",
        minimum=1,
    ),
    Setting(
        "service.request_timeout",
        float,
        DEFAULT_REQUEST_TIMEOUT,
        "seconds before a request is answered 503",
        "CONTEXTSTORE_REQUEST_TIMEOUT",
        flag="--timeout",
        minimum=0,
        above=True,
        maximum=MAX_REQUEST_TIMEOUT,
    ),
    Setting(
        "service.access_log",
        bool,
        True,
        "one JSON line per request",
        "CONTEXTSTORE_ACCESS_LOG",
        flag="--access-log",
    ),
    Setting(
        "console.secret",
        str,
        None,
        "the console's signing secret (every node of one console shares it)",
        "CONTEXTSTORE_CONSOLE_SECRET",
        minimum=MIN_CONSOLE_SECRET_CHARS,
        secret=True,
        unset="a file beside the key file",
    ),
)

BY_KEY: Final[dict[str, Setting]] = {setting.key: setting for setting in SETTINGS}


def shown_default(setting: Setting) -> str:
    """The default as the configuration file would spell it (``unset`` for none)."""
    if setting.default is None:
        return f"unset: {setting.unset}"
    return toml_value(setting.default)


def toml_value(value: Value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(value)


def settings_table() -> str:
    """The documentation's table of every setting, one row each, in ``SETTINGS`` order."""
    lines = [
        "| key | default | environment | flag | meaning |",
        "|---|---|---|---|---|",
    ]
    for setting in SETTINGS:
        default = (
            f"unset: {setting.unset}" if setting.default is None else f"`{shown_default(setting)}`"
        )
        flag = f"`{setting.flag}`" if setting.flag else ""
        meaning = setting.meaning
        if setting.choices:
            meaning += ": " + ", ".join(f"`{choice}`" for choice in setting.choices)
        lines.append(f"| `{setting.key}` | {default} | `{setting.env}` | {flag} | {meaning} |")
    return "\n".join(lines) + "\n"
