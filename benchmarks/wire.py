"""A TCP proxy that counts round trips on the wire, whatever the client library.

``RoundTripProxy(host, port)`` listens on a free loopback port and forwards every
connection to ``host:port``. A *round trip* is counted each time a client sends after the
server last spoke on that connection (a pipelined burst of several messages is one), so
the count is what a network would charge: BEGIN, COMMIT, a prepared statement's PARSE, a
Redis command — each is visible, however the driver reports it. Counts are per test, exact.
With ``keep_sent=True``, ``sent`` holds every byte the clients sent, so a test can also say
*what* went over the wire (no ``BEGIN``, no ``COMMIT``). One copy, used by the round-trip
tests and the engine benchmark alike.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
from types import TracebackType
from typing import Self


class RoundTripProxy:
    def __init__(self, host: str, port: int, *, keep_sent: bool = False) -> None:
        self.target = (host, port)
        self._keep_sent = keep_sent
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._round_trips = 0
        self._sent = bytearray()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._accepting = threading.Thread(target=self._accept, daemon=True)
        self._accepting.start()

    @property
    def round_trips(self) -> int:
        with self._lock:
            return self._round_trips

    @property
    def sent(self) -> bytes:
        """Everything the clients sent so far, all connections in arrival order."""
        with self._lock:
            return bytes(self._sent)

    def _accept(self) -> None:
        self._listener.settimeout(0.1)
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            server = socket.create_connection(self.target)
            for sock in (client, server):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            thread = threading.Thread(target=self._pump, args=(client, server), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _pump(self, client: socket.socket, server: socket.socket) -> None:
        selector = selectors.DefaultSelector()
        selector.register(client, selectors.EVENT_READ, server)
        selector.register(server, selectors.EVENT_READ, client)
        client_turn = True  # the first bytes from the client start a round trip
        try:
            while not self._stop.is_set():
                for key, _ in selector.select(timeout=0.1):
                    source: socket.socket = key.fileobj  # type: ignore[assignment]
                    data = source.recv(65536)
                    if not data:
                        return
                    if source is client:
                        with self._lock:
                            if self._keep_sent:
                                self._sent += data
                            if client_turn:
                                self._round_trips += 1
                        client_turn = False
                    elif source is server:
                        client_turn = True
                    key.data.sendall(data)
        except OSError:
            return
        finally:
            selector.close()
            for sock in (client, server):
                with contextlib.suppress(OSError):
                    sock.close()

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        self._accepting.join(timeout=2)
        for thread in self._threads:
            thread.join(timeout=2)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
