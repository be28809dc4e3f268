"""A Prometheus ``/metrics`` endpoint for one service's own registry.

Each service instance owns a ``CollectorRegistry`` (not the process-global one) so that several
servers can run in one process, as they do in tests, without clashing metric names.

The server is prometheus_client's (its WSGI app and threading server), run by a loop of its own
rather than ``serve_forever``: that one wakes every poll interval to look for a shutdown request,
and each wake takes the GIL from the serving thread (50 a second at the 20 ms needed for a prompt
``close()``). This loop sleeps until a scrape connects or ``close()`` writes to a wake-up socket.
A scrape runs Python code for a few ms, so it runs inside :func:`servekit.gil.fast_switching`.
"""

from __future__ import annotations

import selectors
import socket
import threading
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from servekit.gil import fast_switching

_App = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """No access log on stderr (the services log as structlog JSON)."""


def _fast_switching_app(app: _App) -> _App:
    def scrape(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        with fast_switching():
            return list(app(environ, start_response))

    return scrape


class MetricsEndpoint:
    """A running ``/metrics`` HTTP server; ``port`` is the bound port (useful with port 0)."""

    def __init__(self, registry: CollectorRegistry, host: str = "127.0.0.1", port: int = 0):
        family, _, _, _, sockaddr = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]

        class Server(ThreadingWSGIServer):
            address_family = family

        try:
            self._server = make_server(
                str(sockaddr[0]), port, _fast_switching_app(make_wsgi_app(registry)), Server,
                handler_class=_QuietHandler,
            )  # fmt: skip
        except OSError as exc:
            raise OSError(
                exc.errno, f"cannot listen on {host}:{port} (metrics): {exc.strerror or exc}"
            ) from None
        self._wake_read, self._wake_write = socket.socketpair()
        self._thread = threading.Thread(target=self._serve, name="metrics-endpoint", daemon=True)
        self._thread.start()
        self.host = host
        self.port: int = self._server.server_port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def _serve(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self._server, selectors.EVENT_READ)
            selector.register(self._wake_read, selectors.EVENT_READ)
            while True:
                ready = {key.fileobj for key, _ in selector.select()}
                if self._wake_read in ready:
                    return
                # accept and hand the connection to a thread, as serve_forever does
                self._server._handle_request_noblock()  # type: ignore[attr-defined]

    def close(self) -> None:
        if self._wake_write.fileno() < 0:  # closed already
            return
        self._wake_write.send(b"x")
        self._thread.join(timeout=5)
        self._server.server_close()
        self._wake_read.close()
        self._wake_write.close()
