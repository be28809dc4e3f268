"""What an agent may say: every NodeReport is checked before it is stored.

A hostile or broken agent must not steer traffic: a load of -1e9 drew 29% of decisions, NaN was
accepted, a report interval of 2^32-1 ms kept a silent node "healthy" for 149 days, and any
client could register an engine at any address. Checks (pure, no I/O):

* loads (running, waiting, throughput) finite, >= 0 and at most :data:`MAX_LOAD` (so their sums
  stay finite: running = waiting = 1e308 passed each check, summed to infinity and made every
  router reject the pool's snapshots); ``kv_usage`` and ``prefix_hit_rate`` in
  [0, 1]; ``weight`` finite, >= 0 and at most :data:`MAX_WEIGHT`;
* ``report_interval_ms`` 0 (the control plane's) or within [:data:`MIN_INTERVAL_MS`,
  :data:`MAX_INTERVAL_MS`] (the agents' own clamp);
* the address's host an IP literal inside one of the allowed networks, when networks are
  configured (``--agent-networks``);
* the node bound to the agent identity that registered it (:func:`check_identity`);
* a TTFT histogram, when present: at most :data:`MAX_BUCKETS` finite, strictly ascending bounds,
  one count per bound, counts finite, >= 0, at most :data:`MAX_TTFT_COUNT` and non-decreasing,
  the total at least the last count, the sum finite and >= 0 (the live guard's quantiles assume
  all of it; how fast counts may grow is bounded where they are used,
  :mod:`controlplane.core.ttft_window`).

* every string at most :data:`MAX_REPORT_TEXT` characters and every list bounded
  (:mod:`controlplane.core.message_bounds`); ``error`` is not refused but cut to
  :data:`MAX_ERROR_TEXT` by :func:`trimmed` before it is stored.

A failure is :class:`InvalidReportError` (INVALID_ARGUMENT) with a short ``reason`` label for
``cacheroute_controlplane_agent_reports_rejected_total{reason}``.
"""

from __future__ import annotations

import ipaddress
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from cacheroute.v1 import agent_pb2
from controlplane.core.message_bounds import BoundsError, check_bounds
from dataplane.core.names import clip

