"""A Prometheus ``/metrics`` endpoint for one service's own registry.

Each service instance owns a ``CollectorRegistry`` (not the process-global one) so that several
servers can run in one process, as they do in tests, without clashing metric names.
"""

from __future__ import annotations

import threading
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server


class MetricsEndpoint:
    """A running ``/metrics`` HTTP server; ``port`` is the bound port (useful with port 0)."""

    def __init__(self, registry: CollectorRegistry, host: str = "127.0.0.1", port: int = 0):
        try:
            server, thread = start_http_server(port, addr=host, registry=registry)
        except OSError as exc:
            raise OSError(
                exc.errno, f"cannot listen on {host}:{port} (metrics): {exc.strerror or exc}"
            ) from None
        self._server: WSGIServer = server
        self._thread: threading.Thread = thread
        self.host = host
        self.port: int = server.server_port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
