"""The agent's declared options, once: flags > ``CACHEROUTE_*`` env > ``--config`` YAML.

Apart from the entry point so the option table reads on its own; turning the parsed values into
agent configurations lives in :mod:`agents.engine_settings`.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

from agents import dialects
from servekit import client_token
from servekit.flags import LOG_OPTIONS, non_negative_float, optional_path
from servekit.options import Option, OptionSet, list_option

DEFAULT_CONTROLPLANE = "127.0.0.1:50051"


def optional_text(text: str) -> str | None:
    return text or None


def optional_ip(text: str) -> str | None:
    """An IP address as a node address's host (IPv6 in brackets), or None for ''."""
    if not text:
        return None
    try:
        ip = ipaddress.ip_address(text.strip().strip("[]"))
    except ValueError:
        raise ValueError(f"expected an IP address, got {text!r}") from None
    return f"[{ip}]" if ip.version == 6 else str(ip)


ENGINE_URL: Option[str | None] = Option(
    "engine_url",
    None,
    optional_text,
    "engine base URL, e.g. http://host:8000 (metrics at /metrics)",
)
NODE_ID: Option[str | None] = Option(
    "node_id", None, optional_text, "node id for --engine-url", shown_default="its address"
)
ADDRESS: Option[str | None] = Option(
    "address",
    None,
    optional_text,
    "engine serving host:port for callers",
    shown_default="from the URL",
)
POD_IP: Option[str | None] = Option(
    "pod_ip",
    None,
    optional_ip,
    "this pod's IP: node addresses not given are POD_IP:<the engine URL's port>, the endpoint "
    "a gateway dials",
    shown_default="the URL's host",
    fallback_env="POD_IP",
)
POD_NAME: Option[str | None] = Option(
    "pod_name",
    None,
    optional_text,
    "node id for --engine-url when --node-id is not given",
    shown_default="its address",
    fallback_env="POD_NAME",
)
DRAIN_TIMEOUT = Option(
    "drain_timeout",
    0.0,
    non_negative_float,
    "on SIGTERM, seconds the node stays drained (routers choose it no more) while its engine "
    "finishes in-flight requests, before the agent leaves; 0: leave at once",
)
ENGINE = list_option(
    "engine",
    "one more engine in this process (repeatable)",
    metavar="ID=URL[,address=H:P][,weight=W][,dialect=D][,kv_events=EP][,kv_replay=EP]",
)
POOL = Option("pool", "default", str, "pool of every engine")
KV_EVENTS: Option[str | None] = Option(
    "kv_events", None, optional_text,
    "--engine-url's KV-event endpoint (vLLM --kv-events-config endpoint), e.g. tcp://h:5557",
)  # fmt: skip
KV_REPLAY: Option[str | None] = Option(
    "kv_replay", None, optional_text, "--engine-url's KV-event replay endpoint, e.g. tcp://h:5558"
)
CONTROLPLANE = Option(
    "controlplane",
    DEFAULT_CONTROLPLANE,
    str,
    "control-plane gRPC HOST:PORT, or several comma-separated (a DNS name may resolve to "
    "several); tried in turn on reconnect",
)
TOKEN_FILE: Option[Path | None] = Option(
    "token_file",
    None,
    optional_path,
    f"file holding the bearer token for the control plane (else ${client_token.TOKEN_ENV})",
)
INTERVAL = Option("interval", 0.25, float, "scrape/report seconds")
SCRAPE_TIMEOUT = Option("scrape_timeout", 1.0, float, "GET /metrics timeout, seconds")
DIALECT = Option("dialect", "auto", str, "engine metric names", choices=tuple(dialects.CHOICES))
WEIGHT = Option("weight", 1.0, float, "relative capacity for the planner")
METRICS_LISTEN = Option("metrics_listen", "", str, "HOST:PORT of the agent's own /metrics")
TLS_CA: Option[Path | None] = Option(
    "tls_ca", None, optional_path, "CA bundle of the control plane (enables TLS)"
)
TLS_CERT: Option[Path | None] = Option("tls_cert", None, optional_path, "client certificate (mTLS)")
TLS_KEY: Option[Path | None] = Option("tls_key", None, optional_path, "client private key (mTLS)")
OPTIONS = OptionSet(
    ENGINE_URL, NODE_ID, ADDRESS, POD_IP, POD_NAME, DRAIN_TIMEOUT, ENGINE, POOL, KV_EVENTS,
    KV_REPLAY, CONTROLPLANE,
    TOKEN_FILE, INTERVAL, SCRAPE_TIMEOUT, DIALECT, WEIGHT, METRICS_LISTEN, TLS_CA, TLS_CERT,
    TLS_KEY, LOG_OPTIONS,
)  # fmt: skip
