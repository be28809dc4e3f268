"""Connection hygiene of every gRPC port: how many connections, and how long an idle one lives.

Under a 1,024 open-file limit, 1,100 idle TCP connections to the router's picker port or its
``Route`` port pinned every descriptor: new ``Route`` calls failed 5 of 5, HTTP 4 of 5, and the
server closed none. The HTTP front had an fd budget; the gRPC ports had none. Now every
:class:`~servekit.grpc_server.GrpcServer` sets gRPC core's own limits:

* **Connections per port** (``grpc.max_allowed_incoming_connections``): at most
  ``max(MIN_CONNECTIONS, (soft RLIMIT_NOFILE - FD_RESERVE) // PORT_SHARE)``; gRPC closes a
  connection over the cap as soon as it is accepted. With the HTTP front's half, a router's three
  gRPC ports (``Route``, the picker, the picker's health) together stay below the limit, so a
  flood of one port leaves the others, Redis and the engines their descriptors.
* **Half-open connections** (``grpc.server_handshake_timeout_ms``): a connection that has not
  sent the HTTP/2 preface and settings within ``handshake_timeout_s`` is closed, so held
  connections give their slots back and new callers get in.
* **Idle and age** (``grpc.max_connection_idle_ms``, ``grpc.max_connection_age_ms`` with
  ``..._grace_ms``): a connection without a call for ``idle_s`` is closed with a GOAWAY (clients
  reconnect on their next call); ``max_age_s`` (0: off) ends long-lived ones, after a grace for
  calls in flight (off on the control plane: an agent's stream is its node's liveness).
* **Streams per connection** (``grpc.max_concurrent_streams``).
* **Receive windows** (``grpc.http2.bdp_probe``, ``grpc.http2.lookahead_bytes``): gRPC core
  grows a connection's HTTP/2 windows from its bandwidth-delay estimate, and data that arrives
  inside a window is buffered by core whether or not the servicer reads it. On the picker port
  twenty unfinished 15 MiB bodies then took a router's resident memory up by 110-300 MiB instead
  of the 70 MiB the body budget allows (3 of 12 runs of
  ``tests/system/test_faults_picker_bodies.py``, three at a time; gRPC's threads' malloc arenas
  filled with received, unread chunks). The router's ports set a fixed window per stream
  (``receive_window_bytes``, 256 KiB): what a client can park in a router is bounded by its
  streams, not by the estimate, and one stream's loopback upload keeps 93 % of its speed with
  the probe (a fixed 64 KiB window kept 68 %; ``bench/bench_receive_window.py``,
  docs/benchmarks.md). The control plane keeps the probe: its ``ImportPlan`` carries whole
  tables.

The soft open-file limit is raised to the hard one (up to :data:`WANTED_FDS`) first, as the HTTP
front does.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass

import structlog

log = structlog.get_logger("servekit.grpc_hygiene")
FD_RESERVE = 256  # Redis, logs, the metrics endpoint, the table decoder, probes
PORT_SHARE = 8  # each gRPC port may take 1/8 of the rest (the HTTP front takes 1/2)
MIN_CONNECTIONS = 16
WANTED_FDS = 65_536
FIXED_RECEIVE_WINDOW = 256 * 1024  # the router's ports (module docstring)


@dataclass(frozen=True)
class ConnectionHygiene:
    """gRPC core's connection limits for one port (module docstring)."""

    max_connections: int = 0  # 0: derived from the open-file limit
    handshake_timeout_s: float = 10.0
    idle_s: float = 300.0
    max_age_s: float = 0.0  # 0: off
    age_grace_s: float = 300.0
    max_streams: int = 1024
    receive_window_bytes: int = 0  # a fixed window per stream; 0: gRPC's bandwidth probe


def open_file_limit(wanted: int = WANTED_FDS) -> int:
    """Raise the soft open-file limit towards ``wanted`` (up to the hard one); the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open-file limit", soft=soft, hard=hard, error=str(exc))
    return int(soft) if soft != resource.RLIM_INFINITY else wanted


def connection_cap(hygiene: ConnectionHygiene, soft_limit: int) -> int:
    derived = max(MIN_CONNECTIONS, (soft_limit - FD_RESERVE) // PORT_SHARE)
    return min(hygiene.max_connections, derived) if hygiene.max_connections else derived


def grpc_options(hygiene: ConnectionHygiene) -> tuple[tuple[str, int], ...]:
    """The ``grpc.aio.server`` options for ``hygiene`` under this process's open-file limit."""
    options = [
        ("grpc.max_allowed_incoming_connections", connection_cap(hygiene, open_file_limit())),
        ("grpc.server_handshake_timeout_ms", int(hygiene.handshake_timeout_s * 1000)),
        ("grpc.max_connection_idle_ms", int(hygiene.idle_s * 1000)),
        ("grpc.max_concurrent_streams", hygiene.max_streams),
    ]
    if hygiene.receive_window_bytes:
        options.append(("grpc.http2.bdp_probe", 0))
        options.append(("grpc.http2.lookahead_bytes", hygiene.receive_window_bytes))
    if hygiene.max_age_s > 0:
        options.append(("grpc.max_connection_age_ms", int(hygiene.max_age_s * 1000)))
        options.append(("grpc.max_connection_age_grace_ms", int(hygiene.age_grace_s * 1000)))
    return tuple(options)
