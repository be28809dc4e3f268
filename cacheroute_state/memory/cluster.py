"""ClusterStore, TelemetryStore and LeaseStore in memory (see :mod:`..redis_cluster_store`)."""

from __future__ import annotations

from collections.abc import Sequence

from cacheroute.v1 import cluster_pb2
from cacheroute_state import schema
from cacheroute_state.interfaces import (
    ClusterStore,
    Hint,
    HintKind,
    LeaseStore,
    ReportRecord,
    TelemetryStore,
)
from cacheroute_state.memory.state import MemoryState


class MemoryClusterStore(ClusterStore):
    def __init__(self, state: MemoryState) -> None:
        self._s = state

    def _hash(self, pool: str, part: str) -> dict[str, bytes]:
        self._s.check()
        return self._s.hashes[schema.pool_key(pool, part)]

    async def put_node(self, record: cluster_pb2.NodeRecord) -> None:
        self._hash(record.pool, "nodes")[record.node_id] = record.SerializeToString()

    async def remove_node(self, pool: str, node_id: str) -> bool:
        return self._hash(pool, "nodes").pop(node_id, None) is not None

    async def get_nodes(self, pool: str) -> list[cluster_pb2.NodeRecord]:
        records = [cluster_pb2.NodeRecord.FromString(v) for v in self._hash(pool, "nodes").values()]
        return sorted(records, key=lambda r: r.node_id)

    async def get_node(self, pool: str, node_id: str) -> cluster_pb2.NodeRecord | None:
        data = self._hash(pool, "nodes").get(node_id)
        return None if data is None else cluster_pb2.NodeRecord.FromString(data)

    async def put_report(self, pool: str, record: ReportRecord, *, claim: bool) -> bool:
        owners = self._hash(pool, "report_streams")
        node_id = record.report.node_id
        if not claim and owners.get(node_id) != record.stream_id.encode():
            return False
        # Stored as a copy, so a caller mutating its message later cannot change the record.
        report = type(record.report).FromString(record.report.SerializeToString())
        stored = ReportRecord(report, record.received_at_unix_ms, record.stream_id)
        self._s.reports[(pool, node_id)] = stored
        owners[node_id] = record.stream_id.encode()
        return True

    async def get_report(self, pool: str, node_id: str) -> ReportRecord | None:
        owner = self._hash(pool, "report_streams").get(node_id, b"").decode()
        found = self._s.reports.get((pool, node_id))
        return None if found is None else _owned_by(found, owner)

    async def get_reports(self, pool: str) -> dict[str, ReportRecord]:
        owners = self._hash(pool, "report_streams")
        return {
            node: _owned_by(record, owners.get(node, b"").decode())
            for (p, node), record in self._s.reports.items()
            if p == pool
        }

    async def remove_report(self, pool: str, node_id: str) -> None:
        self._hash(pool, "report_streams").pop(node_id, None)
        self._s.reports.pop((pool, node_id), None)

    async def expire_report(self, pool: str, node_id: str, received_at_unix_ms: int) -> bool:
        self._s.check()
        found = self._s.reports.get((pool, node_id))
        if found is None or found.received_at_unix_ms != received_at_unix_ms:
            return False
        await self.remove_report(pool, node_id)
        return True

    async def publish_load(self, snapshot: cluster_pb2.LoadSnapshot) -> None:
        self._s.check()
        data = snapshot.SerializeToString()
        self._s.strings[schema.pool_key(snapshot.pool, "load")] = data
        self._s.publish(Hint(HintKind.LOAD, snapshot.pool, data))

    async def get_load(self, pool: str) -> cluster_pb2.LoadSnapshot | None:
        self._s.check()
        data = self._s.strings.get(schema.pool_key(pool, "load"))
        return None if data is None else cluster_pb2.LoadSnapshot.FromString(data)

    async def put_ack(self, ack: cluster_pb2.RouterAck) -> None:
        self._hash(ack.pool, "acks")[ack.router_id] = ack.SerializeToString()

    async def get_acks(self, pool: str) -> list[cluster_pb2.RouterAck]:
        acks = [cluster_pb2.RouterAck.FromString(v) for v in self._hash(pool, "acks").values()]
        return sorted(acks, key=lambda a: a.router_id)


