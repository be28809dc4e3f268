"""Parsed options → :class:`~dataplane.server.RouterConfig`, with the checks that span options.

Apart from the entry point (``python -m dataplane``), which only parses and runs: what a
combination of flags means (TLS or tokens before exposure, ejection bounds, the doors' own
settings) is decided here, where the Helm chart's and the compose file's tests can call it.
"""

from __future__ import annotations

import argparse

from dataplane.core.active_probes import ProbeConfig
from dataplane.core.names import InvalidNameError, validate_pool
from dataplane.core.outliers import OutlierConfig
from dataplane.extproc.context import ExtProcConfig
from dataplane.health.health_feedback import parse_networks
from dataplane.http_front.connections import ConnectionLimits
from dataplane.http_front.front_config import FrontConfig
from dataplane.openai_api.request_keys import DEFAULT_KEY_HEADERS
from dataplane.options import (
    ACK_INTERVAL,
    ACTIVE_PROBE_AFTER_STALE,
    ACTIVE_PROBE_FAILURES,
    ACTIVE_PROBE_INTERVAL,
    ACTIVE_PROBE_TIMEOUT,
    AUTH_FILE,
    CORRECTION_HORIZON,
    DECODE_NICE,
    GRACE,
    HEALTH_FEEDBACK_ANONYMOUS,
    HEALTH_FEEDBACK_FROM,
    HEALTH_FEEDBACK_SHARE,
    LISTEN,
    LOAD_INTERVAL,
    LOAD_MAX_AGE,
    MAX_MESSAGE_BYTES,
    METRICS_LISTEN,
    OUTLIER_BASE_EJECTION,
    OUTLIER_CONSECUTIVE_FAILURES,
    OUTLIER_MAX_EJECTED_SHARE,
    OUTLIER_MAX_EJECTION,
    PANIC_THRESHOLD,
    PLANNING_RATE_LIMIT,
    POLICY,
    REDIS_URL,
    REPORT_INTERVAL,
    ROUTER_ID,
    SAMPLE_BUFFER,
    SAMPLE_FLOOR,
    SAMPLE_INTERVAL,
    SAMPLE_RATE,
    SEED,
    STARTUP_TIMEOUT,
    TABLE_INTERVAL,
    TOP_KEYS,
)
from dataplane.options.doors import (
    EXTPROC_ALLOW_UNAUTHENTICATED,
    EXTPROC_BODY_TIMEOUT,
    EXTPROC_FALLBACKS,
    EXTPROC_HEALTH_LISTEN,
    EXTPROC_LISTEN,
    EXTPROC_MAX_BODY,
    EXTPROC_MAX_BUFFERED,
    EXTPROC_NATIVE,
    EXTPROC_POOL,
    HTTP_BODY_TIMEOUT,
    HTTP_CONNECT_TIMEOUT,
    HTTP_FIRST_BYTE_FLOOR,
    HTTP_FIRST_BYTE_TIMEOUT,
    HTTP_HEADER_TIMEOUT,
    HTTP_IDLE_TIMEOUT,
    HTTP_KEY_FROM_USER,
    HTTP_LISTEN,
    HTTP_MAX_BODY,
    HTTP_MAX_CLIENT_CONNECTIONS,
    HTTP_MAX_CONNECTIONS,
    HTTP_MODEL_POOL,
    KEY_HEADER,
)
from dataplane.server import RouterConfig, default_router_id
from servekit.auth_file import AuthFileError, load_auth_file
from servekit.exposure import ALLOW_UNAUTHENTICATED, check_exposure
from servekit.flags import server_tls
from servekit.options import SettingsError


def config_from(args: argparse.Namespace) -> RouterConfig:
    """A RouterConfig from parsed options (raises SettingsError on inconsistent TLS options)."""
    metrics_listen = METRICS_LISTEN.value(args)
    base_ejection, max_ejection = (
        OUTLIER_BASE_EJECTION.value(args),
        OUTLIER_MAX_EJECTION.value(args),
    )
    if base_ejection > max_ejection:
        raise SettingsError(
            f"--outlier-base-ejection ({base_ejection:g}) must be <= --outlier-max-ejection "
            f"({max_ejection:g})"
        )
    outliers = OutlierConfig(
        consecutive_failures=OUTLIER_CONSECUTIVE_FAILURES.value(args),
        base_ejection_s=base_ejection,
        max_ejection_s=max_ejection,
        max_ejected_share=OUTLIER_MAX_EJECTED_SHARE.value(args),
    )
    probes = ProbeConfig(
        interval_s=ACTIVE_PROBE_INTERVAL.value(args),
        after_stale_s=ACTIVE_PROBE_AFTER_STALE.value(args),
        failures=ACTIVE_PROBE_FAILURES.value(args),
        timeout_s=ACTIVE_PROBE_TIMEOUT.value(args),
    )
    auth_file = AUTH_FILE.value(args)
    try:
        auth = load_auth_file(auth_file) if auth_file is not None else None
    except AuthFileError as exc:
        raise SettingsError(str(exc)) from None
    try:
        feedback_from = parse_networks(HEALTH_FEEDBACK_FROM.value(args))
    except ValueError as exc:
        raise SettingsError(str(exc)) from None
    tls = server_tls(args)
    authenticated = auth is not None or (tls is not None and tls.client_ca_file is not None)
    check_exposure(
        "router",
        LISTEN.value(args),
        authenticated=authenticated,
        allow_unauthenticated=ALLOW_UNAUTHENTICATED.value(args),
    )
    extproc = extproc_config(args)
    if extproc is not None and extproc.native is not None and tls is not None:
        raise SettingsError(
            "--extproc-native serves no TLS: use the Python picker (leave --extproc-native out) "
            "with --tls-cert"
        )
    if extproc is not None:
        check_exposure(
            "Endpoint Picker",
            extproc.listen,
            authenticated=authenticated,
            allow_unauthenticated=ALLOW_UNAUTHENTICATED.value(args),
        )
    return RouterConfig(
        http=front_config(args),
        extproc=extproc,
        health_feedback_anonymous=HEALTH_FEEDBACK_ANONYMOUS.value(args),
        outliers=outliers,
        probes=probes,
        auth=auth,
        planning_rate_limit=PLANNING_RATE_LIMIT.value(args),
        health_feedback_share=HEALTH_FEEDBACK_SHARE.value(args),
        health_feedback_from=feedback_from,
        listen=LISTEN.value(args),
        redis_url=REDIS_URL.value(args),
        router_id=ROUTER_ID.value(args) or default_router_id(),
        policy=POLICY.value(args),
        seed=SEED.value(args),
        table_interval_s=TABLE_INTERVAL.value(args),
        ack_interval_s=ACK_INTERVAL.value(args),
        load_interval_s=LOAD_INTERVAL.value(args),
        report_interval_s=REPORT_INTERVAL.value(args),
        sample_interval_s=SAMPLE_INTERVAL.value(args),
        sample_rate=SAMPLE_RATE.value(args),
        sample_floor=SAMPLE_FLOOR.value(args),
        sample_buffer=SAMPLE_BUFFER.value(args),
        top_keys=TOP_KEYS.value(args),
        correction_horizon_s=CORRECTION_HORIZON.value(args),
        panic_threshold=PANIC_THRESHOLD.value(args),
        load_max_age_s=LOAD_MAX_AGE.value(args),
        max_message_bytes=MAX_MESSAGE_BYTES.value(args),
        startup_timeout_s=STARTUP_TIMEOUT.value(args),
        grace_s=GRACE.value(args),
        decode_nice=DECODE_NICE.value(args),
        metrics_listen=None if metrics_listen in ("off", "") else metrics_listen,
        tls=tls,
    )


