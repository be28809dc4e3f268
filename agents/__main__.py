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
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import structlog

from agents import dialects
from agents.agent import Agent, AgentConfig
from agents.agent_metrics import AgentMetrics
from dataplane.core.names import InvalidNameError, validate_node_id, validate_pool
from servekit.addresses import parse_host_port
from servekit.flags import (
    HelpFormatter,
    RepeatedFlag,
    add_log_flags,
)
from servekit.grpc_server import wait_for_signal
from servekit.logging import configure_logging
from servekit.metrics_endpoint import MetricsEndpoint
from servekit.settings import SettingsError, add_config_flag, document_env, parse_settings
from servekit.tls import ClientTlsConfig

DEFAULT_CONTROLPLANE = "127.0.0.1:50051"
TOKEN_ENV = "CACHEROUTE_TOKEN"
log = structlog.get_logger("agents")


class ConfigError(ValueError):
    """An engine spec, URL or option value that cannot be used; names the option."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m agents",
        description="CacheRoute node agents: scrape engine /metrics, stream NodeReports.",
        epilog=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=HelpFormatter,
    )
    add_config_flag(p)
    p.add_argument(
        "--engine-url", help="engine base URL, e.g. http://host:8000 (metrics at /metrics)"
    )
    p.add_argument("--node-id", help="node id for --engine-url (default: its address)")
    p.add_argument("--address", help="engine serving host:port for callers (default: from the URL)")
    p.add_argument(
        "--engine",
        action=RepeatedFlag,
        default=[],
        metavar="ID=URL[,address=H:P][,weight=W][,dialect=D]",
        help="one more engine in this process (repeatable)",
    )
    p.add_argument("--pool", default="default", help="pool of every engine (default: default)")
    p.add_argument(
        "--controlplane",
        default=DEFAULT_CONTROLPLANE,
        help="control-plane gRPC HOST:PORT, or several comma-separated (a DNS name may resolve "
        f"to several); tried in turn on reconnect (default: {DEFAULT_CONTROLPLANE})",
    )
    p.add_argument(
        "--token-file",
        type=Path,
        help=f"file holding the bearer token for the control plane (else ${TOKEN_ENV})",
    )
    p.add_argument("--interval", type=float, default=0.25, help="scrape/report seconds (0.25)")
    p.add_argument("--scrape-timeout", type=float, default=1.0, help="GET /metrics timeout (1.0 s)")
    p.add_argument(
        "--dialect", default="auto", choices=dialects.CHOICES, help="engine metric names (auto)"
    )
    p.add_argument("--weight", type=float, default=1.0, help="relative capacity for the planner")
    p.add_argument("--metrics-listen", default="", help="HOST:PORT of the agent's own /metrics")
    p.add_argument("--tls-ca", type=Path, help="CA bundle of the control plane (enables TLS)")
    p.add_argument("--tls-cert", type=Path, help="client certificate (mTLS)")
    p.add_argument("--tls-key", type=Path, help="client private key (mTLS)")
    add_log_flags(p)
    document_env(p)
    return p


def engine_endpoints(url: str) -> tuple[str, str]:
    """(metrics URL, host:port) of an engine base URL; raises ConfigError naming the URL."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"engine URL {url!r} must look like http://host:port")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise ConfigError(f"engine URL {url!r}: {exc}") from exc
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    path = parts.path.rstrip("/")
    if not path.endswith("/metrics"):
        path += "/metrics"
    metrics_url = urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))
    return metrics_url, f"{host}:{port}"


def parse_engine_spec(spec: str, base: AgentConfig) -> AgentConfig:
    """``NODE_ID=URL[,address=H:P][,weight=W][,dialect=D]`` over the defaults in ``base``."""
    head, _, rest = spec.partition(",")
    node_id, sep, url = head.partition("=")
    if not sep or not node_id or not url:
        raise ConfigError(f"--engine {spec!r}: expected NODE_ID=URL[,key=value...]")
    metrics_url, address = engine_endpoints(url)
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
    )


