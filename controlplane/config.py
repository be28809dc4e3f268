"""The control plane's options: one frozen dataclass, and the argparse parser that fills it.

Every option comes from a flag, a ``CACHEROUTE_<NAME>`` environment variable or ``--config FILE``
(declared once in ``OPTIONS``, see :mod:`servekit.options`); ``python -m controlplane --help``
lists them all.
"""

from __future__ import annotations

import argparse
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cacheroute_state.embedded import DEFAULT_PORT, bound_beyond_loopback, default_data_dir
from controlplane.core.report_checks import parse_networks
from controlplane.core.report_expiry import DEFAULT_RETENTION_S
from controlplane.lifecycle.options import LIFECYCLE_OPTIONS, lifecycle_values
from controlplane.services.limits import DEFAULT_IMPORT_BYTES, DEFAULT_REQUEST_BYTES
from servekit.addresses import parse_host_port
from servekit.auth_file import AuthFileError, load_auth_file
from servekit.exposure import ALLOW_UNAUTHENTICATED, check_exposure
from servekit.flags import (
    LOG_FORMAT,
    LOG_LEVEL,
    LOG_OPTIONS,
    SERVER_TLS_OPTIONS,
    add_version_flag,
    non_negative_float,
    non_negative_int,
    optional_path,
    positive_float,
    positive_int,
    server_tls,
)
from servekit.options import Option, OptionSet, SettingsError
from servekit.tls import TlsConfig


@dataclass(frozen=True)
class ControlPlaneConfig:
    listen: str = "127.0.0.1:50051"
    redis_url: str = ""
    # The embedded Redis (no redis_url): fixed port, AOF under redis_data_dir (None: the default
    # folder for a fixed port, none for port 0) unless redis_persistence is off.
    redis_data_dir: Path | None = None
    redis_persistence: bool = True
    embedded_redis_port: int = DEFAULT_PORT
    embedded_redis_bind: str = "127.0.0.1"
    instance_id: str = ""
    metrics_listen: str = "127.0.0.1:9091"
    load_publish_interval_s: float = 0.25
    node_timeout_intervals: float = 3.0
    # Stored reports older than this are forgotten by the leader (controlplane/core/report_expiry).
    report_retention_s: float = DEFAULT_RETENTION_S
    plan_interval_s: float = 0.0
    # 0: derive per build as the mean per-destination rate (total rate / destinations).
    q_cap: float = 0.0
    slots_per_node: int = 8
    rate_half_life_s: float = 60.0
    rate_update_interval_s: float = 1.0
    rate_max_keys: int = 250_000
    leader_lease_ttl_s: float = 3.0
    # >= the agents' longest reconnect backoff (5 s) plus a connect: see
    # controlplane/cluster/loads.py.
    leader_grace_s: float = 8.0
    # CIDRs agent-reported engine addresses must lie in; empty: any address (see report_checks).
    agent_networks: tuple[str, ...] = ()
    # YAML list of {name, role, sha256|subject}: every RPC then needs a token or known cert.
    auth_file: Path | None = None
    # Per-method request size limits, checked before parsing (controlplane/services/limits.py).
    max_request_bytes: int = DEFAULT_REQUEST_BYTES
    max_import_bytes: int = DEFAULT_IMPORT_BYTES
    grace_s: float = 5.0
    # Plan lifecycle (issue 11; declared in controlplane/lifecycle/options.py): the replanner's
    # churn cap, automatic mode, the shadow replay's budget and the live guard.
    max_churn: float = 0.10
    auto_interval_s: float = 60.0
    shadow_max_requests: int = 20_000
    shadow_seeds: int = 3
    shadow_iterations: int = 4
    shadow_recent_minutes: int = 10
    shadow_profile: str = ""  # the pool's engine profile in the replay ("": the 70B testbed)
    shadow_policy: str = "cacheroute"  # the routers' policy the replay follows the plan with
    shadow_min_samples: int = 300  # fewer sampled requests: the verdict is inconclusive
    shadow_inconclusive: str = "refuse"  # or "allow": the shadow gate's rule for inconclusive
    plan_retention: int = 50  # stored versions kept per pool by the leader (0: all)
    guard_window_s: float = 60.0
    guard_settle_s: float = 5.0
    guard_max_regression: float = 0.5
    guard_floor_s: float = 0.25
    guard_min_samples: int = 50
    guard_action: str = "disable"
    guard_all_rollouts: bool = False
    # Byte-aware admission in live builds (controlplane/core/live_sizes.py): off while 0.
    cache_budget: float = 0.0
    byte_rank: str = "best"
    prefix_sizes: dict[str, float] = field(default_factory=dict)  # configured; win over reports
    tls: TlsConfig | None = None
    log_json: bool = True
    log_level: str = "info"

    @property
    def report_interval_ms(self) -> int:
        """The report interval the control plane asks agents for: one report per snapshot."""
        return max(1, round(self.load_publish_interval_s * 1000))

    def embedded_data_dir(self) -> Path | None:
        """Where the embedded Redis persists, or None for an ephemeral one."""
        if not self.redis_persistence:
            return None
        if self.redis_data_dir is not None:
            return self.redis_data_dir
        return default_data_dir(self.embedded_redis_port) if self.embedded_redis_port else None

    def resolved_instance_id(self) -> str:
        return self.instance_id or f"{socket.gethostname()}:{os.getpid()}"


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


