"""The control plane's options: one frozen dataclass, and the argparse parser that fills it.

Every option comes from a flag, a ``CACHEROUTE_<NAME>`` environment variable or ``--config FILE``
(see :mod:`servekit.settings`); ``python -m controlplane --help`` lists them all.
"""

from __future__ import annotations

import argparse
import os
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cacheroute_state.embedded import DEFAULT_PORT, default_data_dir
from controlplane.report_checks import parse_networks
from servekit.addresses import parse_host_port
from servekit.flags import (
    HelpFormatter,
    add_log_flags,
    add_server_tls_flags,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
    server_tls,
)
from servekit.settings import SettingsError, add_config_flag, document_env, parse_settings
from servekit.tls import TlsConfig
from sim.engine_model import UnknownProfileError, get_profile

LEADER_LEASE = "controlplane"


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
    plan_interval_s: float = 0.0
    # 0: derive per build as the mean per-destination rate (total rate / destinations).
    q_cap: float = 0.0
    slots_per_node: int = 8
    # The churn-aware replanner's cap: at most this share of keys changes set per build.
    max_churn: float = 0.10
    rate_half_life_s: float = 60.0
    rate_update_interval_s: float = 1.0
    rate_max_keys: int = 250_000
    leader_lease_ttl_s: float = 3.0
    # >= the agents' longest reconnect backoff (5 s) plus a connect: see controlplane/loads.py.
    leader_grace_s: float = 8.0
    # CIDRs agent-reported engine addresses must lie in; empty: any address (see report_checks).
    agent_networks: tuple[str, ...] = ()
    # YAML list of {name, role, sha256|subject}: every RPC then needs a token or known cert.
    auth_file: Path | None = None
    grace_s: float = 5.0
    # Automatic mode (per pool, off until `cachectl plan auto enable`): controlplane/auto_mode.py.
    auto_interval_s: float = 60.0
    # The shadow replay's budget (ShadowPlan and automatic mode): sim/shadow_replay.py.
    shadow_max_requests: int = 20_000
    shadow_seeds: int = 3
    shadow_iterations: int = 4
    shadow_recent_minutes: int = 10
    shadow_profile: str = ""  # the pool's engine profile in the replay ("": the 70B testbed)
    # The live guard: controlplane/live_guard.py.
    guard_window_s: float = 60.0
    guard_settle_s: float = 5.0
    guard_max_regression: float = 0.5
    guard_floor_s: float = 0.25
    guard_min_samples: int = 50
    guard_action: str = "disable"
    guard_all_rollouts: bool = False
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m controlplane",
        description="CacheRoute control plane: agent registry, load snapshots, rate estimation, "
        "planning and the admin API used by cachectl.",
        formatter_class=HelpFormatter,
    )
    add = parser.add_argument
    add("--listen", default="127.0.0.1:50051", help="gRPC HOST:PORT (port 0: any free port)")
    add(
        "--redis-url",
        default="",
        help="redis://host:port/db; empty: run an embedded Redis, supervised (restarted when it "
        "dies), on --embedded-redis-port",
    )
    add(
        "--embedded-redis-port",
        type=non_negative_int,
        default=DEFAULT_PORT,
        help="port of the embedded Redis, fixed so routers find it after a restart "
        "(--redis-url redis://HOST:PORT/0); 0: any free port",
    )
    add(
        "--embedded-redis-bind",
        default="127.0.0.1",
        help="listen address of the embedded Redis (0.0.0.0: reachable by routers elsewhere)",
    )
    add(
        "--redis-data-dir",
        default="",
        help="folder of the embedded Redis's AOF persistence; empty: "
        "$XDG_STATE_HOME/cacheroute/redis-PORT (~/.local/state/...) for a fixed port, none for "
        "port 0; 'off': no persistence",
    )
    add("--instance-id", default="", help="this instance's id (default: HOSTNAME:PID)")
    add(
        "--metrics-listen",
        default="127.0.0.1:9091",
        help="HOST:PORT of the Prometheus /metrics endpoint; empty or 'off' disables it",
    )
    add(
        "--load-publish-interval",
        type=positive_float,
        default=0.25,
        help="seconds between load snapshots (also the report interval asked of agents)",
    )
    add(
        "--node-timeout-intervals",
        type=positive_float,
        default=3.0,
        help="a node is down when its last report is older than this many of its report intervals",
    )
    add(
        "--plan-interval",
        type=non_negative_float,
        default=0.0,
        help="seconds between automatic plan builds (stored, never activated); 0: on demand only",
    )
    add(
        "--q-cap",
        type=non_negative_float,
        default=0.0,
        help="per-destination load target (requests/s) for plans; 0: total rate / destinations",
    )
    add("--slots-per-node", type=non_negative_int, default=8, help="warm slots per destination (W)")
    add(
        "--max-churn",
        type=positive_float,
        default=0.10,
        help="most share of warm keys a churn-aware rebuild may move (0-1]; the imbalance bound "
        "then gives way to it when both cannot hold (controlplane/replanner.py)",
    )
    add(
        "--rate-half-life",
        type=positive_float,
        default=60.0,
        help="half-life in seconds of the per-key rate estimator's exponential decay",
    )
    add(
        "--rate-update-interval",
        type=positive_float,
        default=1.0,
        help="seconds between reads of the routers' traffic reports",
    )
    add(
        "--rate-max-keys",
        type=non_negative_int,
        default=250_000,
        help="most keys the rate estimator tracks (the lowest rates are dropped first)",
    )
    add(
        "--leader-lease-ttl",
        type=positive_float,
        default=3.0,
        help="seconds the leader lease lives without renewal (renewed every third of it)",
    )
    add(
        "--leader-grace",
        type=non_negative_float,
        default=8.0,
        help="seconds a new leader keeps nodes the previous snapshot showed healthy up while "
        "their agents reconnect (longer than the agents' reconnect backoff)",
    )
    add(
        "--auth-file",
        type=Path,
        default=None,
        help="YAML list of clients {name, role: read|write|agent, sha256: hex SHA-256 of the "
        "bearer token | subject: mTLS certificate name}; every RPC then needs credentials",
    )
    add(
        "--agent-networks",
        default="",
        help="comma-separated CIDRs that agent-reported engine addresses must lie in "
        "(e.g. 10.0.0.0/8,fd00::/8); empty: any address",
    )
    add(
        "--shutdown-grace",
        type=non_negative_float,
        default=5.0,
        help="seconds in-flight RPCs get to finish on SIGTERM",
    )
    _add_auto_flags(add)
    add_server_tls_flags(parser)
    add_log_flags(parser)
    add_config_flag(parser)
    document_env(parser)
    return parser


