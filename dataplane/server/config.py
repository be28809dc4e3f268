"""Every option of a router process as one value (``python -m dataplane --help`` documents them).

Apart from the process (:mod:`dataplane.server.process`) so the options room can build a
:class:`RouterConfig` without reading how the process wires it.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field

from dataplane.core.active_probes import ProbeConfig
from dataplane.core.outliers import OutlierConfig
from dataplane.core.policies import DEFAULT_POLICY
from dataplane.extproc.context import ExtProcConfig
from dataplane.health.health_feedback import DEFAULT_SHARE, Network
from dataplane.http_front.front_config import FrontConfig
from servekit.auth_file import AuthTable
from servekit.tls import TlsConfig


def default_router_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True)
class RouterConfig:
    """Every option of a router process (``python -m dataplane --help`` documents them)."""

    listen: str = "127.0.0.1:50061"
    redis_url: str = "redis://127.0.0.1:6379/0"
    router_id: str = field(default_factory=default_router_id)
    policy: str = DEFAULT_POLICY
    seed: int = 0
    table_interval_s: float = 2.0
    ack_interval_s: float = 5.0
    load_interval_s: float = 1.0
    report_interval_s: float = 5.0
    sample_interval_s: float = 1.0
    sample_rate: float = 0.01
    sample_floor: float = (
        1.0  # samples/s the rate rises to reach on thin traffic (dataplane.telemetry.sampler)
    )
    sample_buffer: int = 10_000
    top_keys: int = 4096
    correction_horizon_s: float = 5.0
    panic_threshold: float = 0.5
    load_max_age_s: float = 3.0
    outliers: OutlierConfig = field(default_factory=OutlierConfig)  # passive health
    probes: ProbeConfig = field(default_factory=ProbeConfig)  # active probes, stale pools only
    auth: AuthTable | None = None  # names Route callers; unknown ones are not counted
    planning_rate_limit: float = 0.0  # counted Route requests per second per caller; 0: off
    health_feedback_share: float = DEFAULT_SHARE  # of a pool one Release caller may eject
    health_feedback_from: tuple[Network, ...] = ()  # peers whose Release outcomes count
    health_feedback_anonymous: bool = False  # without auth, non-loopback peers' outcomes count
    # Largest request accepted: a 1,000-request batch of full 4 KiB prompts is ~4 MB.
    max_message_bytes: int = 4 * 1024 * 1024
    startup_timeout_s: float = 3.0
    grace_s: float = 5.0
    decode_nice: int = 10
    metrics_listen: str | None = "127.0.0.1:0"
    tls: TlsConfig | None = None
    http: FrontConfig | None = None  # the OpenAI-compatible front; None: off
    extproc: ExtProcConfig | None = None  # the Envoy ext_proc Endpoint Picker; None: off
