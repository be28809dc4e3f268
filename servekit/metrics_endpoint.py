"""A Prometheus ``/metrics`` endpoint for one service's own registry.

Each service instance owns a ``CollectorRegistry`` (not the process-global one) so that several
servers can run in one process, as they do in tests, without clashing metric names.

The server is prometheus_client's (its WSGI app and threading server), started here rather than
by ``start_http_server`` only to poll for shutdown every :data:`POLL_S`: with the library's 0.5 s
poll, ``close()`` blocked the caller's event loop for up to half a second on every stop.
"""

from __future__ import annotations

import socket
import threading
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

POLL_S = 0.02


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """No access log on stderr (the services log as structlog JSON)."""


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
                str(sockaddr[0]), port, make_wsgi_app(registry), Server, handler_class=_QuietHandler
            )
        except OSError as exc:
            raise OSError(
                exc.errno, f"cannot listen on {host}:{port} (metrics): {exc.strerror or exc}"
            ) from None
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": POLL_S},
            name="metrics-endpoint",
            daemon=True,
        )
        self._thread.start()
        self.host = host
        self.port: int = self._server.server_port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
