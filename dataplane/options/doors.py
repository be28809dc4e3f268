"""The declared options of the router's two optional doors: the OpenAI HTTP front and the Envoy
Endpoint Picker (and the key headers both read).

Apart from the process's own options because each door is off unless its listen option is given,
and its options are read only into its own config (:mod:`dataplane.options.builder`).
"""

from __future__ import annotations

from dataplane.extproc.context import ExtProcConfig
from dataplane.http_front.connections import ConnectionLimits
from dataplane.http_front.front_config import FrontConfig
from dataplane.openai_api.request_keys import DEFAULT_KEY_HEADERS
from dataplane.options.values import optional_text
from servekit.flags import non_negative_int, positive_float, positive_int
from servekit.options import Option, list_option, switch

FRONT = FrontConfig()
EXTPROC = ExtProcConfig()


HTTP_LISTEN: Option[str | None] = Option(
    "http_listen",
    None,
    optional_text,
    "serve the OpenAI-compatible HTTP front on HOST:PORT (port 0: any, logged); off when not given",
)
HTTP_MAX_BODY = Option(
    "http_max_body",
    FRONT.max_body_bytes,
    int,
    "largest request body the front accepts, bytes (larger: 413)",
)
HTTP_FIRST_BYTE_TIMEOUT = Option(
    "http_first_byte_timeout",
    FRONT.first_byte_timeout_s,
    float,
    "seconds an engine may take to start answering before the front retries elsewhere",
)
HTTP_FIRST_BYTE_FLOOR = Option(
    "http_first_byte_floor", FRONT.first_byte_floor_s, positive_float,
    "shortest first-byte timeout: an engine's own is 4 x its slowest of the last 32 answers, "
    "within [this, --http-first-byte-timeout]",
)  # fmt: skip
HTTP_CONNECT_TIMEOUT = Option(
    "http_connect_timeout", FRONT.connect_timeout_s, float, "seconds to connect to an engine"
)
LIMITS = ConnectionLimits()
HTTP_MAX_CONNECTIONS = Option(
    "http_max_connections", LIMITS.total, positive_int,
    "most open HTTP connections (also capped to fit the open-file limit: (soft limit - 256) / 2)",
)  # fmt: skip
HTTP_MAX_CLIENT_CONNECTIONS = Option(
    "http_max_client_connections", LIMITS.per_client, positive_int,
    "most open HTTP connections from one client address (more are closed at accept)",
)  # fmt: skip
HTTP_HEADER_TIMEOUT = Option(
    "http_header_timeout", LIMITS.header_timeout_s, positive_float,
    "seconds a new connection has to send its first request's headers",
)  # fmt: skip
HTTP_IDLE_TIMEOUT = Option(
    "http_idle_timeout", LIMITS.idle_timeout_s, positive_float,
    "seconds a keep-alive connection may idle (or take over its next request's headers)",
)  # fmt: skip
HTTP_BODY_TIMEOUT = Option(
    "http_body_timeout", LIMITS.body_timeout_s, positive_float,
    "seconds a request body has to arrive (then 408)",
)  # fmt: skip
HTTP_KEY_FROM_USER = switch(
    "http_key_from_user",
    "route by the body's 'user' field when there is no key header or prompt_cache_key",
)
HTTP_MODEL_POOL = list_option(
    "http_model_pool",
    "requests for MODEL go to POOL without an x-cacheroute-pool header (repeatable)",
    metavar="MODEL=POOL",
)
KEY_HEADER = list_option(
    "key_header",
    "headers that carry a routing key, first present wins, before the body's "
    f"prompt_cache_key (repeatable; both doors; default: {' '.join(DEFAULT_KEY_HEADERS)})",
    metavar="NAME",
)
EXTPROC_LISTEN: Option[str | None] = Option(
    "extproc_listen",
    None,
    optional_text,
    "serve the Envoy ext_proc Endpoint Picker (envoy.service.ext_proc.v3.ExternalProcessor) on "
    "HOST:PORT (convention: 9002); off when not given",
)
EXTPROC_HEALTH_LISTEN: Option[str | None] = Option(
    "extproc_health_listen",
    None,
    optional_text,
    "serve the picker's gRPC health services (liveness, readiness, "
    "envoy.service.ext_proc.v3.ExternalProcessor) on HOST:PORT (convention: 9003)",
)
EXTPROC_POOL = Option(
    "extproc_pool",
    EXTPROC.pool,
    str,
    "pool of picker requests without an x-cacheroute-pool header (one InferencePool per pool)",
    shown_default="default",
)
EXTPROC_MAX_BODY = Option(
    "extproc_max_body",
    EXTPROC.max_body_bytes,
    positive_int,
    "largest request body the picker reads for a key, bytes (larger: the gateway answers 413)",
)
EXTPROC_FALLBACKS = Option(
    "extproc_fallbacks",
    EXTPROC.fallbacks,
    non_negative_int,
    "fallback endpoints after the decision in x-gateway-destination-endpoint",
)
EXTPROC_MAX_BUFFERED = Option(
    "extproc_max_buffered",
    EXTPROC.max_buffered_bytes,
    positive_int,
    "bytes every picker stream's unfinished request bodies may hold together (beyond: the "
    "gateway answers 503)",
)
EXTPROC_BODY_TIMEOUT = Option(
    "extproc_body_timeout",
    EXTPROC.body_timeout_s,
    positive_float,
    "seconds a picker stream may take from its request headers to its body's end (then 408)",
)
EXTPROC_NATIVE: Option[str | None] = Option(
    "extproc_native",
    None,
    optional_text,
    "carry the picker's ext_proc streams in this native server binary (scripts/"
    "build_extproc_native.py prints its path), run as a child process; decisions stay in this "
    "process (docs/components/extproc.md); not with --tls-cert",
    metavar="BINARY",
)
EXTPROC_ALLOW_UNAUTHENTICATED = switch(
    "extproc_allow_unauthenticated",
    "with --auth-file or mTLS, serve picker callers that present no known token or certificate "
    "(a gateway that cannot send one, behind a NetworkPolicy); their outcomes never count for "
    "passive health",
)
