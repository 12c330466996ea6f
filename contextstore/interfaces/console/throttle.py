"""Console sign-in attempts, limited per client address.

An address whose sign-ins failed ``MAX_FAILURES`` times (a key that is not valid) within
``WINDOW_SECONDS`` is refused (429, with ``Retry-After``) until the oldest of those failures
is a window old; its key is not even checked meanwhile. A success clears the address. An
IPv6 client counts by its /64 network, the block one host is usually given, so rotating
addresses within it gains nothing.

The counts live in the server process: with ``--workers N`` an address may fail up to N
times the limit a minute, which still turns guessing a key (256 random bits) from slow into
slower; the limit is there to stop a password-guessing tool from hammering the form.
Behind a reverse proxy the client address is the one the proxy forwards (uvicorn's
``--forwarded-allow-ips``), else every client shares the proxy's address and its limit.
Time is whatever ``now`` the caller passes (the console's injected clock).
"""

from __future__ import annotations

import ipaddress
import math
from collections import OrderedDict, deque
from typing import Final

MAX_FAILURES: Final = 10
WINDOW_SECONDS: Final = 60.0
MAX_ADDRESSES: Final = 10_000
"""Addresses remembered at once; beyond it the one that failed longest ago is forgotten."""


def client_key(host: str | None) -> str:
    """What the limit counts by: the address, or the /64 network of an IPv6 address."""
    if not host:
        return "unknown"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.ip_network(f"{address}/64", strict=False))
    return str(address)


class SignInThrottle:
    """Failed sign-ins per client key over a sliding window (see the module doc)."""

    def __init__(
        self,
        max_failures: int = MAX_FAILURES,
        window_seconds: float = WINDOW_SECONDS,
        max_addresses: int = MAX_ADDRESSES,
    ) -> None:
        self.max_failures = max_failures
        self.window_seconds = window_seconds
        self.max_addresses = max_addresses
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def retry_after(self, client: str, now: float) -> int | None:
        """Whole seconds until ``client`` may try again, or ``None`` when it may now."""
        recent = self._recent(client, now)
        if len(recent) < self.max_failures:
            return None
        return max(1, math.ceil(recent[0] + self.window_seconds - now))

    def failed(self, client: str, now: float) -> None:
        """Count a failed sign-in of ``client`` at ``now``."""
        recent = self._recent(client, now)
        recent.append(now)
        while len(recent) > self.max_failures:
            recent.popleft()
        self._failures[client] = recent
        self._failures.move_to_end(client)
        while len(self._failures) > self.max_addresses:
            self._failures.popitem(last=False)

    def succeeded(self, client: str) -> None:
        """Forget ``client``'s failures: it signed in."""
        self._failures.pop(client, None)

    def _recent(self, client: str, now: float) -> deque[float]:
        recent = self._failures.get(client, deque())
        while recent and recent[0] <= now - self.window_seconds:
            recent.popleft()
        if not recent:
            self._failures.pop(client, None)
        return recent
