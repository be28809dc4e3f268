"""``python -m agents``: node agents that scrape engines and stream NodeReports.

One engine::

    python -m agents --engine-url http://10.0.0.5:8000 --node-id gpu-a --controlplane cp:50051

Several engines in one process (each agent is an asyncio task with its own stream; this keeps
the local cluster cheap on a small machine)::

    python -m agents --controlplane 127.0.0.1:50051 \\
        --engine sim-0=http://127.0.0.1:9100 \\
        --engine sim-1=http://127.0.0.1:9101,address=127.0.0.1:9101,weight=2

``--engine NODE_ID=URL[,address=HOST:PORT][,weight=W][,dialect=D]`` may repeat; options it does
not name come from ``--pool``, ``--weight``, ``--dialect``, and ``address`` defaults to the URL's
host:port. In a config file ``engine`` is a list; in ``CACHEROUTE_ENGINE`` specs are separated by
spaces or ``;``. SIGTERM or SIGINT: every agent sends ``leaving``, closes its stream, exit 0.

In a Kubernetes pod (a sidecar next to its engine), the downward API's ``POD_IP`` and
``POD_NAME`` make the node address ``POD_IP:<the engine URL's port>``, the endpoint a gateway
dials, and the node id the pod's name; ``--drain-timeout`` makes SIGTERM drain the node first
(routers stop choosing it while the engine finishes what it holds), then leave.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import structlog

from agents import dialects
from agents.agent import Agent, AgentConfig
from agents.agent_metrics import AgentMetrics
from dataplane.core.addresses import InvalidEndpointError, check_endpoint
from dataplane.core.names import InvalidNameError, validate_node_id, validate_pool
from servekit import client_token
from servekit.addresses import parse_host_port
from servekit.flags import (
    LOG_FORMAT,
    LOG_LEVEL,
    LOG_OPTIONS,
    add_version_flag,
    non_negative_float,
    optional_path,
)
from servekit.grpc_server import wait_for_signal
from servekit.logging import configure_logging
from servekit.metrics_endpoint import MetricsEndpoint
from servekit.options import Option, OptionSet, SettingsError, list_option
from servekit.tls import ClientTlsConfig

DEFAULT_CONTROLPLANE = "127.0.0.1:50051"
log = structlog.get_logger("agents")


class ConfigError(ValueError):
    """An engine spec, URL or option value that cannot be used; names the option."""


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
    metavar="ID=URL[,address=H:P][,weight=W][,dialect=D]",
)
POOL = Option("pool", "default", str, "pool of every engine")
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
    ENGINE_URL, NODE_ID, ADDRESS, POD_IP, POD_NAME, DRAIN_TIMEOUT, ENGINE, POOL, CONTROLPLANE,
    TOKEN_FILE, INTERVAL, SCRAPE_TIMEOUT, DIALECT, WEIGHT, METRICS_LISTEN, TLS_CA, TLS_CERT,
    TLS_KEY, LOG_OPTIONS,
)  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = OPTIONS.parser(
        prog="python -m agents",
        description="CacheRoute node agents: scrape engine /metrics, stream NodeReports.",
        epilog=__doc__.split("\n\n", 1)[1] if __doc__ else None,
    )
    add_version_flag(parser)
    return parser


def parse_args(
    argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> argparse.Namespace:
    """Flags > ``CACHEROUTE_*`` > ``--config`` YAML; SettingsError names a bad env/file value."""
    return OPTIONS.parse(build_parser(), argv, environ)


def engine_endpoints(url: str, pod_ip: str | None = None) -> tuple[str, str]:
    """(metrics URL, host:port) of an engine base URL, the host replaced by ``pod_ip`` when
    given; raises ConfigError naming the URL."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"engine URL {url!r} must look like http://host:port")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise ConfigError(f"engine URL {url!r}: {exc}") from exc
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    if pod_ip is not None:
        host = pod_ip
    path = parts.path.rstrip("/")
    if not path.endswith("/metrics"):
        path += "/metrics"
    metrics_url = urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))
    return metrics_url, f"{host}:{port}"


