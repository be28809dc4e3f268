"""The command line of each component the local cluster launches.

Apart from :mod:`cachectl.localcluster.cluster` (which starts, watches and stops them) so the
flags each server gets are read in one place, and every server binds port 0: the launcher learns
the port from the server's log, so no port can be taken between choosing it and binding it.
"""

from __future__ import annotations

from cachectl.localcluster.processes import python_module
from cachectl.localcluster.spec import ClusterSpec

HOST = "127.0.0.1"


def _log(spec: ClusterSpec) -> list[str]:
    return ["--log-format", "json", "--log-level", spec.log_level]


def controlplane_command(spec: ClusterSpec, redis_url: str) -> list[str]:
    """``python -m controlplane`` with the spec's intervals and extra options."""
    return python_module(
        "controlplane",
        "--listen", f"{HOST}:0",
        "--redis-url", redis_url,
        "--metrics-listen", "",
        "--load-publish-interval", str(spec.agent_interval_s),
        "--node-timeout-intervals", str(spec.node_timeout_intervals),
        "--shutdown-grace", "1",
        *spec.controlplane_args,
        *_log(spec),
    )  # fmt: skip


def engines_command(spec: ClusterSpec, group: tuple[int, ...]) -> list[str]:
    """``python -m simengine`` serving one engine per index of ``group``."""
    listen = [a for _ in group for a in ("--listen", f"{HOST}:0")]
    extra = ["--kv-blocks", str(spec.kv_blocks)] if spec.kv_blocks else []
    extra += ["--kv-events-port", "0"] if spec.kv_events else []
    return python_module(
        "simengine",
        *listen,
        "--profile", spec.profile,
        "--speedup", str(spec.speedup),
        "--stream-interval", str(spec.stream_interval_s),
        *extra,
        *_log(spec),
    )  # fmt: skip


def router_command(spec: ClusterSpec, index: int, router_id: str, redis_url: str) -> list[str]:
    """``python -m dataplane``: router ``index`` (seeded ``index + 1``), gRPC and HTTP fronts."""
    return python_module(
        "dataplane",
        "--listen", f"{HOST}:0",
        "--redis-url", redis_url,
        "--router-id", router_id,
        "--policy", spec.router_policy,
        "--seed", str(index + 1),
        "--report-interval", str(spec.router_report_interval_s),
        "--table-interval", str(spec.router_table_interval_s),
        "--metrics-listen", f"{HOST}:0",
        "--http-listen", f"{HOST}:0",
        "--grace", "1",
        *spec.router_args,
        *_log(spec),
    )  # fmt: skip


def agents_command(
    spec: ClusterSpec,
    controlplane_address: str,
    engine_addresses: dict[str, str],
    kv_endpoints: dict[str, str],
) -> list[str]:
    """``python -m agents``: one agent per engine, once the engines' addresses are known."""
    engines = [
        a
        for node in spec.node_ids()
        for a in (
            "--engine",
            f"{node}=http://{engine_addresses[node]}{kv_endpoints.get(node, '')}",
        )
    ]
    return python_module(
        "agents",
        "--controlplane", controlplane_address,
        "--pool", spec.pool,
        "--interval", str(spec.agent_interval_s),
        "--scrape-timeout", str(spec.scrape_timeout_s),
        *engines,
        "--log-format", "json", "--log-level", spec.log_level,
    )  # fmt: skip
