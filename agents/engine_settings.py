"""Parsed options to agent configurations: engine specs, URLs, weights, TLS, targets, token.

Every check that can fail at start lives here and raises :class:`ConfigError` naming the option,
so ``python -m agents`` refuses a bad setting before any agent dials.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from agents import dialects
from agents.agent import AgentConfig
from agents.cli_options import (
    ADDRESS,
    DIALECT,
    DRAIN_TIMEOUT,
    ENGINE,
    ENGINE_URL,
    INTERVAL,
    KV_EVENTS,
    KV_REPLAY,
    NODE_ID,
    POD_IP,
    POD_NAME,
    POOL,
    SCRAPE_TIMEOUT,
    TLS_CA,
    TLS_CERT,
    TLS_KEY,
    WEIGHT,
)
from dataplane.core.addresses import InvalidEndpointError, check_endpoint
from dataplane.core.names import InvalidNameError, validate_node_id, validate_pool
from servekit import client_token
from servekit.addresses import parse_host_port
from servekit.tls import ClientTlsConfig


class ConfigError(ValueError):
    """An engine spec, URL or option value that cannot be used; names the option."""


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
        if not sep or key not in ("address", "weight", "dialect", "kv_events", "kv_replay"):
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
        kv_events=_endpoint(fields.get("kv_events"), f"--engine {spec!r}"),
        kv_replay=_endpoint(fields.get("kv_replay"), f"--engine {spec!r}"),
    )


def _endpoint(value: str | None, source: str) -> str | None:
    """A ZMQ endpoint the agent dials (``tcp://host:port`` or ``ipc://path``), or None."""
    if value is None:
        return None
    if not value.startswith(("tcp://", "ipc://")) or len(value) < 7:
        raise ConfigError(f"{source}: KV-event endpoint {value!r} must be tcp://HOST:PORT")
    return value


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
        kv = _endpoint(KV_EVENTS.value(args), "--kv-events")
        replay = _endpoint(KV_REPLAY.value(args), "--kv-replay")
        configs.append(
            replace(
                base,
                node_id=_node_id(node_id),
                address=address,
                metrics_url=metrics_url,
                kv_events=kv,
                kv_replay=replay,
            )
        )
    elif node_id or address or KV_EVENTS.value(args):
        raise ConfigError(
            "--node-id, --address and --kv-events describe --engine-url, which is missing"
        )
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


def listen_address(value: str) -> tuple[str, int]:
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