def _add_auto_flags(add: Callable[..., object]) -> None:
    """Automatic mode, the shadow replay's budget and the live guard."""
    add(
        "--auto-interval",
        type=positive_float,
        default=60.0,
        help="seconds between automatic-mode rounds (build, shadow, roll out if it passes) in "
        "pools whose automatic mode is on (`cachectl plan auto enable`)",
    )
    add(
        "--shadow-max-requests",
        type=positive_int,
        default=20_000,
        help="most requests a shadow replay replays (the stream's head is kept)",
    )
    add(
        "--shadow-seeds",
        type=positive_int,
        default=3,
        help="replays per load in a shadow (at least 2: the noise is their spread)",
    )
    add(
        "--shadow-iterations",
        type=positive_int,
        default=4,
        help="bisection steps of the shadow replay's knee search",
    )
    add(
        "--shadow-recent-minutes",
        type=positive_int,
        default=10,
        help="minutes of the routers' sampled trace automatic mode replays",
    )
    add(
        "--shadow-profile",
        default="",
        help="engine profile automatic mode's replays simulate (sim/engine_model.py names; "
        "empty: the 70B testbed profile)",
    )
    add(
        "--guard-window",
        type=positive_float,
        default=60.0,
        help="seconds of the live guard's before and after windows of pool p99 TTFT",
    )
    add(
        "--guard-settle",
        type=non_negative_float,
        default=5.0,
        help="seconds after a rollout before the guard's after-window starts (routers install)",
    )
    add(
        "--guard-max-regression",
        type=non_negative_float,
        default=0.5,
        help="the guard fires when p99 after > p99 before x (1 + this) ...",
    )
    add(
        "--guard-floor",
        type=non_negative_float,
        default=0.25,
        help="... and p99 after - p99 before > this many seconds (so noise does not fire it)",
    )
    add(
        "--guard-min-samples",
        type=positive_int,
        default=50,
        help="TTFT observations each window needs before the guard judges",
    )
    add(
        "--guard-action",
        choices=("disable", "rollback"),
        default="disable",
        help="what the guard does when it fires: disable the plan (Flat-LB) or roll back",
    )
    add(
        "--guard-all-rollouts",
        action="store_true",
        help="guard every rollout, not only automatic mode's",
    )


