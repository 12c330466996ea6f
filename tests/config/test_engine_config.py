"""ContextEngineConfig: defaults with their units, from_env(), and refused values."""

from __future__ import annotations

import pytest

from contextstore.config import ContextEngineConfig
from contextstore.errors import ConfigurationError


def test_defaults() -> None:
    config = ContextEngineConfig()
    assert config.database_url == "sqlite:///contextstore.db"
    assert config.redis_url is None
    assert config.namespace == "default"
    assert (config.cache.max_size, config.cache.ttl_seconds) == (256, 300)
    assert (config.analyzer.budget_low, config.analyzer.budget_medium) == (800, 2000)
    assert config.analyzer.budget_high == 4000
    assert config.guard.min_context_length == 10 and config.guard.max_context_length == 8000
    assert config.guard.relevance_threshold == 0.10 and config.guard.check_relevance is False
    assert config.enable_adaptive is True and config.template == "english"
    assert config.store_raw_query is False


def test_from_env_reads_the_three_variables() -> None:
    config = ContextEngineConfig.from_env(
        {
            "CONTEXTSTORE_DATABASE_URL": "postgresql://u@db/ctx",
            "CONTEXTSTORE_REDIS_URL": "redis://cache:6379/1",
            "CONTEXTSTORE_NAMESPACE": "tenant-a",
        }
    )
    assert config.database_url == "postgresql://u@db/ctx"
    assert config.redis_url == "redis://cache:6379/1"
    assert config.namespace == "tenant-a"


def test_empty_variables_keep_the_defaults() -> None:
    config = ContextEngineConfig.from_env(
        {
            "CONTEXTSTORE_DATABASE_URL": "",
            "CONTEXTSTORE_REDIS_URL": "",
            "CONTEXTSTORE_NAMESPACE": "",
        }
    )
    assert config.database_url == "sqlite:///contextstore.db"
    assert config.redis_url is None
    assert config.namespace == "default"


def test_from_env_overrides_win() -> None:
    config = ContextEngineConfig.from_env({"CONTEXTSTORE_NAMESPACE": "env"}, namespace="given")
    assert config.namespace == "given"


@pytest.mark.parametrize("namespace", ["", "a{b", "a}b", "n" * 129])
def test_a_bad_namespace_is_refused_naming_the_field(namespace: str) -> None:
    with pytest.raises(ConfigurationError, match=r"^namespace: "):
        ContextEngineConfig(namespace=namespace)


def test_a_namespace_of_128_characters_is_accepted() -> None:
    assert ContextEngineConfig(namespace="n" * 128).namespace == "n" * 128


def test_an_unknown_template_is_refused_naming_the_field() -> None:
    with pytest.raises(ConfigurationError, match=r"^template: unknown template 'klingon'"):
        ContextEngineConfig(template="klingon")


def test_from_env_refuses_a_bad_namespace_in_the_environment() -> None:
    with pytest.raises(ConfigurationError, match=r"^CONTEXTSTORE_NAMESPACE: must not contain"):
        ContextEngineConfig.from_env({"CONTEXTSTORE_NAMESPACE": "{x}"})
