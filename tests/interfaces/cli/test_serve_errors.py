"""``contextstore serve`` that cannot start says why in one ``error:`` line, exit status 1,
before any worker starts (uvicorn itself would log JSON and exit 3)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from contextstore.interfaces.apikeys import create_key_file
from contextstore.interfaces.cli import app


@pytest.fixture
def environment(tmp_path: Path) -> dict[str, str]:
    keys = tmp_path / "keys.json"
    create_key_file(keys)
    return {
        "CONTEXTSTORE_API_KEYS": str(keys),
        "CONTEXTSTORE_DATABASE_URL": f"sqlite:///{tmp_path / 'serve.db'}",
        "CONTEXTSTORE_REDIS_URL": "",
        "COLUMNS": "80",
    }


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


def serve(environment: dict[str, str], *args: str) -> Result:
    return CliRunner().invoke(app, ["serve", *args], env=environment)


def assert_one_line(result: Result, line: str) -> None:
    assert result.exit_code == 1, result.output
    assert result.stdout == ""
    assert result.stderr == f"error: {line}\n"


def test_a_busy_port(environment: dict[str, str], busy_port: int) -> None:
    result = serve(environment, "--port", str(busy_port))
    assert_one_line(result, f"cannot listen on 127.0.0.1:{busy_port}: address already in use")


def test_a_host_that_is_not_this_machines(environment: dict[str, str]) -> None:
    # 192.0.2.0/24 is reserved for documentation: never an address of this machine.
    result = serve(environment, "--host", "192.0.2.1", "--port", "8080")
    assert_one_line(result, "cannot listen on 192.0.2.1:8080: cannot assign requested address")


def test_an_unreadable_key_file(environment: dict[str, str], tmp_path: Path) -> None:
    environment["CONTEXTSTORE_API_KEYS"] = str(tmp_path)  # a directory
    result = serve(environment)
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith(f"error: cannot read the key file {tmp_path}: ")
    assert result.stderr.count("\n") == 1


def test_a_missing_key_file(environment: dict[str, str], tmp_path: Path) -> None:
    environment["CONTEXTSTORE_API_KEYS"] = str(tmp_path / "nowhere.json")
    result = serve(environment)
    assert_one_line(
        result,
        f"the key file {tmp_path / 'nowhere.json'} does not exist; create it with "
        f"'contextstore keys add --file {tmp_path / 'nowhere.json'}'",
    )
