"""``python -m dataplane``: run one stateless router until SIGTERM/SIGINT.

Options come from flags, ``CACHEROUTE_*`` environment variables or ``--config FILE.yaml``
(``servekit.settings``); ``--help`` lists them all with their variables.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
from collections.abc import Sequence
from pathlib import Path

import structlog

from dataplane.core.names import InvalidNameError, validate_pool
from dataplane.core.outliers import OutlierConfig
from dataplane.core.policies import POLICIES
from dataplane.http_front.app import FrontConfig
from dataplane.server import RouterConfig, RouterServer, default_router_id
from servekit.auth_file import AuthFileError, load_auth_file
from servekit.flags import HelpFormatter, add_log_flags, add_server_tls_flags, server_tls
from servekit.grpc_server import run_until_signal
from servekit.logging import configure_logging
from servekit.settings import SettingsError, add_config_flag, document_env, parse_settings

DEFAULTS = RouterConfig(router_id="")
FRONT = FrontConfig()
OUTLIERS = OutlierConfig()
# The serving thread waits at most this long for the GIL when a worker thread (a table decode, a
# metrics scrape) runs Python code; CPython's default of 5 ms would show in Route's p99.
GIL_SWITCH_INTERVAL_S = 0.0005


def build_parser() -> argparse.ArgumentParser:
    d = DEFAULTS
    parser = argparse.ArgumentParser(
        prog="python -m dataplane",
        description="CacheRoute router: answers Route/RouteBatch from the active routing table.",
        formatter_class=HelpFormatter,
    )
    add_config_flag(parser)
    add = parser.add_argument
    add("--listen", default=d.listen, help="gRPC listen address HOST:PORT (port 0: any)")
    add("--redis-url", default=d.redis_url, help="Redis holding plans, pointers and loads")
    add("--router-id", default=None, help="id in ACKs and reports (default: hostname-pid)")
    add("--policy", default=d.policy, choices=sorted(POLICIES), help="routing policy")
    add("--seed", type=int, default=d.seed, help="seed of the policies' random choices")
    add(
        "--table-interval",
        type=float,
        default=d.table_interval_s,
        help="seconds between re-reads of the active pointers (hints also trigger one)",
    )
    add(
        "--ack-interval",
        type=float,
        default=d.ack_interval_s,
        help="seconds between ACK/NACK heartbeats",
    )
    add(
        "--load-interval",
        type=float,
        default=d.load_interval_s,
        help="seconds between re-reads of the load snapshots (hints also push them)",
    )
    add(
        "--report-interval",
        type=float,
        default=d.report_interval_s,
        help="seconds per traffic report (heavy hitters + total)",
    )
    add(
        "--top-keys",
        type=int,
        default=d.top_keys,
        help="keys tracked per pool by the Space-Saving counter",
    )
    add(
        "--sample-rate",
        type=float,
        default=d.sample_rate,
        help="probability that a request is written to the sampled trace",
    )
    add(
        "--sample-interval",
        type=float,
        default=d.sample_interval_s,
        help="seconds between writes of the sampled trace",
    )
    add(
        "--sample-buffer",
        type=int,
        default=d.sample_buffer,
        help="samples held between writes; more are dropped and counted",
    )
    add(
        "--correction-horizon",
        type=float,
        default=d.correction_horizon_s,
        help="seconds a decision counts as in-flight load without a newer snapshot",
    )
    add(
        "--panic-threshold",
        type=float,
        default=d.panic_threshold,
        help="below this share of healthy undrained nodes in a pool, route over all undrained "
        "nodes instead of failing (0: never)",
    )
    add(
        "--load-max-age",
        type=float,
        default=d.load_max_age_s,
        help="seconds after which a load snapshot is too old: only in-flight counts are compared",
    )
    add(
        "--outlier-consecutive-failures",
        type=int,
        default=OUTLIERS.consecutive_failures,
        help="eject an engine from this router's routing after this many failed attempts in a "
        "row (connect error, timeout, 5xx; 0: passive health off)",
    )
    add(
        "--outlier-base-ejection",
        type=float,
        default=OUTLIERS.base_ejection_s,
        help="seconds of a first ejection; each repeated ejection adds as much again",
    )
    add(
        "--outlier-max-ejection",
        type=float,
        default=OUTLIERS.max_ejection_s,
        help="longest ejection, seconds",
    )
    add(
        "--outlier-max-ejected-share",
        type=float,
        default=OUTLIERS.max_ejected_share,
        help="at most this share of a pool's undrained engines is ejected at once (at least "
        "one, never the last)",
    )
    add(
        "--auth-file",
        type=Path,
        default=None,
        help="the control plane's auth file (YAML of {name, role, sha256|subject}): Route "
        "callers are named by their bearer token or certificate; unknown callers are served "
        "but not counted for planning",
    )
    add(
        "--planning-rate-limit",
        type=float,
        default=d.planning_rate_limit,
        help="Route requests per second per caller (token name, else peer address) that count "
        "for planning; the rest are served, not counted (0: no limit)",
    )
    add(
        "--max-message-bytes",
        type=int,
        default=d.max_message_bytes,
        help="largest gRPC message the router accepts or sends (RESOURCE_EXHAUSTED beyond)",
    )
    add(
        "--startup-timeout",
        type=float,
        default=d.startup_timeout_s,
        help="seconds the first sync with Redis may take before serving anyway",
    )
    add(
        "--grace",
        type=float,
        default=d.grace_s,
        help="seconds in-flight RPCs get to finish on SIGTERM",
    )
    add(
        "--decode-nice",
        type=int,
        default=d.decode_nice,
        help="OS nice increment of the table-decode thread (0: same priority as serving)",
    )
    add(
        "--metrics-listen",
        default=d.metrics_listen,
        help="Prometheus /metrics HOST:PORT (port 0: any, logged); 'off' disables it",
    )
    add(
        "--http-listen",
        default=None,
        help="serve the OpenAI-compatible HTTP front on HOST:PORT (port 0: any, logged); off "
        "when not given",
    )
    add(
        "--http-max-body",
        type=int,
        default=FRONT.max_body_bytes,
        help="largest request body the front accepts, bytes (larger: 413)",
    )
    add(
        "--http-first-byte-timeout",
        type=float,
        default=FRONT.first_byte_timeout_s,
        help="seconds an engine may take to start answering before the front retries elsewhere",
    )
    add(
        "--http-connect-timeout",
        type=float,
        default=FRONT.connect_timeout_s,
        help="seconds to connect to an engine",
    )
    add(
        "--http-key-from-user",
        action="store_true",
        help="route by the body's 'user' field when there is no key header or prompt_cache_key",
    )
    add(
        "--http-model-pool",
        action="append",
        default=[],
        metavar="MODEL=POOL",
        help="requests for MODEL go to POOL without an x-cacheroute-pool header (repeatable)",
    )
    add_server_tls_flags(parser)
    add_log_flags(parser)
    document_env(parser)
    return parser  # fmt: skip


def config_from(args: argparse.Namespace) -> RouterConfig:
    """A RouterConfig from parsed options (raises SettingsError on inconsistent TLS options)."""
    tls = server_tls(args)
    if not 0.0 <= args.sample_rate <= 1.0:
        raise SettingsError(f"--sample-rate must be in [0, 1], got {args.sample_rate}")
    for name in ("table_interval", "ack_interval", "load_interval", "report_interval",
                 "sample_interval", "startup_timeout"):  # fmt: skip
        if getattr(args, name) <= 0:
            raise SettingsError(f"--{name.replace('_', '-')} must be > 0")
    if not 0.0 <= args.panic_threshold <= 1.0:
        raise SettingsError(f"--panic-threshold must be in [0, 1], got {args.panic_threshold}")
    if args.load_max_age <= 0:
        raise SettingsError("--load-max-age must be > 0")
    if args.max_message_bytes < 64 * 1024:
        raise SettingsError("--max-message-bytes must be >= 65536")
    if args.top_keys < 1 or args.sample_buffer < 0:
        raise SettingsError("--top-keys must be >= 1 and --sample-buffer >= 0")
    try:
        outliers = OutlierConfig(
            consecutive_failures=args.outlier_consecutive_failures,
            base_ejection_s=args.outlier_base_ejection,
            max_ejection_s=args.outlier_max_ejection,
            max_ejected_share=args.outlier_max_ejected_share,
        )
    except ValueError as exc:
        raise SettingsError(f"--outlier-* options: {exc}") from None
    if args.planning_rate_limit < 0:
        raise SettingsError("--planning-rate-limit must be >= 0")
    try:
        auth = load_auth_file(args.auth_file) if args.auth_file is not None else None
    except AuthFileError as exc:
        raise SettingsError(str(exc)) from None
    return RouterConfig(
        http=front_config(args),
        outliers=outliers,
        auth=auth,
        planning_rate_limit=args.planning_rate_limit,
        listen=args.listen,
        redis_url=args.redis_url,
        router_id=args.router_id or default_router_id(),
        policy=args.policy,
        seed=args.seed,
        table_interval_s=args.table_interval,
        ack_interval_s=args.ack_interval,
        load_interval_s=args.load_interval,
        report_interval_s=args.report_interval,
        sample_interval_s=args.sample_interval,
        sample_rate=args.sample_rate,
        sample_buffer=args.sample_buffer,
        top_keys=args.top_keys,
        correction_horizon_s=args.correction_horizon,
        panic_threshold=args.panic_threshold,
        load_max_age_s=args.load_max_age,
        max_message_bytes=args.max_message_bytes,
        startup_timeout_s=args.startup_timeout,
        grace_s=args.grace,
        decode_nice=args.decode_nice,
        metrics_listen=None if args.metrics_listen in ("off", "") else args.metrics_listen,
        tls=tls,
    )


def front_config(args: argparse.Namespace) -> FrontConfig | None:
    """The HTTP front's options, or None when ``--http-listen`` is not given."""
    if not args.http_listen or args.http_listen == "off":
        return None
    if (
        args.http_max_body < 1
        or args.http_first_byte_timeout <= 0
        or args.http_connect_timeout <= 0
    ):
        raise SettingsError("--http-max-body and the --http-*-timeout options must be > 0")
    pools: dict[str, str] = {}
    for item in args.http_model_pool:
        model, sep, pool = item.partition("=")
        if not sep or not model:
            raise SettingsError(f"--http-model-pool {item!r}: expected MODEL=POOL")
        try:
            pools[model] = validate_pool(pool)
        except InvalidNameError as exc:
            raise SettingsError(f"--http-model-pool {item!r}: {exc}") from None
    return FrontConfig(
        listen=args.http_listen,
        max_body_bytes=args.http_max_body,
        connect_timeout_s=args.http_connect_timeout,
        first_byte_timeout_s=args.http_first_byte_timeout,
        key_from_user=args.http_key_from_user,
        model_pools=pools,
        seed=args.seed,
        shutdown_timeout_s=args.grace,
    )


async def serve(config: RouterConfig) -> None:
    server = RouterServer(config)
    await server.start()
    # Everything allocated so far (modules, gRPC, the first tables) lives as long as the process:
    # keep it out of the cyclic GC's full collections, which would otherwise scan it again every
    # few seconds of traffic and pause the serving thread for milliseconds.
    gc.freeze()
    await run_until_signal(server.stop)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parse_settings(parser, argv)
        config = config_from(args)
    except SettingsError as exc:
        parser.error(str(exc))
    configure_logging("dataplane", json=args.log_format == "json", level=args.log_level)
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    try:
        asyncio.run(serve(config))
    except (OSError, ValueError) as exc:
        structlog.get_logger("dataplane").error("router failed to start", error=str(exc))
        return 1
    except KeyboardInterrupt:  # Ctrl-C before the signal handlers were set
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
