"""From flags, environment and config file to one checked :class:`ControlPlaneConfig`.

Checks that need several options at once (exposure, the embedded Redis's data directory, the auth
file) are made here, so a bad setting is one line at start, not a traceback later.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path

from cacheroute_state.embedded import bound_beyond_loopback
from controlplane.config.declared import (
    AGENT_NETWORKS,
    AUTH_FILE,
    EMBEDDED_REDIS_BIND,
    EMBEDDED_REDIS_PORT,
    INSTANCE_ID,
    LEADER_GRACE,
    LEADER_LEASE_TTL,
    LISTEN,
    LOAD_PUBLISH_INTERVAL,
    MAX_IMPORT_BYTES,
    MAX_REQUEST_BYTES,
    METRICS_LISTEN,
    NODE_TIMEOUT_INTERVALS,
    OPTIONS,
    PLAN_INTERVAL,
    Q_CAP,
    RATE_HALF_LIFE,
    RATE_MAX_KEYS,
    RATE_UPDATE_INTERVAL,
    REDIS_DATA_DIR,
    REDIS_URL,
    REPORT_RETENTION,
    SHUTDOWN_GRACE,
    SLOTS_PER_NODE,
)
from controlplane.config.settings import ControlPlaneConfig
from controlplane.lifecycle.options import lifecycle_values
from servekit.addresses import parse_host_port
from servekit.auth_file import AuthFileError, load_auth_file
from servekit.exposure import ALLOW_UNAUTHENTICATED, check_exposure
from servekit.flags import (
    LOG_FORMAT,
    LOG_LEVEL,
    add_version_flag,
    server_tls,
)
from servekit.options import SettingsError


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