def agent_configs(args: argparse.Namespace) -> list[AgentConfig]:
    if args.interval < 0.01 or args.scrape_timeout <= 0:
        raise ConfigError("--interval must be >= 0.01 s and --scrape-timeout > 0")
    try:
        pool = validate_pool(args.pool)
    except InvalidNameError as exc:
        raise ConfigError(f"--pool: {exc}") from exc
    base = AgentConfig(
        node_id="-",
        address="-",
        metrics_url="-",
        pool=pool,
        dialect=args.dialect,
        weight=_weight(args.weight, "--weight"),
        interval_s=args.interval,
        scrape_timeout_s=args.scrape_timeout,
    )
    configs: list[AgentConfig] = []
    if args.engine_url:
        metrics_url, address = engine_endpoints(args.engine_url)
        address = args.address or address
        configs.append(
            AgentConfig(
                node_id=_node_id(args.node_id or address),
                address=address,
                metrics_url=metrics_url,
                pool=pool,
                dialect=args.dialect,
                weight=base.weight,
                interval_s=args.interval,
                scrape_timeout_s=args.scrape_timeout,
            )
        )
    elif args.node_id or args.address:
        raise ConfigError("--node-id and --address describe --engine-url, which is missing")
    configs.extend(parse_engine_spec(spec, base) for spec in _engine_specs(args.engine))
    if not configs:
        raise ConfigError("no engine: give --engine-url or at least one --engine")
    ids = [c.node_id for c in configs]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"node ids must be distinct, got {ids}")
    return configs


def client_tls(args: argparse.Namespace) -> ClientTlsConfig | None:
    if args.tls_ca is None:
        if args.tls_cert or args.tls_key:
            raise ConfigError("--tls-cert/--tls-key need --tls-ca")
        return None
    if (args.tls_cert is None) != (args.tls_key is None):
        raise ConfigError("--tls-cert and --tls-key go together")
    return ClientTlsConfig(ca_file=args.tls_ca, cert_file=args.tls_cert, key_file=args.tls_key)


def _engine_specs(value: object) -> list[str]:
    if isinstance(value, str):  # from CACHEROUTE_ENGINE
        return [s for s in re.split(r"[\s;]+", value) if s]
    if isinstance(value, list | tuple):
        return [str(s) for s in value]
    raise ConfigError(f"--engine: expected a list of specs, got {value!r}")


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
    """The bearer token from ``--token-file`` (stripped), else ``$CACHEROUTE_TOKEN``."""
    if path is not None:
        try:
            token = path.read_text().strip()
        except OSError as exc:
            raise ConfigError(f"--token-file {path}: {exc.strerror}") from None
        if not token:
            raise ConfigError(f"--token-file {path} is empty")
        return token
    env = os.environ if environ is None else environ
    return env.get(TOKEN_ENV, "").strip() or None


async def serve(configs: list[AgentConfig], args: argparse.Namespace) -> int:
    """Run every agent until SIGTERM/SIGINT; returns the exit code."""
    stop_signal = asyncio.create_task(wait_for_signal())
    await asyncio.sleep(0)  # handlers are installed before any agent starts
    tls = client_tls(args)
    credentials = tls.channel_credentials() if tls else None
    metrics = AgentMetrics()
    endpoint: MetricsEndpoint | None = None
    if args.metrics_listen:
        endpoint = MetricsEndpoint(metrics.registry, *_listen(args.metrics_listen))
        log.info("metrics_endpoint", url=endpoint.url)
    try:
        async with aiohttp.ClientSession() as session:
            agents = [
                Agent(
                    c,
                    session=session,
                    controlplane=controlplanes(args.controlplane),
                    metrics=metrics,
                    credentials=credentials,
                    token=read_token(args.token_file),
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
        args = parse_settings(parser, argv)
        configs = agent_configs(args)
        controlplanes(args.controlplane)
        read_token(args.token_file)
        client_tls(args)
        if args.metrics_listen:
            _listen(args.metrics_listen)
    except (SettingsError, ConfigError) as exc:
        parser.error(str(exc))
    configure_logging("agent", json=args.log_format == "json", level=args.log_level)
    return asyncio.run(serve(configs, args))


if __name__ == "__main__":
    sys.exit(main())
