"""The router's declared options: each once, as the flag, the ``CACHEROUTE_*`` variable, the
``--config`` key and its ``--help`` line (``servekit.options``).

Split from ``python -m dataplane``'s entry point, which runs the server, and from
:mod:`dataplane.options.builder`, which turns parsed values into a
:class:`~dataplane.server.RouterConfig`: the declarations are read by the Helm chart's flag test
and the docs, the entry point by nobody but the process.
"""

from __future__ import annotations

from pathlib import Path

from dataplane.core.active_probes import ProbeConfig
from dataplane.core.outliers import OutlierConfig
from dataplane.core.policies.registry import ROUTER_POLICIES
from dataplane.health.health_feedback import DEFAULT_SHARE
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
from dataplane.options.values import message_bytes, optional_text
from dataplane.server import RouterConfig
from servekit.exposure import ALLOW_UNAUTHENTICATED
from servekit.flags import (
    LOG_OPTIONS,
    SERVER_TLS_OPTIONS,
    fraction,
    non_negative_float,
    non_negative_int,
    optional_path,
    positive_float,
    positive_int,
)
from servekit.options import Option, OptionSet, switch

D = RouterConfig(router_id="")


OUTLIERS = OutlierConfig()
PROBES = ProbeConfig()


LISTEN = Option("listen", D.listen, str, "gRPC listen address HOST:PORT (port 0: any)")
REDIS_URL = Option("redis_url", D.redis_url, str, "Redis holding plans, pointers and loads")
ROUTER_ID: Option[str | None] = Option(
    "router_id", None, optional_text, "id in ACKs and reports", shown_default="hostname-pid"
)
POLICY = Option("policy", D.policy, str, "routing policy", choices=tuple(sorted(ROUTER_POLICIES)))
SEED = Option("seed", D.seed, int, "seed of the policies' random choices")
TABLE_INTERVAL = Option(
    "table_interval",
    D.table_interval_s,
    positive_float,
    "seconds between re-reads of the active pointers (hints also trigger one)",
)
ACK_INTERVAL = Option(
    "ack_interval", D.ack_interval_s, positive_float, "seconds between ACK/NACK heartbeats"
)
LOAD_INTERVAL = Option(
    "load_interval",
    D.load_interval_s,
    positive_float,
    "seconds between re-reads of the load snapshots (hints also push them)",
)
REPORT_INTERVAL = Option(
    "report_interval",
    D.report_interval_s,
    positive_float,
    "seconds per traffic report (heavy hitters + total)",
)
TOP_KEYS = Option(
    "top_keys", D.top_keys, positive_int, "keys tracked per pool by the Space-Saving counter"
)
SAMPLE_RATE = Option(
    "sample_rate",
    D.sample_rate,
    fraction,
    "probability that a request is written to the sampled trace",
)
SAMPLE_FLOOR = Option(
    "sample_floor",
    D.sample_floor,
    non_negative_float,
    "samples per second the rate rises towards (up to 1) when traffic is too thin for "
    "--sample-rate to give a shadow replay enough (0: a fixed rate)",
)
SAMPLE_INTERVAL = Option(
    "sample_interval",
    D.sample_interval_s,
    positive_float,
    "seconds between writes of the sampled trace",
)
SAMPLE_BUFFER = Option(
    "sample_buffer",
    D.sample_buffer,
    non_negative_int,
    "samples held between writes; more are dropped and counted",
)
CORRECTION_HORIZON = Option(
    "correction_horizon",
    D.correction_horizon_s,
    float,
    "seconds a decision counts as in-flight load without a newer snapshot",
)
PANIC_THRESHOLD = Option(
    "panic_threshold",
    D.panic_threshold,
    fraction,
    "below this share of healthy undrained nodes in a pool, route over all undrained nodes "
    "instead of failing (0: never)",
)
LOAD_MAX_AGE = Option(
    "load_max_age",
    D.load_max_age_s,
    positive_float,
    "seconds after which a load snapshot is too old: only in-flight counts are compared",
)
OUTLIER_CONSECUTIVE_FAILURES = Option(
    "outlier_consecutive_failures",
    OUTLIERS.consecutive_failures,
    non_negative_int,
    "eject an engine from this router's routing after this many failed attempts in a row "
    "(connect error, timeout, 5xx; 0: passive health off)",
)
OUTLIER_BASE_EJECTION = Option(
    "outlier_base_ejection",
    OUTLIERS.base_ejection_s,
    positive_float,
    "seconds of a first ejection; each repeated ejection adds as much again",
)
OUTLIER_MAX_EJECTION = Option(
    "outlier_max_ejection", OUTLIERS.max_ejection_s, positive_float, "longest ejection, seconds"
)
OUTLIER_MAX_EJECTED_SHARE = Option(
    "outlier_max_ejected_share",
    OUTLIERS.max_ejected_share,
    fraction,
    "at most this share of a pool's undrained engines is ejected at once (at least one, never "
    "the last)",
)
ACTIVE_PROBE_INTERVAL = Option(
    "active_probe_interval",
    PROBES.interval_s,
    non_negative_float,
    "seconds between active probes (a TCP connect to each destination) of a pool whose load "
    "snapshots are stale; 0: active probes off",
)
ACTIVE_PROBE_AFTER_STALE = Option(
    "active_probe_after_stale",
    PROBES.after_stale_s,
    non_negative_float,
    "probe a pool once its last applied load snapshot is older than this many seconds (every "
    "control plane away)",
)
ACTIVE_PROBE_FAILURES = Option(
    "active_probe_failures",
    PROBES.failures,
    positive_int,
    "eject a destination after this many failed probes in a row; one success restores it",
)
ACTIVE_PROBE_TIMEOUT = Option(
    "active_probe_timeout",
    PROBES.timeout_s,
    positive_float,
    "seconds a probe's TCP connect may take before it counts as failed",
)
AUTH_FILE: Option[Path | None] = Option(
    "auth_file",
    None,
    optional_path,
    "the control plane's auth file (YAML of {name, role, sha256|subject}): Route callers are "
    "named by their bearer token or certificate; unknown callers are served but not counted for "
    "planning",
)
HEALTH_FEEDBACK_SHARE = Option(
    "health_feedback_share",
    DEFAULT_SHARE,
    fraction,
    "at most this share of a pool's engines may be ejected through one caller's Release "
    "outcomes at once (at least one); with --auth-file only its clients' outcomes count",
)
HEALTH_FEEDBACK_FROM = Option(
    "health_feedback_from", "", str,
    "comma-separated CIDRs whose callers' Release outcomes count for passive health (besides "
    "--auth-file clients); set without an auth file, only these callers count",
    shown_default="''",
)  # fmt: skip
HEALTH_FEEDBACK_ANONYMOUS = switch(
    "health_feedback_anonymous",
    "without --auth-file, mTLS or --health-feedback-from, let every caller's outcomes count for "
    "passive health, named by peer address (default: only loopback callers'; a private network)",
)
PLANNING_RATE_LIMIT = Option(
    "planning_rate_limit",
    D.planning_rate_limit,
    non_negative_float,
    "Route requests per second per caller (token name, else peer address) that count for "
    "planning; the rest are served, not counted (0: no limit)",
)
MAX_MESSAGE_BYTES = Option(
    "max_message_bytes",
    D.max_message_bytes,
    message_bytes,
    "largest gRPC message the router accepts or sends (RESOURCE_EXHAUSTED beyond)",
)
STARTUP_TIMEOUT = Option(
    "startup_timeout",
    D.startup_timeout_s,
    positive_float,
    "seconds the first sync with Redis may take before serving anyway",
)
GRACE = Option("grace", D.grace_s, float, "seconds in-flight RPCs get to finish on SIGTERM")
DECODE_NICE = Option(
    "decode_nice",
    D.decode_nice,
    int,
    "OS nice increment of the table-decode thread (0: same priority as serving)",
)
METRICS_LISTEN = Option(
    "metrics_listen",
    str(D.metrics_listen),
    str,
    "Prometheus /metrics HOST:PORT (port 0: any, logged); 'off' disables it",
)