MIN_INTERVAL_MS = 50
MAX_INTERVAL_MS = 60_000
MAX_WEIGHT = 1e6
MAX_BUCKETS = 64
MAX_LOAD = 1e9  # requests or tokens/s per engine; far above any real one, far below overflow
MAX_TTFT_COUNT = 1e12  # observations since an engine started: 30 years at 1,000 a second
MAX_REPORT_TEXT = 1024
MAX_ERROR_TEXT = 512
REASONS = ("load", "interval", "address", "identity", "weight", "ttft", "size")

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class InvalidReportError(ValueError):
    """A report the control plane refuses; ``reason`` is the metric label."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def parse_networks(values: Sequence[str]) -> tuple[Network, ...]:
    """CIDR strings → networks; raises ValueError naming a bad one."""
    networks = []
    for value in values:
        try:
            networks.append(ipaddress.ip_network(value.strip(), strict=False))
        except ValueError as exc:
            raise ValueError(f"agent network {clip(value)}: {exc}") from None
    return tuple(networks)


@dataclass(frozen=True)
class ReportRules:
    """The configured part of the checks."""

    networks: tuple[Network, ...] = ()


NO_RULES = ReportRules()


def _finite_at_least_zero(name: str, value: float) -> None:
    if not (math.isfinite(value) and 0 <= value <= MAX_LOAD):
        raise InvalidReportError("load", f"{name} must be in [0, {MAX_LOAD:g}], got {value!r}")


def trimmed(report: agent_pb2.NodeReport) -> agent_pb2.NodeReport:
    """``report`` with its free-text ``error`` cut to :data:`MAX_ERROR_TEXT` (in place)."""
    if len(report.error) > MAX_ERROR_TEXT:
        report.error = report.error[:MAX_ERROR_TEXT] + "…"
    return report


def _fraction(name: str, value: float) -> None:
    if not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise InvalidReportError("load", f"{name} must be in [0, 1], got {value!r}")


def check_address(address: str, rules: ReportRules) -> None:
    if not rules.networks:
        return
    host = address.rpartition(":")[0].strip("[]")
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        raise InvalidReportError(
            "address", f"address {clip(address)}: agent networks are configured, so the host "
            "must be an IP address"
        ) from None  # fmt: skip
    if not any(ip in network for network in rules.networks):
        allowed = ", ".join(str(n) for n in rules.networks[:4])
        raise InvalidReportError(
            "address", f"address {clip(address)} is outside the allowed agent networks ({allowed})"
        )


def check_report(report: agent_pb2.NodeReport, rules: ReportRules) -> None:
    """Raise :class:`InvalidReportError` unless every field is within bounds (module doc)."""
    try:
        check_bounds(
            report,
            max_text=MAX_REPORT_TEXT,
            max_items=MAX_BUCKETS,
            exempt=frozenset({"error", "ttft"}),  # error is trimmed; ttft has its own rule
        )
    except BoundsError as exc:
        raise InvalidReportError("size", str(exc)) from None
    for name in ("running", "waiting", "prompt_tokens_per_s", "generation_tokens_per_s"):
        _finite_at_least_zero(name, getattr(report, name))
    _fraction("kv_usage", report.kv_usage)
    if report.HasField("prefix_hit_rate"):
        _fraction("prefix_hit_rate", report.prefix_hit_rate)
    weight = report.weight
    if not (math.isfinite(weight) and 0 <= weight <= MAX_WEIGHT):
        raise InvalidReportError("weight", f"weight must be in [0, {MAX_WEIGHT:g}], got {weight!r}")
    interval = report.report_interval_ms
    if interval and not MIN_INTERVAL_MS <= interval <= MAX_INTERVAL_MS:
        raise InvalidReportError(
            "interval",
            f"report_interval_ms must be 0 or in [{MIN_INTERVAL_MS}, {MAX_INTERVAL_MS}], "
            f"got {interval}",
        )
    if report.HasField("ttft"):
        check_histogram(report.ttft)
    if report.address:
        check_address(report.address, rules)


def check_histogram(h: agent_pb2.LatencyHistogram) -> None:
    """A cumulative histogram the quantile arithmetic can use (module docstring)."""
    bounds, counts = list(h.upper_bounds), list(h.counts)
    problem = ""
    if len(bounds) > MAX_BUCKETS or len(counts) != len(bounds):
        problem = f"{len(bounds)} bounds and {len(counts)} counts (at most {MAX_BUCKETS}, equal)"
    elif not all(math.isfinite(b) for b in bounds) or any(
        b <= a for a, b in itertools.pairwise(bounds)
    ):
        problem = "bounds must be finite and strictly ascending"
    elif not all(math.isfinite(c) and c >= 0 for c in [*counts, h.count, h.sum]):
        problem = "counts, count and sum must be finite numbers >= 0"
    elif h.count > MAX_TTFT_COUNT:
        problem = f"count must be at most {MAX_TTFT_COUNT:g}, got {h.count:g}"
    elif any(b < a for a, b in itertools.pairwise(counts)) or (counts and h.count < counts[-1]):
        problem = "cumulative counts must not decrease, nor the total be below the last"
    if problem:
        raise InvalidReportError("ttft", f"ttft histogram: {problem}")


def check_identity(node_id: str, registered_by: str, identity: str) -> None:
    """A node registered by one agent identity may not be reported by another."""
    if registered_by and registered_by != identity:
        raise InvalidReportError(
            "identity",
            f"node {clip(node_id)} is registered to agent identity {clip(registered_by)}; "
            f"this stream is {clip(identity or 'anonymous')}",
        )