def build_parser() -> argparse.ArgumentParser:
    parser = OPTIONS.parser(
        prog="python -m controlplane",
        description="CacheRoute control plane: agent registry, load snapshots, rate estimation, "
        "planning and the admin API used by cachectl.",
    )
    add_version_flag(parser)
    return parser


def parse_config(
    argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> ControlPlaneConfig:
    """Options from flags, environment and config file: a bad flag exits via argparse (status
    2); a bad environment or file value raises SettingsError naming its source."""
    parser = build_parser()
    args = OPTIONS.parse(parser, argv, environ)
    try:
        tls = server_tls(args)
    except SettingsError as exc:
        parser.error(str(exc))
    metrics_listen = METRICS_LISTEN.value(args)
    metrics_listen = "" if metrics_listen in ("", "off") else metrics_listen
    try:
        if metrics_listen:
            parse_host_port(metrics_listen)
    except ValueError as exc:
        parser.error(f"--metrics-listen {METRICS_LISTEN.value(args)!r}: {exc}, '' or off")
    data_dir = REDIS_DATA_DIR.value(args)
    auth_file = AUTH_FILE.value(args)
    if auth_file is not None:
        try:  # checked here so a bad file is one line, not a traceback at start
            load_auth_file(auth_file)
        except AuthFileError as exc:
            raise SettingsError(str(exc)) from None
    check_exposure(
        "control plane",
        LISTEN.value(args),
        authenticated=auth_file is not None or (tls is not None and tls.client_ca_file is not None),
        allow_unauthenticated=ALLOW_UNAUTHENTICATED.value(args),
    )
    config = ControlPlaneConfig(
        listen=LISTEN.value(args),
        redis_url=REDIS_URL.value(args),
        redis_data_dir=None if data_dir in ("", "off") else Path(data_dir),
        redis_persistence=data_dir != "off",
        embedded_redis_port=EMBEDDED_REDIS_PORT.value(args),
        embedded_redis_bind=EMBEDDED_REDIS_BIND.value(args),
        instance_id=INSTANCE_ID.value(args),
        metrics_listen=metrics_listen,
        load_publish_interval_s=LOAD_PUBLISH_INTERVAL.value(args),
        node_timeout_intervals=NODE_TIMEOUT_INTERVALS.value(args),
        report_retention_s=REPORT_RETENTION.value(args),
        plan_interval_s=PLAN_INTERVAL.value(args),
        q_cap=Q_CAP.value(args),
        slots_per_node=SLOTS_PER_NODE.value(args),
        rate_half_life_s=RATE_HALF_LIFE.value(args),
        rate_update_interval_s=RATE_UPDATE_INTERVAL.value(args),
        rate_max_keys=RATE_MAX_KEYS.value(args),
        leader_lease_ttl_s=LEADER_LEASE_TTL.value(args),
        leader_grace_s=LEADER_GRACE.value(args),
        agent_networks=AGENT_NETWORKS.value(args),
        auth_file=auth_file,
        max_request_bytes=MAX_REQUEST_BYTES.value(args),
        max_import_bytes=MAX_IMPORT_BYTES.value(args),
        grace_s=SHUTDOWN_GRACE.value(args),
        **lifecycle_values(args),
        tls=tls,
        log_json=LOG_FORMAT.value(args) == "json",
        log_level=LOG_LEVEL.value(args),
    )
    exposed = bound_beyond_loopback(config.embedded_redis_bind)
    if not config.redis_url and exposed and config.embedded_data_dir() is None:
        # Name the flag that removed the directory (issue 34: with --redis-data-dir off and the
        # fixed default port, this said to fix the port).
        cause = (
            "--redis-data-dir off leaves none: give --redis-data-dir DIR"
            if not config.redis_persistence
            else "--embedded-redis-port 0 (a free port) has no default one: set --redis-data-dir "
            "DIR or a fixed --embedded-redis-port"
        )
        raise SettingsError(
            "--embedded-redis-bind beyond loopback needs a data directory to keep its generated "
            f"password in; {cause} (or bind to loopback)"
        )
    return config
