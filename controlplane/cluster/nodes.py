"""The node registry and node liveness.

A node is either *static* (``cachectl nodes add``: no agent, healthy with load 0 until removed or
drained) or *agent-managed* (registered by an agent stream; see
:mod:`controlplane.cluster.agent_sessions`). An agent node's state is derived, on whichever
instance asks, from its latest report in Redis and that report's receive time:

* down      the agent left (``leaving``, or its stream ended), or the last report is older than
            ``timeout_intervals`` x the node's own report interval (the configured interval when
            the agent states none), or it never reported;
* healthy   not down, and the report says healthy and not stale (a stale report means the agent's
            scrape failed: its loads are old, so the node is unhealthy rather than idle);
* load      running + waiting from the report.

Draining comes from the registry record (an operator's ``cachectl nodes drain``) or from the
agent's own latest report (``draining``: the agent is shutting down and lets its engine finish
first; it ends when the node leaves or a new stream joins without it). It never changes health:
routers skip drained nodes, and a drained node does not count toward their panic threshold.

Listing (``ListNodes``, on any instance) shows a node as routers treat it: a node that is down
only because its reports stopped, but that the leader's latest snapshot still publishes healthy
although it was silent past its timeout then too, is kept up by the leader's grace
(:mod:`controlplane.cluster.loads`); it is listed healthy with ``reason`` "leader grace: ...".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cacheroute.v1 import admin_pb2, cluster_pb2
from cacheroute_state import Stores
from cacheroute_state.interfaces import ReportRecord
from controlplane.errors import (
    InvalidArgumentError,
    NodeIdTakenError,
    NodeNotFoundError,
    PreconditionError,
)
from dataplane.core.addresses import InvalidEndpointError, check_endpoint
from dataplane.core.names import clip, validate_node_id, validate_pool


class InvalidAddressError(ValueError):
    """A node address that is not HOST:PORT."""


@dataclass(frozen=True)
class Liveness:
    """How long an agent node may stay silent before it counts as down."""

    timeout_intervals: float = 3.0
    default_interval_ms: int = 250

    def timeout_ms(self, report_interval_ms: int) -> float:
        return self.timeout_intervals * (report_interval_ms or self.default_interval_ms)


def validate_address(address: str) -> str:
    """``HOST:PORT``: an IP literal (IPv6 in brackets) or an RFC 1123 name, a port in 1-65535
    (:mod:`dataplane.core.addresses`); returns it unchanged."""
    try:
        return check_endpoint(address)
    except InvalidEndpointError as exc:
        raise InvalidAddressError(f"address {clip(address)}: {exc}") from None


def validate_weight(weight: float) -> float:
    """A capacity weight: finite and >= 0 (0 means 1)."""
    if not (math.isfinite(weight) and weight >= 0):
        raise InvalidArgumentError(f"weight must be a finite number >= 0, got {weight}")
    return weight


def effective_weight(weight: float) -> float:
    return weight if weight > 0 else 1.0


def is_down(
    report: ReportRecord | None, now_ms: int, liveness: Liveness, *, in_grace: bool = False
) -> bool:
    """Down: never reported, left, or silent past its timeout (not while ``in_grace``: a new
    leader's first seconds, when agents are still reconnecting to it)."""
    if report is None or report.report.leaving:
        return True
    if in_grace:
        return False
    age = now_ms - report.received_at_unix_ms
    return age > liveness.timeout_ms(report.report.report_interval_ms)


def node_status(
    record: cluster_pb2.NodeRecord,
    report: ReportRecord | None,
    now_ms: int,
    liveness: Liveness,
    *,
    in_grace: bool = False,
) -> admin_pb2.NodeStatus:
    """A node's current state (module docstring) as the admin API and the snapshots show it."""
    load = cluster_pb2.NodeLoad(
        node_id=record.node_id,
        address=record.address,
        draining=record.draining or (report is not None and report.report.draining),
        weight=effective_weight(record.weight),
    )
    if record.static:
        load.healthy = True
        return admin_pb2.NodeStatus(record=record, load=load, down=False, last_report_age_ms=0)
    down = is_down(report, now_ms, liveness, in_grace=in_grace)
    age = -1
    if report is not None:
        r = report.report
        age = max(0, now_ms - report.received_at_unix_ms)
        load.running, load.waiting = r.running, r.waiting
        load.load = r.running + r.waiting
        load.kv_usage = r.kv_usage
        if r.HasField("prefix_hit_rate"):
            load.prefix_hit_rate = r.prefix_hit_rate
        load.healthy = r.healthy and not r.stale and not down
        load.age_ms = age
    return admin_pb2.NodeStatus(record=record, load=load, down=down, last_report_age_ms=age)


async def list_statuses(
    stores: Stores, pool: str, now_ms: int, liveness: Liveness, *, as_routed: bool = False
) -> list[admin_pb2.NodeStatus]:
    """Every node's status from its reports; ``as_routed``: as routers treat it (docstring)."""
    pool = validate_pool(pool)
    records = await stores.cluster.get_nodes(pool)
    reports = await stores.cluster.get_reports(pool)
    statuses = [node_status(r, reports.get(r.node_id), now_ms, liveness) for r in records]
    if as_routed and any(s.down for s in statuses):
        snapshot = await stores.cluster.get_load(pool)
        if snapshot is not None:
            mark_leader_grace(statuses, reports, snapshot, liveness)
    return statuses


def mark_leader_grace(
    statuses: list[admin_pb2.NodeStatus],
    reports: dict[str, ReportRecord],
    snapshot: cluster_pb2.LoadSnapshot,
    liveness: Liveness,
) -> None:
    """Show nodes the published snapshot keeps up under the leader's grace as routers do."""
    published = {n.node_id: n for n in snapshot.nodes}
    for status in statuses:
        record = status.record
        report = reports.get(record.node_id)
        node = published.get(record.node_id)
        if not status.down or record.static or node is None or not node.healthy:
            continue
        if report is None or report.report.leaving:
            continue  # down for a reason the grace does not cover
        timeout = liveness.timeout_ms(report.report.report_interval_ms)
        if node.age_ms <= timeout:
            continue  # published before it went silent: not the grace, just a newer state
        status.down = False
        status.load.healthy = True
        status.reason = (
            f"leader grace: no report for {status.last_report_age_ms / 1000:.1f} s (timeout "
            f"{timeout / 1000:g} s), kept up by the leader while agents reconnect to it"
        )


async def _audit(stores: Stores, pool: str, actor: str, action: str, detail: str, now: int) -> None:
    event = cluster_pb2.AuditEvent(at_unix_ms=now, actor=actor, action=action, pool=pool)
    event.detail = detail
    await stores.plans.append_audit(event)


async def add_static_node(
    stores: Stores,
    *,
    pool: str,
    node_id: str,
    address: str,
    weight: float,
    actor: str,
    now_ms: int,
    liveness: Liveness,
    replace: bool = False,
) -> cluster_pb2.NodeRecord:
    """Register a static destination; refused while a live agent owns the id, and for an id
    already registered as static unless ``replace`` (a typo must not silently move a node). A
    departed agent's id may be taken over."""
    pool = validate_pool(pool)
    validate_node_id(node_id)
    validate_address(address)
    validate_weight(weight)
    report = await stores.cluster.get_report(pool, node_id)
    if not is_down(report, now_ms, liveness):
        assert report is not None
        raise NodeIdTakenError(
            f"node {node_id} in pool {pool} is managed by a live agent (reporting from "
            f"{report.report.address}); pick another id or stop that agent first"
        )
    existing = await stores.cluster.get_node(pool, node_id)
    if existing is not None and existing.static and not replace:
        raise NodeIdTakenError(
            f"node {node_id} is already registered in pool {pool} (static, address "
            f"{existing.address}, weight {existing.weight:g}); pass --replace to change it"
        )
    record = cluster_pb2.NodeRecord(
        node_id=node_id,
        pool=pool,
        address=address,
        static=True,
        draining=existing.draining if existing else False,
        weight=weight,
        registered_at_unix_ms=now_ms,
    )
    await stores.cluster.remove_report(pool, node_id)
    await stores.cluster.put_node(record)
    await stores.plans.add_pool(pool)
    await _audit(stores, pool, actor, "node_add", f"{node_id} {address} weight={weight:g}", now_ms)
    return record


async def remove_node(
    stores: Stores,
    *,
    pool: str,
    node_id: str,
    actor: str,
    now_ms: int,
    liveness: Liveness | None = None,
) -> bool:
    """Forget a node. Refused (with ``liveness``) while a live agent reports for it: the agent
    would re-register it on its next report, so the removal would not stick."""
    pool = validate_pool(pool)
    validate_node_id(node_id)
    if liveness is not None:
        report = await stores.cluster.get_report(pool, node_id)
        record = await stores.cluster.get_node(pool, node_id)
        if record is not None and not record.static and not is_down(report, now_ms, liveness):
            assert report is not None
            raise PreconditionError(
                f"node {node_id} in pool {pool} is managed by a live agent (reporting from "
                f"{report.report.address}); removing it would not stick, the agent re-registers "
                f"it: stop that agent (it leaves the pool), or `cachectl nodes drain {node_id}` "
                "to stop routing to it"
            )
    removed = await stores.cluster.remove_node(pool, node_id)
    await stores.cluster.remove_report(pool, node_id)
    if removed:
        await _audit(stores, pool, actor, "node_remove", node_id, now_ms)
    return removed


async def set_draining(
    stores: Stores,
    *,
    pool: str,
    node_id: str,
    draining: bool,
    actor: str,
    now_ms: int,
    liveness: Liveness,
) -> admin_pb2.NodeStatus:
    """Drain or undrain a node (an agent hears of it on its next report)."""
    pool = validate_pool(pool)
    validate_node_id(node_id)
    record = await stores.cluster.get_node(pool, node_id)
    if record is None:
        raise NodeNotFoundError(f"node {node_id} is not registered in pool {pool}")
    if record.draining != draining:
        record.draining = draining
        await stores.cluster.put_node(record)
        await _audit(stores, pool, actor, "drain" if draining else "undrain", node_id, now_ms)
    report = await stores.cluster.get_report(pool, node_id)
    return node_status(record, report, now_ms, liveness)
