"""Where key files live and how they are written, checked and kept out of version control."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from contextstore.errors import ConfigurationError
from contextstore.interfaces.apikeys import (
    RACY_SECONDS,
    FileKeyStore,
    KeyRing,
    Principal,
    add_key,
    read_entries,
    require_key_file,
    split_key,
    suggested_keys_path,
)
from contextstore.interfaces.cli import app
from tests import REPO_ROOT


def flip_byte(hex_digest: str, index: int) -> str:
    raw = bytearray(bytes.fromhex(hex_digest))
    raw[index] ^= 0x01
    return raw.hex()


@pytest.mark.parametrize("index", [2, 3, 16, 31])
def test_a_stored_hash_differing_after_its_second_byte_refuses_the_key(
    tmp_path: Path, index: int
) -> None:
    path = tmp_path / "keys.json"
    key, entry = add_key(path, "alpha", "admin")
    _, secret = split_key(key) or ("", "")
    assert entry.matches(secret)
    forged = replace(entry, hash=flip_byte(entry.hash, index))
    assert not forged.matches(secret)
    # And through the file a server reads.
    document = json.loads(path.read_text())
    document["keys"][0]["hash"] = forged.hash
    path.write_text(json.dumps(document))
    assert KeyRing(path).verify(key) is None


def test_the_suggested_key_file_is_in_the_users_configuration_directory() -> None:
    assert suggested_keys_path({"XDG_CONFIG_HOME": "/etc/xdg-alice"}) == Path(
        "/etc/xdg-alice/contextstore/keys.json"
    )
    home = Path(os.path.expanduser("~"))
    assert suggested_keys_path({}) == home / ".config" / "contextstore" / "keys.json"


def test_keys_add_writes_the_file_and_its_directory_for_the_owner_alone(tmp_path: Path) -> None:
    path = suggested_keys_path({"XDG_CONFIG_HOME": str(tmp_path / "config")})
    result = CliRunner().invoke(
        app, ["keys", "add", "--namespace", "ops", "--role", "admin", "--file", str(path)]
    )
    assert result.exit_code == 0, result.output
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert [entry.role for entry in read_entries(path)] == ["admin"]


def test_without_a_key_file_the_keys_commands_use_the_database(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("CONTEXTSTORE_API_KEYS", raising=False)
    monkeypatch.delenv("CONTEXTSTORE_DATABASE_URL", raising=False)
    url = f"sqlite:///{tmp_path / 'keys.db'}"
    added = CliRunner().invoke(
        app, ["keys", "add", "--namespace", "ops", "--role", "admin", "--database-url", url]
    )
    assert added.exit_code == 0, added.output
    key = added.stdout.splitlines()[-1]
    assert f"to the database sqlite:///{tmp_path / 'keys.db'}" in added.stderr
    listed = CliRunner().invoke(app, ["keys", "list", "--json", "--database-url", url])
    assert [(row["id"], row["role"]) for row in json.loads(listed.stdout)] == [
        (key.split("_")[1], "admin")
    ]
    assert not list(tmp_path.glob("*.json"))  # no key file was made


def test_a_server_needs_its_key_file_to_exist_and_read(tmp_path: Path) -> None:
    missing = tmp_path / "keys.json"
    with pytest.raises(ConfigurationError, match="does not exist"):
        require_key_file(missing)
    with pytest.raises(ConfigurationError, match="does not exist"):
        KeyRing(missing, required=True)
    assert len(KeyRing(missing)) == 0  # the keys commands may still create it
    with pytest.raises(ConfigurationError, match="cannot read"):
        require_key_file(tmp_path)
    missing.write_text("[1, 2", encoding="utf-8")
    with pytest.raises(ConfigurationError, match="malformed"):
        require_key_file(missing)


class CoarseClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class CoarseStore(FileKeyStore):
    """A key file on a file system whose timestamps are a second coarse: a rewrite of the
    same size within that second leaves every part of the stamp as it was."""

    frozen: tuple[int, ...] = ()

    def stamp(self) -> tuple[int, ...]:
        if not self.frozen:
            self.frozen = super().stamp()
        return self.frozen


def test_a_role_changed_within_the_timestamp_granularity_is_still_seen(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    key, entry = add_key(path, "alpha", "admin")
    written = path.stat().st_mtime_ns / 1e9
    clock = CoarseClock(written + 0.5)
    ring = KeyRing(CoarseStore(path, clock=clock))
    assert ring.lookup(entry.id) == Principal(entry.id, "alpha", "admin")
    text = path.read_text()
    path.write_text(text.replace('"role": "admin"', '"role": "agent"'))  # in place, same size
    assert path.stat().st_size == len(text.encode())
    assert ring.lookup(entry.id) == Principal(entry.id, "alpha", "agent")
    assert ring.verify(key) == Principal(entry.id, "alpha", "agent")
    # Once the stamp is safely in the past, an unchanged stamp means an unchanged file.
    clock.now = written + RACY_SECONDS + 1
    path.write_text(text)
    assert ring.lookup(entry.id) == Principal(entry.id, "alpha", "agent")


@pytest.mark.parametrize(
    "name", ["keys.json", "keys/keys.json", "prod.keys.json", "keys.json.console-secret"]
)
def test_key_files_and_console_secrets_are_kept_out_of_version_control(name: str) -> None:
    checked = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "check-ignore", "--no-index", "-q", name],
        capture_output=True,
        timeout=30,
    )
    assert checked.returncode == 0, f"{name} is not ignored"
