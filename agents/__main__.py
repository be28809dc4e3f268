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

from servekit.startup_gc import freeze_startup, pause_for_startup

if __name__ == "__main__":
    pause_for_startup()  # until the agents run (servekit/startup_gc.py)

import argparse
import asyncio
import sys
from collections.abc import Mapping, Sequence

import aiohttp
import structlog

from agents.agent import Agent, AgentConfig
from agents.agent_metrics import AgentMetrics
from agents.cli_options import CONTROLPLANE, METRICS_LISTEN, OPTIONS, TOKEN_FILE
from agents.engine_settings import (
    ConfigError,
    agent_configs,
    client_tls,
    controlplanes,
    listen_address,
    read_token,
)
from servekit.flags import LOG_FORMAT, LOG_LEVEL, add_version_flag
from servekit.logging import configure_logging
from servekit.metrics_endpoint import MetricsEndpoint
from servekit.options import SettingsError
from servekit.signals import wait_for_signal

log = structlog.get_logger("agents")


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


async def serve(configs: list[AgentConfig], args: argparse.Namespace) -> int:
    """Run every agent until SIGTERM/SIGINT; returns the exit code."""
    stop_signal = asyncio.create_task(wait_for_signal())
    await asyncio.sleep(0)  # handlers are installed before any agent starts
    tls = client_tls(args)
    credentials = tls.channel_credentials() if tls else None
    metrics = AgentMetrics()
    endpoint: MetricsEndpoint | None = None
    if METRICS_LISTEN.value(args):
        endpoint = MetricsEndpoint(metrics.registry, *listen_address(METRICS_LISTEN.value(args)))
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
            freeze_startup()  # what start-up built lives as long as the process
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
            listen_address(METRICS_LISTEN.value(args))
    except (SettingsError, ConfigError) as exc:
        parser.error(str(exc))
    configure_logging("agent", json=LOG_FORMAT.value(args) == "json", level=LOG_LEVEL.value(args))
    return asyncio.run(serve(configs, args))


if __name__ == "__main__":
    sys.exit(main())
