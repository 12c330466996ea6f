"""``mask_url``: every form a URL is typed in hides its password, parseable or not."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contextstore.backends.urls import mask_url
from tests import REPO_ROOT


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("alice:S3CRETPW@host", "alice:***@host"),
        ("alice:S3CRETPW@host/db", "alice:***@host/db"),
        ("//alice:S3CRETPW@host", "//alice:***@host"),
        ("postgresql:alice:S3CRETPW@host", "postgresql:***@host"),
        ("postgresql://alice:S3/CRETPW@host/db", "postgresql://alice:***@host/db"),
        ("postgresql://u:pa?ss@h/db", "postgresql://u:***@h/db"),
        ("postgresql://u:pa#ss@h/db", "postgresql://u:***@h/db"),
        (
            "postgresql://u:p@ss@h:5432/db?sslmode=require",
            "postgresql://u:***@h:5432/db?sslmode=require",
        ),
        ("redis://alice:S3/CRETPW@127.0.0.1:1/0", "redis://alice:***@127.0.0.1:1/0"),
        ("unix://:secret@/run/redis.sock?db=1", "unix://:***@/run/redis.sock?db=1"),
        ("a:b@c?password=z#q", "a:***@c?password=***#q"),
        ("redis://user@h/0", "redis://user@h/0"),
        ("sqlite:////srv/data@2026/x.db", "sqlite:////srv/data@2026/x.db"),
    ],
)
def test_every_form_of_a_url_is_masked(url: str, shown: str) -> None:
    assert mask_url(url) == shown


SCHEMES = st.sampled_from(["", "//", "redis://", "rediss://", "postgresql+psycopg://", "x:"])
NO_AT = st.text(st.characters(blacklist_characters="@", blacklist_categories=("Cs",)), max_size=12)
USERS = st.text(st.characters(blacklist_characters="@:", blacklist_categories=("Cs",)), max_size=8)


@given(
    scheme=SCHEMES,
    user=st.text(
        st.characters(blacklist_characters="@:", blacklist_categories=("Cs",)), max_size=8
    ),
    password=st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=16),
    rest=NO_AT,
)
def test_no_password_survives_masking(scheme: str, user: str, password: str, rest: str) -> None:
    secret = f"\u2603{password}"  # a snowman no other part holds marks the secret
    url = f"{scheme}{user}:{secret}@host{rest}"
    assert secret not in mask_url(url)


@pytest.mark.slow
@pytest.mark.parametrize("variable", ["CONTEXTSTORE_DATABASE_URL", "CONTEXTSTORE_REDIS_URL"])
@pytest.mark.parametrize(
    "url",
    ["alice:S3CRETPW@host", "alice:S3/CRETPW@127.0.0.1:1", "redis://alice:S3/CRETPW@127.0.0.1:1/0"],
)
def test_the_cli_never_echoes_a_password_without_a_scheme(variable: str, url: str) -> None:
    env = {name: value for name, value in os.environ.items() if not name.startswith("CONTEXTSTORE")}
    env[variable] = url
    command = ["lessons", "list"] if variable.endswith("DATABASE_URL") else ["cache", "stats"]
    result = subprocess.run(
        [sys.executable, "-m", "contextstore", *command],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert result.stderr.startswith("error:") and result.stderr.count("\n") == 1, result.stderr
    for part in ("S3CRETPW", "S3/", "CRETPW"):
        assert part not in result.stdout + result.stderr
