"""What the local cluster runs (its spec) and the one error it raises.

Apart from :mod:`cachectl.localcluster.cluster` so the demo, the tests and the admin calls can
name a cluster's shape without the machinery that starts it.
"""

from __future__ import annotations

from dataclasses import dataclass

from dataplane.core.policies import DEFAULT_POLICY
from sim.engine_model import LLAMA_70B


class ClusterError(RuntimeError):
    """The cluster did not start or did not do what was asked; the message says what."""


@dataclass(frozen=True)
class ClusterSpec:
    """What to run. ``engine_groups`` splits engines over processes (None: one process)."""

    engines: int = 8
    routers: int = 2
    engine_groups: tuple[tuple[int, ...], ...] | None = None
    profile: str = LLAMA_70B.name
    speedup: float = 1.0
    kv_blocks: int | None = None
    stream_interval_s: float = 0.25
    agent_interval_s: float = 0.25
    # Lenient on purpose: on a shared 2-core machine a CPU-starved engine process can stall for
    # a second, and with every engine in one process a 1 s scrape timeout would mark all of them
    # stale at once (routers then answer UNAVAILABLE). A dead engine is still seen at once: its
    # agent's next scrape is refused and reports stale. A silent agent: down after 20 intervals.
    scrape_timeout_s: float = 2.5
    node_timeout_intervals: float = 20.0
    router_report_interval_s: float = 1.0
    router_table_interval_s: float = 1.0
    router_policy: str = DEFAULT_POLICY
    pool: str = "default"
    log_level: str = "info"
    # Extra command-line options of the control plane and of each router (e.g. automatic mode's
    # --auto-interval and --guard-*, the routers' trace sampling).
    controlplane_args: tuple[str, ...] = ()
    router_args: tuple[str, ...] = ()
    # Engines publish vLLM's KV-cache events and the agents subscribe (issue 31): `cachectl
    # status` then shows each engine's residency. Off by default: it costs CPU per step.
    kv_events: bool = False

    def node_ids(self) -> list[str]:
        return [f"sim-{i}" for i in range(self.engines)]

    def groups(self) -> tuple[tuple[int, ...], ...]:
        groups = self.engine_groups or (tuple(range(self.engines)),)
        flat = sorted(i for g in groups for i in g)
        if flat != list(range(self.engines)):
            raise ValueError(f"engine_groups {groups} must cover engines 0..{self.engines - 1}")
        return groups