def front_config(args: argparse.Namespace) -> FrontConfig | None:
    """The HTTP front's options, or None when ``--http-listen`` is not given."""
    listen = HTTP_LISTEN.value(args)
    if not listen or listen == "off":
        return None
    max_body = HTTP_MAX_BODY.value(args)
    first_byte_timeout = HTTP_FIRST_BYTE_TIMEOUT.value(args)
    connect_timeout = HTTP_CONNECT_TIMEOUT.value(args)
    if max_body < 1 or first_byte_timeout <= 0 or connect_timeout <= 0:
        raise SettingsError("--http-max-body and the --http-*-timeout options must be > 0")
    pools: dict[str, str] = {}
    for item in HTTP_MODEL_POOL.value(args):
        model, sep, pool = item.partition("=")
        if not sep or not model:
            raise SettingsError(f"--http-model-pool {item!r}: expected MODEL=POOL")
        try:
            pools[model] = validate_pool(pool)
        except InvalidNameError as exc:
            raise SettingsError(f"--http-model-pool {item!r}: {exc}") from None
    return FrontConfig(
        listen=listen,
        max_body_bytes=max_body,
        connect_timeout_s=connect_timeout,
        first_byte_timeout_s=first_byte_timeout,
        first_byte_floor_s=HTTP_FIRST_BYTE_FLOOR.value(args),
        key_from_user=HTTP_KEY_FROM_USER.value(args),
        model_pools=pools,
        key_headers=key_headers(args),
        seed=SEED.value(args),
        shutdown_timeout_s=GRACE.value(args),
        limits=ConnectionLimits(
            per_client=HTTP_MAX_CLIENT_CONNECTIONS.value(args),
            total=HTTP_MAX_CONNECTIONS.value(args),
            header_timeout_s=HTTP_HEADER_TIMEOUT.value(args),
            idle_timeout_s=HTTP_IDLE_TIMEOUT.value(args),
            body_timeout_s=HTTP_BODY_TIMEOUT.value(args),
        ),
    )


def key_headers(args: argparse.Namespace) -> tuple[str, ...]:
    """The ordered key headers (lower case), the defaults when none are given."""
    names = tuple(name.strip().lower() for name in KEY_HEADER.value(args) if name.strip())
    return names or DEFAULT_KEY_HEADERS


def extproc_config(args: argparse.Namespace) -> ExtProcConfig | None:
    """The Endpoint Picker's options, or None when ``--extproc-listen`` is not given."""
    listen = EXTPROC_LISTEN.value(args)
    health = EXTPROC_HEALTH_LISTEN.value(args)
    if not listen or listen == "off":
        if health:
            raise SettingsError("--extproc-health-listen needs --extproc-listen")
        return None
    pool = EXTPROC_POOL.value(args)
    if pool:
        try:
            validate_pool(pool)
        except InvalidNameError as exc:
            raise SettingsError(f"--extproc-pool {pool!r}: {exc}") from None
    return ExtProcConfig(
        listen=listen,
        health_listen=health or None,
        pool=pool,
        max_body_bytes=EXTPROC_MAX_BODY.value(args),
        max_buffered_bytes=EXTPROC_MAX_BUFFERED.value(args),
        body_timeout_s=EXTPROC_BODY_TIMEOUT.value(args),
        allow_unauthenticated=EXTPROC_ALLOW_UNAUTHENTICATED.value(args),
        fallbacks=EXTPROC_FALLBACKS.value(args),
        key_headers=key_headers(args),
        key_from_user=HTTP_KEY_FROM_USER.value(args),
        seed=SEED.value(args),
        grace_s=GRACE.value(args),
        native=EXTPROC_NATIVE.value(args) or None,
    )
