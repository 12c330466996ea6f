"""The effective settings: defaults < ``contextstore.toml`` < the environment < flags.

``load_settings`` reads the file (the one ``CONTEXTSTORE_CONFIG`` names, else
``contextstore.toml`` in the working directory, else none), the environment and the flags a
command was given, and validates every value as it goes: the first refusal is one
``SettingError`` naming the key and where it was set. The result remembers, for each
setting, where its value came from (``contextstore config show`` prints it).
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from contextstore.config import (
    AnalyzerConfig,
    CacheConfig,
    ContextEngineConfig,
    GuardConfig,
    LessonConfig,
    RetrievalConfig,
    TracingConfig,
)
from contextstore.config.settings import (
    BY_KEY,
    CONFIG_FILE_NAME,
    ENV_CONFIG,
    SETTINGS,
    Setting,
    Value,
)
from contextstore.errors import ConfigurationError, SettingError

Source = Literal["default", "file", "env", "flag"]

_SECTIONS: Final = {
    "guard": GuardConfig,
    "cache": CacheConfig,
    "analyzer": AnalyzerConfig,
    "retrieval": RetrievalConfig,
    "lessons": LessonConfig,
    "tracing": TracingConfig,
}


@dataclass(frozen=True)
class Resolved:
    """A setting's effective value and where it came from: ``origin`` is the file's path, the
    variable or the flag (``None`` for a default)."""

    value: Value | None
    source: Source
    origin: str | None = None


@dataclass(frozen=True)
class Settings:
    """Every setting's effective value (``settings["engine.cache.max_size"]``) and source."""

    resolved: Mapping[str, Resolved]
    file: Path | None

    def __getitem__(self, key: str) -> Any:
        return self.resolved[key].value

    def engine_config(self) -> ContextEngineConfig:
        """The engine's and the store's settings as a ``ContextEngineConfig``."""
        sections: dict[str, dict[str, Any]] = {name: {} for name in _SECTIONS}
        top: dict[str, Any] = {}
        for key, resolved in self.resolved.items():
            part, _, rest = key.partition(".")
            if part == "store":
                top[rest] = resolved.value
            elif part == "engine":
                section, _, name = rest.rpartition(".")
                (sections[section] if section else top)[name] = resolved.value
        parts = {name: kind(**sections[name]) for name, kind in _SECTIONS.items()}
        return ContextEngineConfig(**parts, **top)


def config_file(environ: Mapping[str, str], cwd: Path | None = None) -> Path | None:
    """The configuration file: ``CONTEXTSTORE_CONFIG``'s (which must exist), else
    ``contextstore.toml`` in ``cwd`` (the working directory) when there is one."""
    named = environ.get(ENV_CONFIG)
    if named:
        path = Path(named).expanduser()
        if not path.is_file():
            raise SettingError(ENV_CONFIG, None, f"no such file {named!r}")
        return path
    found = (cwd or Path.cwd()) / CONFIG_FILE_NAME
    return found if found.is_file() else None


def read_file(path: Path) -> dict[str, Value]:
    """The settings ``path`` sets, by key; an unknown key, a value of the wrong type or out
    of range, or a file that is not TOML is a ``SettingError`` naming the file (and key)."""
    origin = str(path)
    try:
        with path.open("rb") as handle:
            document = tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        raise SettingError(origin, None, f"not valid TOML: {exc}") from exc
    except OSError as exc:
        raise SettingError(origin, None, f"cannot be read: {exc.strerror or exc}") from exc
    found: dict[str, Value] = {}
    _walk(document, "", origin, found)
    return found


def _walk(table: Mapping[str, Any], prefix: str, origin: str, found: dict[str, Value]) -> None:
    for name, value in table.items():
        key = prefix + name
        setting = BY_KEY.get(key)
        if setting is None and _is_table(key):
            if not isinstance(value, dict):
                raise SettingError(origin, key, f"must be a table, got {value!r}")
            _walk(value, key + ".", origin, found)
            continue
        if setting is None:
            raise SettingError(origin, key, _unknown(key))
        checked, problem = setting.check(value)
        if problem is not None:
            raise SettingError(origin, key, problem)
        assert checked is not None
        found[key] = checked


def _is_table(key: str) -> bool:
    return any(setting.key.startswith(key + ".") for setting in SETTINGS)


def _unknown(key: str) -> str:
    parent = key.rpartition(".")[0]
    siblings = sorted(
        s.key.removeprefix(parent + ".").split(".")[0]
        for s in SETTINGS
        if s.key.startswith(parent + ".") or not parent
    )
    known = ", ".join(dict.fromkeys(siblings))
    where = f"[{parent}]" if parent else "the top level"
    return f"unknown setting; {where} holds {known}"


def load_settings(
    environ: Mapping[str, str],
    flags: Mapping[str, Value | None] | None = None,
    *,
    cwd: Path | None = None,
    flag_names: Mapping[str, str] | None = None,
) -> Settings:
    """Every setting: its default, overridden by the file, then the environment (an empty
    variable counts as unset), then ``flags`` (by key; ``None`` counts as not given, and
    ``flag_names`` says which flag gave a key when it is not the setting's own)."""
    path = config_file(environ, cwd)
    from_file = read_file(path) if path is not None else {}
    resolved: dict[str, Resolved] = {}
    for setting in SETTINGS:
        resolved[setting.key] = _resolve(setting, environ, from_file, path)
    for key, value in (flags or {}).items():
        if value is None:
            continue
        setting = BY_KEY[key]
        checked, problem = setting.check(value)
        flag = (flag_names or {}).get(key) or setting.flag or key
        if problem is not None:
            raise SettingError(flag, None, problem)
        resolved[key] = Resolved(checked, "flag", flag)
    settings = Settings(resolved, path)
    try:
        settings.engine_config()
    except ConfigurationError as exc:  # a rule across settings; each alone was accepted
        raise SettingError(str(path) if path else "settings", None, str(exc)) from exc
    return settings


def _resolve(
    setting: Setting, environ: Mapping[str, str], from_file: Mapping[str, Value], path: Path | None
) -> Resolved:
    text = environ.get(setting.env)
    if text:
        value, problem = setting.parse(text)
        if problem is not None:
            raise SettingError(setting.env, None, problem)
        return Resolved(value, "env", setting.env)
    if setting.key in from_file:
        return Resolved(from_file[setting.key], "file", str(path))
    return Resolved(setting.default, "default")
