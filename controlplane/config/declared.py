"""The control plane's declared options, once: flag, ``CACHEROUTE_<NAME>`` env, ``--config``.

Defaults come from :class:`~controlplane.config.settings.ControlPlaneConfig`; the plan
lifecycle's options are declared in :mod:`controlplane.lifecycle.options` and joined here.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from controlplane.config.settings import ControlPlaneConfig
from controlplane.core.report_checks import parse_networks
from controlplane.lifecycle.options import LIFECYCLE_OPTIONS
from servekit.exposure import ALLOW_UNAUTHENTICATED
from servekit.flags import (
    LOG_OPTIONS,
    SERVER_TLS_OPTIONS,
    non_negative_float,
    non_negative_int,
    optional_path,
    positive_float,
    positive_int,
)
from servekit.options import Option, OptionSet


def _networks(text: str) -> tuple[str, ...]:
    """``--agent-networks``: comma-separated CIDRs, each checked."""
    networks = tuple(n.strip() for n in text.split(",") if n.strip())
    try:
        parse_networks(networks)
    except ValueError as exc:  # argparse shows an ArgumentTypeError's own message
        raise argparse.ArgumentTypeError(str(exc)) from None
    return networks


D = ControlPlaneConfig()
LISTEN = Option("listen", D.listen, str, "gRPC HOST:PORT (port 0: any free port)")
REDIS_URL = Option(
    "redis_url",
    D.redis_url,
    str,
    "redis://host:port/db; empty: run an embedded Redis, supervised (restarted when it dies), "
    "on --embedded-redis-port",
)
EMBEDDED_REDIS_PORT = Option(
    "embedded_redis_port",
    D.embedded_redis_port,
    non_negative_int,
    "port of the embedded Redis, fixed so routers find it after a restart "
    "(--redis-url redis://HOST:PORT/0); 0: any free port",
)
EMBEDDED_REDIS_BIND = Option(
    "embedded_redis_bind",
    D.embedded_redis_bind,
    str,
    "listen address of the embedded Redis (0.0.0.0: reachable by routers elsewhere)",
)
REDIS_DATA_DIR = Option(
    "redis_data_dir",
    "",
    str,
    "folder of the embedded Redis's AOF persistence; empty: $XDG_STATE_HOME/cacheroute/"
    "redis-PORT (~/.local/state/...) for a fixed port, none for port 0; 'off': no persistence",
)
INSTANCE_ID = Option(
    "instance_id", D.instance_id, str, "this instance's id (default: HOSTNAME:PID)"
)
METRICS_LISTEN = Option(
    "metrics_listen",
    D.metrics_listen,
    str,
    "HOST:PORT of the Prometheus /metrics endpoint; empty or 'off' disables it",
)
LOAD_PUBLISH_INTERVAL = Option(
    "load_publish_interval",
    D.load_publish_interval_s,
    positive_float,
    "seconds between load snapshots (also the report interval asked of agents)",
)
NODE_TIMEOUT_INTERVALS = Option(
    "node_timeout_intervals",
    D.node_timeout_intervals,
    positive_float,
    "a node is down when its last report is older than this many of its report intervals",
)
REPORT_RETENTION = Option(
    "report_retention",
    D.report_retention_s,
    non_negative_float,
    "seconds a stored agent report is kept after it arrived: the leader forgets older ones (an "
    "agent gone without leaving; never while its node could still be up); 0: kept forever",
)
PLAN_INTERVAL = Option(
    "plan_interval",
    D.plan_interval_s,
    non_negative_float,
    "seconds between automatic plan builds (stored, never activated); 0: on demand only",
)
Q_CAP = Option(
    "q_cap",
    D.q_cap,
    non_negative_float,
    "per-destination load target (requests/s) for plans; 0: total rate / destinations",
)
SLOTS_PER_NODE = Option(
    "slots_per_node", D.slots_per_node, non_negative_int, "warm slots per destination (W)"
)
RATE_HALF_LIFE = Option(
    "rate_half_life",
    D.rate_half_life_s,
    positive_float,
    "half-life in seconds of the per-key rate estimator's exponential decay",
)
RATE_UPDATE_INTERVAL = Option(
    "rate_update_interval",
    D.rate_update_interval_s,
    positive_float,
    "seconds between reads of the routers' traffic reports",
)
RATE_MAX_KEYS = Option(
    "rate_max_keys",
    D.rate_max_keys,
    non_negative_int,
    "most keys the rate estimator tracks (the lowest rates are dropped first)",
)
LEADER_LEASE_TTL = Option(
    "leader_lease_ttl",
    D.leader_lease_ttl_s,
    positive_float,
    "seconds the leader lease lives without renewal (renewed every third of it)",
)
LEADER_GRACE = Option(
    "leader_grace",
    D.leader_grace_s,
    non_negative_float,
    "seconds a new leader keeps nodes the previous snapshot showed healthy up while their "
    "agents reconnect (longer than the agents' reconnect backoff)",
)
AUTH_FILE: Option[Path | None] = Option(
    "auth_file",
    None,
    optional_path,
    "YAML list of clients {name, role: read|write|agent, sha256: hex SHA-256 of the bearer "
    "token | subject: mTLS certificate name}; every RPC then needs credentials",
)
MAX_REQUEST_BYTES = Option(
    "max_request_bytes",
    D.max_request_bytes,
    positive_int,
    "largest request of every RPC but ImportPlan, in bytes (refused before it is parsed)",
)
MAX_IMPORT_BYTES = Option(
    "max_import_bytes",
    D.max_import_bytes,
    positive_int,
    "largest ImportPlan request (a whole table), in bytes; the server-wide gRPC limit",
)
AGENT_NETWORKS = Option(
    "agent_networks",
    D.agent_networks,
    _networks,
    "comma-separated CIDRs that agent-reported engine addresses must lie in "
    "(e.g. 10.0.0.0/8,fd00::/8); empty: any address",
    shown_default="''",
)
SHUTDOWN_GRACE = Option(
    "shutdown_grace",
    D.grace_s,
    non_negative_float,
    "seconds in-flight RPCs get to finish on SIGTERM",
)
OPTIONS = OptionSet(
    LISTEN, REDIS_URL, EMBEDDED_REDIS_PORT, EMBEDDED_REDIS_BIND, REDIS_DATA_DIR, INSTANCE_ID,
    METRICS_LISTEN, LOAD_PUBLISH_INTERVAL, NODE_TIMEOUT_INTERVALS, REPORT_RETENTION,
    PLAN_INTERVAL, Q_CAP,
    SLOTS_PER_NODE, RATE_HALF_LIFE, RATE_UPDATE_INTERVAL, RATE_MAX_KEYS, LEADER_LEASE_TTL,
    LEADER_GRACE, AUTH_FILE, ALLOW_UNAUTHENTICATED, MAX_REQUEST_BYTES, MAX_IMPORT_BYTES,
    AGENT_NETWORKS, SHUTDOWN_GRACE,
    LIFECYCLE_OPTIONS,
    SERVER_TLS_OPTIONS, LOG_OPTIONS,
)  # fmt: skip