OPTIONS = OptionSet(
    LISTEN, REDIS_URL, ROUTER_ID, POLICY, SEED, TABLE_INTERVAL, ACK_INTERVAL, LOAD_INTERVAL,
    REPORT_INTERVAL, TOP_KEYS, SAMPLE_RATE, SAMPLE_FLOOR, SAMPLE_INTERVAL, SAMPLE_BUFFER,
    CORRECTION_HORIZON,
    PANIC_THRESHOLD, LOAD_MAX_AGE, OUTLIER_CONSECUTIVE_FAILURES, OUTLIER_BASE_EJECTION,
    OUTLIER_MAX_EJECTION, OUTLIER_MAX_EJECTED_SHARE, ACTIVE_PROBE_INTERVAL,
    ACTIVE_PROBE_AFTER_STALE, ACTIVE_PROBE_FAILURES, ACTIVE_PROBE_TIMEOUT, AUTH_FILE,
    ALLOW_UNAUTHENTICATED, HEALTH_FEEDBACK_SHARE, HEALTH_FEEDBACK_FROM, HEALTH_FEEDBACK_ANONYMOUS,
    PLANNING_RATE_LIMIT,
    MAX_MESSAGE_BYTES,
    STARTUP_TIMEOUT, GRACE,
    DECODE_NICE,
    METRICS_LISTEN, HTTP_LISTEN, HTTP_MAX_BODY, HTTP_FIRST_BYTE_TIMEOUT, HTTP_CONNECT_TIMEOUT,
    HTTP_KEY_FROM_USER, HTTP_MODEL_POOL, HTTP_FIRST_BYTE_FLOOR, HTTP_MAX_CONNECTIONS,
    HTTP_MAX_CLIENT_CONNECTIONS,
    HTTP_HEADER_TIMEOUT, HTTP_IDLE_TIMEOUT, HTTP_BODY_TIMEOUT, KEY_HEADER, EXTPROC_LISTEN,
    EXTPROC_HEALTH_LISTEN, EXTPROC_POOL, EXTPROC_MAX_BODY, EXTPROC_FALLBACKS, EXTPROC_MAX_BUFFERED,
    EXTPROC_BODY_TIMEOUT, EXTPROC_ALLOW_UNAUTHENTICATED, EXTPROC_NATIVE, SERVER_TLS_OPTIONS,
    LOG_OPTIONS,
)  # fmt: skip
