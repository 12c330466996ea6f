"""One configuration: contextstore.toml < the environment < flags, checked at start, shown by
``contextstore config show`` with each setting's source, secrets masked."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from contextstore.config import ContextEngineConfig
from contextstore.config.settings import SETTINGS
from contextstore.interfaces.cli import app
from contextstore.interfaces.web.settings import ServiceSettings
from contextstore.store.aio import connect_async
from contextstore.store.sync import connect

SECRET = "s3cret-console-signing-value-0123456789"
FILE = f"""
[store]
database_url = "postgresql://agent:hunter2@db.example/contextstore"
namespace = "from-file"

[engine]
template = "minimal"
concurrency = 16

[engine.cache]
max_size = 99
ttl_seconds = 120

[engine.guard]
min_context_length = 40

[service]
port = 9090

[console]
secret = "{SECRET}"
"""


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A working directory of its own, and no CONTEXTSTORE_* variable from outside."""
    for setting in SETTINGS:
        monkeypatch.delenv(setting.env, raising=False)
    monkeypatch.delenv("CONTEXTSTORE_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def invoke(*args: str, **env: str) -> Result:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "250", **env})


def shown(*args: str, **env: str) -> dict[str, dict[str, Any]]:
    result = invoke("config", "show", "--json", *args, **env)
    assert result.exit_code == 0, result.output
    return {row["key"]: row for row in json.loads(result.stdout)}


def one_error(result: Result, *fragments: str) -> str:
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def test_show_names_each_setting_s_source_file_env_and_flag(tmp_path: Path) -> None:
    (tmp_path / "contextstore.toml").write_text(FILE, encoding="utf-8")
    path = str(tmp_path / "contextstore.toml")
    rows = shown(
        "--namespace",
        "from-flag",
        "--set",
        "engine.guard.enabled=false",
        CONTEXTSTORE_CACHE_TTL_SECONDS="60",
        CONTEXTSTORE_REDIS_URL="redis://:pw@cache.example:6379/0",
    )
    assert list(rows) == [setting.key for setting in SETTINGS]
    picked = {
        key: (rows[key]["value"], rows[key]["source"], rows[key]["from"])
        for key in (
            "store.database_url",
            "store.redis_url",
            "store.namespace",
            "engine.template",
            "engine.cache.max_size",
            "engine.cache.ttl_seconds",
            "engine.cache.enabled",
            "engine.guard.enabled",
            "service.port",
            "service.api_keys",
            "console.secret",
        )
    }
    assert picked == {
        "store.database_url": ("postgresql://agent:***@db.example/contextstore", "file", path),
        "store.redis_url": ("redis://:***@cache.example:6379/0", "env", "CONTEXTSTORE_REDIS_URL"),
        "store.namespace": ("from-flag", "flag", "--namespace"),
        "engine.template": ("minimal", "file", path),
        "engine.cache.max_size": (99, "file", path),
        "engine.cache.ttl_seconds": (60.0, "env", "CONTEXTSTORE_CACHE_TTL_SECONDS"),
        "engine.cache.enabled": (True, "default", ""),
        "engine.guard.enabled": (False, "flag", "--set"),
        "service.port": (9090, "file", path),
        "service.api_keys": (None, "default", ""),
        "console.secret": ("***", "file", path),
    }
    table = invoke("config", "show", CONTEXTSTORE_CACHE_TTL_SECONDS="60")
    assert table.exit_code == 0, table.output
    assert table.stdout.splitlines()[0] == f"configuration file: {path}"
    lines = {
        line.split()[0]: line.split()[1:] for line in table.stdout.splitlines()[3:] if line.strip()
    }
    assert lines["engine.cache.ttl_seconds"] == ["60.0", "env"]
    assert lines["engine.cache.max_size"] == ["99", "file"]
    assert lines["engine.lessons.order"] == ["severity", "default"]
    for output in (
        table.stdout,
        *(invoke("config", "show", "--format", f).stdout for f in ("csv", "plain", "json")),
    ):
        assert "hunter2" not in output and SECRET not in output


def test_without_a_file_every_setting_is_its_default() -> None:
    rows = shown()
    assert {row["source"] for row in rows.values()} == {"default"}
    assert rows["engine.cache.max_size"]["value"] == 256
    assert rows["store.redis_url"]["value"] is None
    table = invoke("config", "show")
    assert table.stdout.splitlines()[0] == "configuration file: none"


@pytest.mark.parametrize(
    ("text", "key", "message"),
    [
        ("[engine.cache]\nmax_sise = 3\n", "engine.cache.max_sise", "unknown setting"),
        ("[engine]\ncache = 3\n", "engine.cache", "must be a table"),
        ("[engines]\nx = 1\n", "engines", "unknown setting"),
        (
            '[engine.cache]\nmax_size = "big"\n',
            "engine.cache.max_size",
            "must be an integer, got 'big'",
        ),
        (
            "[engine.cache]\nmax_size = true\n",
            "engine.cache.max_size",
            "must be an integer, got true",
        ),
        ("[engine.cache]\nmax_size = 0\n", "engine.cache.max_size", "must be ≥ 1, got 0"),
        ("[engine.cache]\nttl_seconds = 0\n", "engine.cache.ttl_seconds", "must be > 0, got 0.0"),
        ('[engine]\ntemplate = "klingon"\n', "engine.template", "must be one of english"),
        ('[store]\nnamespace = "a{b}"\n', "store.namespace", "must not contain { or }"),
        ("[service]\nport = 70000\n", "service.port", "must be ≤ 65535, got 70000"),
        (
            "[service]\nrequest_timeout = inf\n",
            "service.request_timeout",
            "must be a finite number",
        ),
        (
            '[console]\nsecret = "short"\n',
            "console.secret",
            "must be ≥ 32 characters, got 5 characters",
        ),
    ],
)
def test_a_bad_file_fails_every_command_at_start_naming_file_and_key(
    tmp_path: Path, text: str, key: str, message: str
) -> None:
    path = tmp_path / "contextstore.toml"
    path.write_text(text, encoding="utf-8")
    for command in (["config", "show"], ["lessons", "list"], ["serve"], ["db", "current"]):
        line = one_error(invoke(*command), f"{path}: {key}: ", message)
        assert "short" not in line or key != "console.secret"
    assert not (tmp_path / "contextstore.db").exists()  # nothing ran, nothing was made
    helped = invoke("lessons", "list", "--help")  # help still shows, to fix the file with
    assert helped.exit_code == 0 and "Usage:" in helped.stdout


def test_a_file_that_is_not_toml_and_a_missing_named_file_are_one_line(tmp_path: Path) -> None:
    (tmp_path / "contextstore.toml").write_text("[engine\n", encoding="utf-8")
    one_error(invoke("config", "show"), f"{tmp_path / 'contextstore.toml'}: not valid TOML")
    missing = tmp_path / "etc" / "contextstore.toml"
    one_error(
        invoke("config", "show", CONTEXTSTORE_CONFIG=str(missing)),
        f"CONTEXTSTORE_CONFIG: no such file '{missing}'",
    )


def test_the_environment_and_flags_are_checked_naming_the_variable_and_the_flag() -> None:
    one_error(
        invoke("config", "show", CONTEXTSTORE_CACHE_MAX_SIZE="many"),
        "CONTEXTSTORE_CACHE_MAX_SIZE: must be an integer, got 'many'",
    )
    one_error(
        invoke("config", "show", CONTEXTSTORE_GUARD_ENABLED="maybe"),
        "CONTEXTSTORE_GUARD_ENABLED: must be true or false, got 'maybe'",
    )
    one_error(
        invoke("config", "show", "--set", "engine.cache.size=3"),
        "--set: unknown setting 'engine.cache.size'",
    )
    one_error(
        invoke("config", "show", "--set", "engine.cache.max_size=-1"),
        "--set: engine.cache.max_size: must be ≥ 1, got -1",
    )
    one_error(
        invoke("config", "show", "--namespace", "a{b}"), "--namespace: must not contain { or }"
    )
    one_error(invoke("serve", "--workers", "65"), "--workers: must be ≤ 64, got 65")


def test_the_file_named_by_contextstore_config_reaches_engines_stores_and_the_service(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    etc = tmp_path / "etc"
    etc.mkdir()
    config = etc / "contextstore.toml"
    keys = tmp_path / "keys.json"
    database = f"sqlite:///{tmp_path / 'file.db'}"
    config.write_text(
        FILE.replace("postgresql://agent:hunter2@db.example/contextstore", database).replace(
            "port = 9090", f'port = 9090\napi_keys = "{keys}"\nmax_body_bytes = 4096'
        ),
        encoding="utf-8",
    )
    env = {"CONTEXTSTORE_CONFIG": str(config), "CONTEXTSTORE_GUARD_MIN_CONTEXT_LENGTH": "5"}
    engine = ContextEngineConfig.from_env(env)
    assert (engine.namespace, engine.template, engine.cache.max_size) == (
        "from-file",
        "minimal",
        99,
    )
    assert (engine.cache.ttl_seconds, engine.guard.min_context_length) == (120.0, 5)
    assert engine.database_url == database
    service = ServiceSettings.from_env({**env, "CONTEXTSTORE_MAX_BODY_BYTES": "2048"})
    assert (service.keys_file, service.max_body_bytes, service.request_timeout) == (
        keys,
        2048,
        30.0,
    )
    assert service.store == engine

    monkeypatch.setenv("CONTEXTSTORE_CONFIG", str(config))
    with connect() as store:
        assert store.namespace == "from-file" and store.config.template == "minimal"
        assert store.engine().run("how do I rotate the signing keys?").cache_hit is False
        assert store.cache.stats()["max_size"] == 99
        assert store.metrics.count() == 1
    with connect(namespace="from-argument") as store:
        assert (store.namespace, store.config.cache.max_size) == ("from-argument", 99)

    async def in_flight() -> int:
        async with connect_async() as store:
            return store.engine()._slots._value  # runs the engine lets in at once

    assert asyncio.run(in_flight()) == 16


def test_commands_take_the_file_s_namespace_unless_told_otherwise(tmp_path: Path) -> None:
    from contextstore.interfaces.apikeys import read_entries

    (tmp_path / "contextstore.toml").write_text('[store]\nnamespace = "ops"\n', encoding="utf-8")
    keys = tmp_path / "keys.json"
    assert invoke("keys", "add", "--role", "admin", "--file", str(keys)).exit_code == 0
    told = invoke("keys", "add", "--role", "agent", "--file", str(keys), "--namespace", "web")
    assert told.exit_code == 0, told.output
    assert [entry.namespace for entry in read_entries(keys)] == ["ops", "web"]