def parse_engine_spec(spec: str, base: AgentConfig, pod_ip: str | None = None) -> AgentConfig:
    """``NODE_ID=URL[,address=H:P][,weight=W][,dialect=D]`` over the defaults in ``base``."""
    head, _, rest = spec.partition(",")
    node_id, sep, url = head.partition("=")
    if not sep or not node_id or not url:
        raise ConfigError(f"--engine {spec!r}: expected NODE_ID=URL[,key=value...]")
    metrics_url, address = engine_endpoints(url, pod_ip)
    fields: dict[str, Any] = {"address": address}
    for item in filter(None, rest.split(",")):
        key, sep, value = item.partition("=")
        if not sep or key not in ("address", "weight", "dialect"):
            raise ConfigError(f"--engine {spec!r}: unknown option {item!r}")
        fields[key] = value
    if "weight" in fields:
        fields["weight"] = _weight(fields["weight"], f"--engine {spec!r}")
    if fields.get("dialect", base.dialect) not in dialects.CHOICES:
        raise ConfigError(f"--engine {spec!r}: dialect must be one of {dialects.CHOICES}")
    return AgentConfig(
        node_id=_node_id(node_id),
        address=fields["address"],
        metrics_url=metrics_url,
        pool=base.pool,
        dialect=fields.get("dialect", base.dialect),
        weight=fields.get("weight", base.weight),
        interval_s=base.interval_s,
        scrape_timeout_s=base.scrape_timeout_s,
        drain_timeout_s=base.drain_timeout_s,
    )


def agent_configs(args: argparse.Namespace) -> list[AgentConfig]:
    interval, scrape_timeout = INTERVAL.value(args), SCRAPE_TIMEOUT.value(args)
    if interval < 0.01 or scrape_timeout <= 0:
        raise ConfigError("--interval must be >= 0.01 s and --scrape-timeout > 0")
    try:
        pool = validate_pool(POOL.value(args))
    except InvalidNameError as exc:
        raise ConfigError(f"--pool: {exc}") from exc
    base = AgentConfig(
        node_id="-",
        address="-",
        metrics_url="-",
        pool=pool,
        dialect=DIALECT.value(args),
        weight=_weight(WEIGHT.value(args), "--weight"),
        interval_s=interval,
        scrape_timeout_s=scrape_timeout,
        drain_timeout_s=DRAIN_TIMEOUT.value(args),
    )
    configs: list[AgentConfig] = []
    engine_url, node_id, address = ENGINE_URL.value(args), NODE_ID.value(args), ADDRESS.value(args)
    pod_ip = POD_IP.value(args)
    if engine_url:
        metrics_url, url_address = engine_endpoints(engine_url, pod_ip)
        address = address or url_address
        node_id = node_id or POD_NAME.value(args) or address
        configs.append(
            replace(base, node_id=_node_id(node_id), address=address, metrics_url=metrics_url)
        )
    elif node_id or address:
        raise ConfigError("--node-id and --address describe --engine-url, which is missing")
    configs.extend(parse_engine_spec(spec, base, pod_ip) for spec in ENGINE.value(args))
    if not configs:
        raise ConfigError("no engine: give --engine-url or at least one --engine")
    for config in configs:  # the control plane refuses anything but HOST:PORT: say so at start
        try:
            check_endpoint(config.address)
        except InvalidEndpointError as exc:
            message = f"address {config.address!r} of node {config.node_id}: {exc}"
            raise ConfigError(message) from None
    ids = [c.node_id for c in configs]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"node ids must be distinct, got {ids}")
    return configs


