"""Signing in to the console of a real server with httpx, as a browser without JavaScript would."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from tests.interfaces.service.server import Server

CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def csrf_of(html: str) -> str:
    found = CSRF.search(html)
    assert found is not None, html
    return found.group(1)


def browser(server: Server) -> httpx.Client:
    """A client with a cookie jar that does not follow redirects (so tests see them)."""
    return httpx.Client(base_url=server.url, timeout=30.0, follow_redirects=False)


def sign_in(client: httpx.Client, key: str) -> httpx.Response:
    form = client.get("/console/signin")
    assert form.status_code == 200, form.text
    return client.post("/console/signin", data={"csrf": csrf_of(form.text), "key": key})


@contextmanager
def signed_in(server: Server, key: str) -> Iterator[httpx.Client]:
    """A client signed in with ``key`` (an admin key), closed on exit."""
    with browser(server) as client:
        response = sign_in(client, key)
        assert response.status_code == 303, response.text
        assert response.headers["location"] == "/console/"
        yield client
