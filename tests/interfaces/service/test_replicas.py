"""Two ``contextstore serve`` processes on one PostgreSQL database and no key file: they
agree on every key and on the console's sessions at once, as replicas behind a balancer must.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.interfaces.service.conftest import drop_schema, postgres_schema_url
from tests.interfaces.service.console.helpers import browser, sign_in
from tests.interfaces.service.server import Server

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

NAMESPACE = "replicated"


@pytest.fixture(scope="module")
def replicas(
    postgres_server_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Server, Server]]:
    schema, url = postgres_schema_url(postgres_server_url)
    first = Server(tmp_path_factory.mktemp("replica-a"), url, shared_keys=True)
    second = Server(tmp_path_factory.mktemp("replica-b"), url, shared_keys=True)
    try:
        first.start()
        second.start()
        yield first, second
        assert first.stop() == 0, first.log.read_text()
        assert second.stop() == 0, second.log.read_text()
    finally:
        first.stop()
        second.stop()
        drop_schema(postgres_server_url, schema)


def keys_command(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``contextstore keys …`` in its own process, with no key file configured."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("CONTEXTSTORE_")}
    return subprocess.run(
        [sys.executable, "-m", "contextstore", "keys", *args, "--database-url", database_url],
        capture_output=True,
        text=True,
        timeout=120,
        env=environment,
        check=False,
    )


def statuses(servers: tuple[Server, Server], key: str) -> list[int]:
    codes = []
    for server in servers:
        with server.client(key) as client:
            codes.append(client.get("/v1/lessons").status_code)
    return codes


def test_a_key_added_or_revoked_anywhere_counts_on_every_replica_at_once(
    replicas: tuple[Server, Server],
) -> None:
    first, second = replicas
    added = keys_command(
        first.database_url, "add", "--namespace", NAMESPACE, "--role", "admin", "--label", "ops"
    )
    assert added.returncode == 0, added.stderr
    key = added.stdout.splitlines()[-1]
    # No wait between the write and the first request on either node.
    assert statuses(replicas, key) == [200, 200]
    other = second.key(NAMESPACE, "admin")  # through the store API, as a program would
    assert statuses(replicas, other) == [200, 200]

    listed = keys_command(first.database_url, "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert "csk_" not in listed.stdout  # ids only, never a key
    assert sorted(key_id.split("_")[1] for key_id in (key, other)) == sorted(
        row["id"] for row in json.loads(listed.stdout)
    )

    revoked = keys_command(first.database_url, "revoke", key.split("_")[1])
    assert revoked.returncode == 0, revoked.stderr
    assert statuses(replicas, key) == [401, 401]
    assert statuses(replicas, other) == [200, 200]
    revoked = keys_command(second.database_url, "revoke", other)
    assert revoked.returncode == 0, revoked.stderr
    assert statuses(replicas, other) == [401, 401]


def test_a_console_session_signed_in_on_one_replica_is_valid_on_the_other(
    replicas: tuple[Server, Server],
) -> None:
    first, second = replicas
    key = first.key(NAMESPACE, "admin")
    with browser(first) as on_first, browser(second) as on_second:
        assert sign_in(on_first, key).status_code == 303
        session = on_first.cookies.get("contextstore_console")
        assert session is not None
        on_second.cookies.set("contextstore_console", session)
        page = on_second.get("/console/lessons")
        assert page.status_code == 200, page.text
        assert "Sign in" not in page.text
        # Revoked through the node the session was not signed in on: both end it.
        assert keys_command(second.database_url, "revoke", key).returncode == 0
        for client in (on_first, on_second):
            ended = client.get("/console/lessons")
            assert (ended.status_code, ended.headers["location"]) == (303, "/console/signin")