def client_tls(args: argparse.Namespace) -> ClientTlsConfig | None:
    ca, cert, key = TLS_CA.value(args), TLS_CERT.value(args), TLS_KEY.value(args)
    if ca is None:
        if cert or key:
            raise ConfigError("--tls-cert/--tls-key need --tls-ca")
        return None
    if (cert is None) != (key is None):
        raise ConfigError("--tls-cert and --tls-key go together")
    return ClientTlsConfig(ca_file=ca, cert_file=cert, key_file=key)


def _node_id(node_id: str) -> str:
    try:
        return validate_node_id(node_id)
    except InvalidNameError as exc:
        raise ConfigError(str(exc)) from exc


def _weight(value: object, source: str) -> float:
    try:
        weight = float(str(value))
    except ValueError as exc:
        raise ConfigError(f"{source}: weight {value!r} is not a number") from exc
    if not (math.isfinite(weight) and weight >= 0):
        raise ConfigError(f"{source}: weight must be a finite number >= 0, got {value!r}")
    return weight


def _listen(value: str) -> tuple[str, int]:
    try:
        return parse_host_port(value, default_host="0.0.0.0")
    except ValueError as exc:
        raise ConfigError(f"--metrics-listen {value!r}: {exc}") from None


def controlplanes(value: str) -> list[str]:
    """``--controlplane``: one or more comma-separated HOST:PORT."""
    targets = [t.strip() for t in str(value).split(",") if t.strip()]
    for target in targets:
        host, sep, port = target.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ConfigError(f"--controlplane {target!r}: expected HOST:PORT")
    if not targets:
        raise ConfigError("--controlplane: give at least one HOST:PORT")
    return targets


def read_token(path: Path | None, environ: dict[str, str] | None = None) -> str | None:
    """The bearer token (:mod:`servekit.client_token`); a bad ``--token-file`` is a ConfigError."""
    try:
        return client_token.read_token(path, environ)
    except client_token.TokenFileError as exc:
        raise ConfigError(str(exc)) from None


async def serve(configs: list[AgentConfig], args: argparse.Namespace) -> int:
    """Run every agent until SIGTERM/SIGINT; returns the exit code."""
    stop_signal = asyncio.create_task(wait_for_signal())
    await asyncio.sleep(0)  # handlers are installed before any agent starts
    tls = client_tls(args)
    credentials = tls.channel_credentials() if tls else None
    metrics = AgentMetrics()
    endpoint: MetricsEndpoint | None = None
    if METRICS_LISTEN.value(args):
        endpoint = MetricsEndpoint(metrics.registry, *_listen(METRICS_LISTEN.value(args)))
        log.info("metrics_endpoint", url=endpoint.url)
    try:
        async with aiohttp.ClientSession() as session:
            agents = [
                Agent(
                    c,
                    session=session,
                    controlplane=controlplanes(CONTROLPLANE.value(args)),
                    metrics=metrics,
                    credentials=credentials,
                    token=read_token(TOKEN_FILE.value(args)),
                )
                for c in configs
            ]
            tasks = [asyncio.create_task(a.run(), name=a.config.node_id) for a in agents]
            await asyncio.wait({stop_signal, *tasks}, return_when=asyncio.FIRST_COMPLETED)
            for agent in agents:
                agent.stop()
            results = await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        stop_signal.cancel()
        if endpoint is not None:
            endpoint.close()
    failed = [(t.get_name(), r) for t, r in zip(tasks, results, strict=True) if r is not None]
    for name, error in failed:
        log.error("agent_failed", node_id=name, error=repr(error))
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = OPTIONS.parse(parser, argv)
        configs = agent_configs(args)
        controlplanes(CONTROLPLANE.value(args))
        read_token(TOKEN_FILE.value(args))
        client_tls(args)
        if METRICS_LISTEN.value(args):
            _listen(METRICS_LISTEN.value(args))
    except (SettingsError, ConfigError) as exc:
        parser.error(str(exc))
    configure_logging("agent", json=LOG_FORMAT.value(args) == "json", level=LOG_LEVEL.value(args))
    return asyncio.run(serve(configs, args))


if __name__ == "__main__":
    sys.exit(main())