def parse_config(
    argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> ControlPlaneConfig:
    """Options from flags, environment and config file; errors exit via argparse."""
    parser = build_parser()
    args = parse_settings(parser, argv, environ)
    try:
        tls = server_tls(args)
    except SettingsError as exc:
        parser.error(str(exc))
    agent_networks = tuple(n.strip() for n in str(args.agent_networks).split(",") if n.strip())
    try:
        parse_networks(agent_networks)
    except ValueError as exc:
        parser.error(f"--agent-networks: {exc}")
    if args.max_churn > 1:
        parser.error(f"--max-churn must be within (0, 1], got {args.max_churn}")
    if args.shadow_profile:
        try:
            get_profile(args.shadow_profile)
        except UnknownProfileError as exc:
            parser.error(f"--shadow-profile: {exc}")
    if args.shadow_seeds < 2:
        parser.error(f"--shadow-seeds must be at least 2, got {args.shadow_seeds}")
    metrics_listen = "" if args.metrics_listen in ("", "off") else args.metrics_listen
    try:
        if metrics_listen:
            parse_host_port(metrics_listen)
    except ValueError as exc:
        parser.error(f"--metrics-listen {args.metrics_listen!r}: {exc}, '' or off")
    return ControlPlaneConfig(
        listen=args.listen,
        redis_url=args.redis_url,
        redis_data_dir=None if args.redis_data_dir in ("", "off") else Path(args.redis_data_dir),
        redis_persistence=args.redis_data_dir != "off",
        embedded_redis_port=args.embedded_redis_port,
        embedded_redis_bind=args.embedded_redis_bind,
        instance_id=args.instance_id,
        metrics_listen=metrics_listen,
        load_publish_interval_s=args.load_publish_interval,
        node_timeout_intervals=args.node_timeout_intervals,
        plan_interval_s=args.plan_interval,
        q_cap=args.q_cap,
        slots_per_node=args.slots_per_node,
        max_churn=args.max_churn,
        rate_half_life_s=args.rate_half_life,
        rate_update_interval_s=args.rate_update_interval,
        rate_max_keys=args.rate_max_keys,
        leader_lease_ttl_s=args.leader_lease_ttl,
        leader_grace_s=args.leader_grace,
        agent_networks=agent_networks,
        auth_file=args.auth_file,
        grace_s=args.shutdown_grace,
        auto_interval_s=args.auto_interval,
        shadow_max_requests=args.shadow_max_requests,
        shadow_seeds=args.shadow_seeds,
        shadow_iterations=args.shadow_iterations,
        shadow_recent_minutes=args.shadow_recent_minutes,
        shadow_profile=args.shadow_profile,
        guard_window_s=args.guard_window,
        guard_settle_s=args.guard_settle,
        guard_max_regression=args.guard_max_regression,
        guard_floor_s=args.guard_floor,
        guard_min_samples=args.guard_min_samples,
        guard_action=args.guard_action,
        guard_all_rollouts=args.guard_all_rollouts,
        tls=tls,
        log_json=args.log_format == "json",
        log_level=args.log_level,
    )
