"""``ControlPlaneConfig``: every setting of one control-plane process, frozen, with defaults.

The defaults live here once; the declared options (:mod:`controlplane.config.declared`) take
theirs from an instance of it.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from pathlib import Path

from cacheroute_state.embedded import DEFAULT_PORT, default_data_dir
from controlplane.core.report_expiry import DEFAULT_RETENTION_S
from controlplane.services.limits import DEFAULT_IMPORT_BYTES, DEFAULT_REQUEST_BYTES
from dataplane.core.policies import DEFAULT_POLICY
from servekit.tls import TlsConfig


@dataclass(frozen=True)
class ControlPlaneConfig:
    listen: str = "127.0.0.1:50051"
    redis_url: str = ""
    # The embedded Redis (no redis_url): fixed port, AOF under redis_data_dir (None: the default
    # folder for a fixed port, none for port 0) unless redis_persistence is off.
    redis_data_dir: Path | None = None
    redis_persistence: bool = True
    embedded_redis_port: int = DEFAULT_PORT
    embedded_redis_bind: str = "127.0.0.1"
    instance_id: str = ""
    metrics_listen: str = "127.0.0.1:9091"
    load_publish_interval_s: float = 0.25
    node_timeout_intervals: float = 3.0
    # Stored reports older than this are forgotten by the leader (controlplane/core/report_expiry).
    report_retention_s: float = DEFAULT_RETENTION_S
    plan_interval_s: float = 0.0
    # 0: derive per build as the mean per-destination rate (total rate / destinations).
    q_cap: float = 0.0
    slots_per_node: int = 8
    rate_half_life_s: float = 60.0
    rate_update_interval_s: float = 1.0
    rate_max_keys: int = 250_000
    leader_lease_ttl_s: float = 3.0
    # >= the agents' longest reconnect backoff (5 s) plus a connect: see
    # controlplane/cluster/loads.py.
    leader_grace_s: float = 8.0
    # CIDRs agent-reported engine addresses must lie in; empty: any address (see report_checks).
    agent_networks: tuple[str, ...] = ()
    # YAML list of {name, role, sha256|subject}: every RPC then needs a token or known cert.
    auth_file: Path | None = None
    # Per-method request size limits, checked before parsing (controlplane/services/limits.py).
    max_request_bytes: int = DEFAULT_REQUEST_BYTES
    max_import_bytes: int = DEFAULT_IMPORT_BYTES
    grace_s: float = 5.0
    # Plan lifecycle (issue 11; declared in controlplane/lifecycle/options.py): the replanner's
    # churn cap, automatic mode, the shadow replay's budget and the live guard.
    max_churn: float = 0.10
    auto_interval_s: float = 60.0
    shadow_max_requests: int = 20_000
    shadow_seeds: int = 3
    shadow_iterations: int = 4
    shadow_recent_minutes: int = 10
    shadow_profile: str = ""  # the pool's engine profile in the replay ("": the 70B testbed)
    shadow_policy: str = DEFAULT_POLICY  # the routers' policy the replay follows the plan with
    shadow_min_samples: int = 300  # fewer sampled requests: the verdict is inconclusive
    shadow_inconclusive: str = "refuse"  # or "allow": the shadow gate's rule for inconclusive
    plan_retention: int = 50  # stored versions kept per pool by the leader (0: all)
    guard_window_s: float = 60.0
    guard_settle_s: float = 5.0
    guard_max_regression: float = 0.5
    guard_floor_s: float = 0.25
    guard_min_samples: int = 50
    guard_action: str = "disable"
    guard_all_rollouts: bool = False
    # Byte-aware admission in live builds (controlplane/core/live_sizes.py): off while 0.
    cache_budget: float = 0.0
    byte_rank: str = "best"
    prefix_sizes: dict[str, float] = field(default_factory=dict)  # configured; win over reports
    tls: TlsConfig | None = None
    log_json: bool = True
    log_level: str = "info"

    @property
    def report_interval_ms(self) -> int:
        """The report interval the control plane asks agents for: one report per snapshot."""
        return max(1, round(self.load_publish_interval_s * 1000))

    def embedded_data_dir(self) -> Path | None:
        """Where the embedded Redis persists, or None for an ephemeral one."""
        if not self.redis_persistence:
            return None
        if self.redis_data_dir is not None:
            return self.redis_data_dir
        return default_data_dir(self.embedded_redis_port) if self.embedded_redis_port else None

    def resolved_instance_id(self) -> str:
        return self.instance_id or f"{socket.gethostname()}:{os.getpid()}"
