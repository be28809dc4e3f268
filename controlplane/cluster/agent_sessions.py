"""One agent stream's life: join, heartbeats, leave (the logic behind AgentService.Connect).

Whichever control-plane instance holds an agent's stream writes the agent's latest report and its
receive time to Redis (``ClusterStore.put_report``); the leader composes load snapshots from all of
them, so agents may connect to any instance.

A stream *owns* its node from its join on: a join claims the node (taking it over from an earlier
stream, e.g. the same agent reconnecting), and heartbeats and the leave write only while the
stream still owns it. A join is refused while another live stream reports the same node id from a
different address (two agents configured with one id).
"""

from __future__ import annotations

from cacheroute.v1 import agent_pb2, cluster_pb2
from cacheroute_state import Stores
from cacheroute_state.interfaces import ReportRecord
from controlplane.cluster.nodes import Liveness, is_down, validate_address, validate_weight
from controlplane.core.report_checks import (
    NO_RULES,
    ReportRules,
    check_identity,
    check_report,
    trimmed,
)
from controlplane.errors import InvalidArgumentError, NodeIdTakenError, StreamSupersededError
from dataplane.core.names import validate_node_id, validate_pool


class AgentSession:
    """The node a stream joined, and what the agent was last told."""

    def __init__(
        self,
        stores: Stores,
        *,
        pool: str,
        node_id: str,
        stream_id: str,
        report_interval_ms: int,
        draining: bool,
        last_report: agent_pb2.NodeReport,
        rules: ReportRules = NO_RULES,
    ) -> None:
        self._stores = stores
        self._rules = rules
        self.pool = pool
        self.node_id = node_id
        self.stream_id = stream_id
        self.report_interval_ms = report_interval_ms
        self.draining = draining
        self.last_report = last_report
        self.left = False

    def directive(self, message: str) -> agent_pb2.AgentDirective:
        return agent_pb2.AgentDirective(
            report_interval_ms=self.report_interval_ms, draining=self.draining, message=message
        )

    def _check_identity(self, report: agent_pb2.NodeReport) -> None:
        if report.node_id and report.node_id != self.node_id:
            raise InvalidArgumentError(
                f"node_id changed from {self.node_id!r} to {report.node_id!r} within one "
                "stream; open a new stream per node"
            )
        if report.pool and validate_pool(report.pool) != self.pool:
            raise InvalidArgumentError(
                f"pool changed from {self.pool!r} to {report.pool!r} within a stream"
            )

    async def heartbeat(
        self, report: agent_pb2.NodeReport, now_ms: int
    ) -> agent_pb2.AgentDirective | None:
        """Store a later report; returns a directive when the drain state changed."""
        self._check_identity(report)
        check_report(trimmed(report), self._rules)
        report.node_id, report.pool = self.node_id, self.pool
        if report.address and report.address != self.last_report.address:
            validate_address(report.address)
        else:
            report.address = self.last_report.address
        record = ReportRecord(report=report, received_at_unix_ms=now_ms, stream_id=self.stream_id)
        if not await self._stores.cluster.put_report(self.pool, record, claim=False):
            raise StreamSupersededError(
                f"node {self.node_id} in pool {self.pool} was removed or taken over by a newer "
                "stream; reconnect to rejoin"
            )
        node = await self._stores.cluster.get_node(self.pool, self.node_id)
        if node is not None and node.address != report.address:
            node.address = report.address
            await self._stores.cluster.put_node(node)
        self.last_report = report
        draining = report.draining or (node is not None and node.draining)
        if draining != self.draining:
            self.draining = draining
            return self.directive("drained" if draining else "undrained")
        return None

    async def leave(self, now_ms: int) -> None:
        """Mark the node down now (the agent said goodbye or its stream ended)."""
        if self.left:
            return
        self.left = True
        last = self.last_report  # who left and its last loads: no error text, no histogram
        report = agent_pb2.NodeReport(
            node_id=last.node_id, pool=last.pool, address=last.address, model=last.model,
            engine_kind=last.engine_kind, dialect=last.dialect, seq=last.seq,
            sent_at_unix_ms=last.sent_at_unix_ms, scraped_at_unix_ms=last.scraped_at_unix_ms,
            running=last.running, waiting=last.waiting, kv_usage=last.kv_usage,
            weight=last.weight, leaving=True,
        )  # fmt: skip
        record = ReportRecord(report=report, received_at_unix_ms=now_ms, stream_id=self.stream_id)
        await self._stores.cluster.put_report(self.pool, record, claim=False)


async def join(
    stores: Stores,
    report: agent_pb2.NodeReport,
    *,
    stream_id: str,
    now_ms: int,
    liveness: Liveness,
    report_interval_ms: int,
    rules: ReportRules = NO_RULES,
    identity: str = "",
) -> AgentSession:
    """Validate the first report, claim the node and register it (NodeRecord, pool).

    ``identity`` is the authenticated agent name ("" without authentication)."""
    if not report.node_id:
        raise InvalidArgumentError("the first report must carry node_id")
    if not report.address:
        raise InvalidArgumentError("the first report must carry address (HOST:PORT of the engine)")
    pool = validate_pool(report.pool)
    node_id = validate_node_id(report.node_id)
    validate_address(report.address)
    validate_weight(report.weight)
    check_report(trimmed(report), rules)
    report.pool = pool
    existing = await stores.cluster.get_node(pool, node_id)
    if existing is not None and not existing.static:
        check_identity(node_id, existing.registered_by, identity)
    current = await stores.cluster.get_report(pool, node_id)
    if (
        current is not None
        and current.stream_id != stream_id
        and current.report.address != report.address
        and not is_down(current, now_ms, liveness)
    ):
        raise NodeIdTakenError(
            f"node id {node_id} in pool {pool} is taken by another agent (reporting from "
            f"{current.report.address})"
        )
    record = cluster_pb2.NodeRecord(
        node_id=node_id,
        pool=pool,
        address=report.address,
        static=False,
        draining=existing.draining if existing else False,
        weight=report.weight,
        engine_kind=report.engine_kind,
        dialect=report.dialect,
        registered_at_unix_ms=(
            existing.registered_at_unix_ms if existing and not existing.static else now_ms
        ),
        registered_by=identity,
    )
    claimed = ReportRecord(report=report, received_at_unix_ms=now_ms, stream_id=stream_id)
    await stores.cluster.put_report(pool, claimed, claim=True)
    await stores.cluster.put_node(record)
    await stores.plans.add_pool(pool)
    return AgentSession(
        stores,
        pool=pool,
        node_id=node_id,
        stream_id=stream_id,
        report_interval_ms=report_interval_ms,
        draining=record.draining or report.draining,
        last_report=report,
        rules=rules,
    )
