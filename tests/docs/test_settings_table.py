"""The configuration guide's table is the settings' one definition, and that definition
covers every field of the engine's configuration."""

from __future__ import annotations

import dataclasses
from typing import Any

from contextstore.config import ContextEngineConfig
from contextstore.config.settings import SETTINGS, settings_table
from tests.docs.pages import read, table
from tests.docs.settings import render

PAGE = "guides/configuration.md"


def test_the_guide_s_table_is_written_from_the_definitions() -> None:
    page = read(PAGE)
    assert render(page) == page, "run: python -m tests.docs.settings"
    rows = table(PAGE, "key", "default", "environment", "flag", "meaning")
    assert [row[0] for row in rows] == [f"`{setting.key}`" for setting in SETTINGS]
    assert settings_table() in page


def test_a_stale_table_is_caught() -> None:
    page = read(PAGE)
    stale = page.replace(
        "| `engine.cache.max_size` | `256` |", "| `engine.cache.max_size` | `512` |"
    )
    assert stale != page and render(stale) == page


def fields(config: Any, prefix: str) -> dict[str, Any]:
    """``engine.a.b`` → default, for every leaf field of the engine's configuration."""
    found: dict[str, Any] = {}
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if dataclasses.is_dataclass(value):
            found.update(fields(value, f"{prefix}{field.name}."))
        else:
            found[prefix + field.name] = value
    return found


def test_every_engine_field_is_a_setting_with_the_dataclass_default() -> None:
    engine = fields(ContextEngineConfig(), "engine.")
    store = {f"engine.{name}" for name in ("database_url", "redis_url", "namespace")}
    defined = {setting.key: setting.default for setting in SETTINGS}
    expected = {key: value for key, value in engine.items() if key not in store}
    expected |= {key.replace("engine.", "store."): engine[key] for key in store}
    assert {key: defined[key] for key in expected} == expected
    assert {key for key in defined if key.startswith(("engine.", "store."))} == set(expected)