def _owned_by(record: ReportRecord, owner: str) -> ReportRecord:
    """A fresh copy of the stored record under its current owner (callers may mutate it)."""
    report = type(record.report).FromString(record.report.SerializeToString())
    return ReportRecord(report, record.received_at_unix_ms, owner)


class MemoryTelemetryStore(TelemetryStore):
    def __init__(self, state: MemoryState) -> None:
        self._s = state

    async def add_traffic(self, report: cluster_pb2.TrafficReport) -> None:
        s = self._s
        s.check()
        stream = s.stream(schema.pool_key(report.pool, "traffic"), schema.TRAFFIC_MAXLEN)
        stream.append(report.SerializeToString(), s.now_ms())

    async def read_traffic(
        self, pool: str, after_id: str, count: int = 1000
    ) -> tuple[str, list[cluster_pb2.TrafficReport]]:
        self._s.check()
        stream = self._s.streams.get(schema.pool_key(pool, "traffic"))
        entries = stream.after(after_id, count) if stream is not None else []
        reports = [cluster_pb2.TrafficReport.FromString(d) for _, d in entries]
        return (entries[-1][0] if entries else after_id), reports

    async def add_samples(self, samples: Sequence[cluster_pb2.SampledRequest]) -> None:
        s = self._s
        s.check()
        for sample in samples:
            stream = s.stream(schema.pool_key(sample.pool, "trace"), schema.TRACE_MAXLEN)
            stream.append(sample.SerializeToString(), s.now_ms())

    async def read_samples(self, pool: str, count: int) -> list[cluster_pb2.SampledRequest]:
        self._s.check()
        stream = self._s.streams.get(schema.pool_key(pool, "trace"))
        newest = stream.newest(count) if stream is not None else []
        return [cluster_pb2.SampledRequest.FromString(d) for d in newest]

    async def save_rates(self, pool: str, blob: bytes) -> None:
        self._s.check()
        self._s.strings[schema.pool_key(pool, "rates")] = bytes(blob)

    async def load_rates(self, pool: str) -> bytes | None:
        self._s.check()
        return self._s.strings.get(schema.pool_key(pool, "rates"))

    async def add_fleet_window(self, window: cluster_pb2.FleetWindow, keep: int) -> None:
        log = self._fleet_log(window.pool)
        log.windows.append(window)
        del log.windows[: max(0, len(log.windows) - max(1, keep))]
        self._s.strings[schema.pool_key(window.pool, "fleet_windows")] = log.SerializeToString()

    async def read_fleet_windows(self, pool: str) -> list[cluster_pb2.FleetWindow]:
        return list(self._fleet_log(pool).windows)

    def _fleet_log(self, pool: str) -> cluster_pb2.FleetWindowLog:
        self._s.check()
        data = self._s.strings.get(schema.pool_key(pool, "fleet_windows"), b"")
        return cluster_pb2.FleetWindowLog.FromString(data)

    async def put_fleet_profile(self, profile: cluster_pb2.FleetProfile) -> None:
        self._s.check()
        key = schema.pool_key(profile.pool, "fleet_profile")
        self._s.strings[key] = profile.SerializeToString()

    async def get_fleet_profile(self, pool: str) -> cluster_pb2.FleetProfile | None:
        self._s.check()
        data = self._s.strings.get(schema.pool_key(pool, "fleet_profile"))
        return None if data is None else cluster_pb2.FleetProfile.FromString(data)


class MemoryLeaseStore(LeaseStore):
    """Leases expire by the state's clock, as Redis TTLs expire by Redis' own."""

    def __init__(self, state: MemoryState) -> None:
        self._s = state

    def _current(self, name: str) -> str | None:
        s = self._s
        s.check()
        held = s.leases.get(name)
        if held is None or held[1] <= s.clock():
            s.leases.pop(name, None)
            return None
        return held[0]

    async def acquire_or_renew(self, name: str, holder: str, ttl_ms: int) -> bool:
        current = self._current(name)
        if current is not None and current != holder:
            return False
        self._s.leases[name] = (holder, self._s.clock() + ttl_ms / 1000.0)
        return True

    async def release(self, name: str, holder: str) -> None:
        if self._current(name) == holder:
            del self._s.leases[name]

    async def holder(self, name: str) -> str | None:
        return self._current(name)
