"""The state interfaces of CacheRoute (Redis is the implementation; see ``redis_*.py``).

Exceptions (in :mod:`cacheroute_state.errors`, re-exported here)::

    StoreError
    ├── StoreUnavailableError   the backing store cannot be reached (callers degrade, then retry)
    ├── PlanNotFoundError       no such plan version in the pool
    ├── ConflictError           compare-and-set lost: the pointer moved (carries the current one)
    ├── CorruptRecordError      a stored record does not decode (names it; also a DecodeError)
    └── PlanMismatchError       a version id already stored with different content

Hints (pub/sub nudges) are in :mod:`cacheroute_state.hints`, re-exported here.

All methods are coroutines; records are the ``cacheroute.v1`` protobuf messages, so what is stored
is exactly what is on the wire.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

from cacheroute.v1 import agent_pb2, cluster_pb2, table_pb2
from cacheroute_state.errors import (
    ConflictError,
    CorruptRecordError,
    PlanInUseError,
    PlanMismatchError,
    PlanNotFoundError,
    StoreError,
    StoreUnavailableError,
)
from cacheroute_state.hints import Hint, HintKind, HintSource

__all__ = [
    "ClusterStore",
    "ConflictError",
    "CorruptRecordError",
    "Hint",
    "HintKind",
    "HintSource",
    "LeaseStore",
    "PlanInUseError",
    "PlanMismatchError",
    "PlanNotFoundError",
    "PlanStore",
    "ReportRecord",
    "StoreError",
    "StoreUnavailableError",
    "TelemetryStore",
]


class PlanStore(ABC):
    """Immutable plan versions, the active pointer per pool, and the audit trail."""

    @abstractmethod
    async def put_plan(
        self, table_bytes: bytes, meta: table_pb2.PlanMetadata
    ) -> tuple[table_pb2.PlanMetadata, bool]:
        """Store a plan once; returns (stored metadata, created). Same content again: no-op."""

    @abstractmethod
    async def get_table_bytes(self, pool: str, version: str) -> bytes | None: ...

    @abstractmethod
    async def put_delta(self, pool: str, base_version: str, version: str, data: bytes) -> None:
        """Store the serialized ``TableDelta`` from ``base_version`` to ``version`` (stored with,
        and deleted with, ``version``'s plan)."""

    @abstractmethod
    async def get_delta_bytes(self, pool: str, base_version: str, version: str) -> bytes | None:
        """The delta from ``base_version`` to ``version``; None when none was stored."""

    @abstractmethod
    async def get_metadata(self, pool: str, version: str) -> table_pb2.PlanMetadata | None: ...

    @abstractmethod
    async def update_metadata(self, meta: table_pb2.PlanMetadata) -> None:
        """Replace a stored plan's metadata (e.g. to record a shadow verdict)."""

    @abstractmethod
    async def list_plans(self, pool: str, limit: int) -> list[table_pb2.PlanMetadata]:
        """Newest first."""

    @abstractmethod
    async def get_active(self, pool: str) -> cluster_pb2.ActivePointer | None:
        """The pool's pointer (None: never moved); CorruptRecordError when it does not decode."""

    @abstractmethod
    async def move_active(
        self,
        pool: str,
        version: str,
        *,
        expected_generation: int,
        actor: str,
        action: str,
        detail: str = "",
    ) -> cluster_pb2.ActivePointer:
        """Compare-and-set the pointer to ``version`` with generation + 1, audit and hint.

        ``expected_generation`` is the generation the caller saw (0: no pointer yet; a damaged
        record's is :attr:`CorruptRecordError.generation`, and the move overwrites it). The
        audit's ``from_version`` is the version the move replaced, read in the same atomic step.
        Raises ConflictError (message: :func:`cacheroute_state.active_pointer.conflict_message`)
        when the pointer moved meanwhile, PlanNotFoundError for an unknown version.
        An empty ``version`` means no table (planned routing disabled); it is never listed among
        :meth:`previous_versions`.
        """

    @abstractmethod
    async def previous_versions(self, pool: str, limit: int = 10) -> list[str]:
        """Versions active before the current one, newest first."""

    @abstractmethod
    async def delete_plan(self, pool: str, version: str) -> bool:
        """Delete a stored version (table, metadata, listing) at once; False when it was not
        stored. :class:`PlanInUseError` for the active version or the rollback target (the
        newest previous version other than the active one), checked in the same atomic step
        as the delete, so a concurrent pointer move cannot race it."""

    @abstractmethod
    async def append_audit(self, event: cluster_pb2.AuditEvent) -> None: ...

    @abstractmethod
    async def read_audit(self, pool: str, count: int) -> list[cluster_pb2.AuditEvent]:
        """The newest ``count`` events, oldest first."""

    @abstractmethod
    async def pools(self) -> list[str]: ...

    @abstractmethod
    async def get_auto_mode(self, pool: str) -> cluster_pb2.AutoMode | None:
        """The pool's automatic-mode record (None: never set, i.e. off)."""

    @abstractmethod
    async def put_auto_mode(self, record: cluster_pb2.AutoMode) -> None:
        """Replace the pool's automatic-mode record (last writer wins)."""

    @abstractmethod
    async def get_guard(self, pool: str) -> cluster_pb2.GuardState | None:
        """The pool's live-guard state (None: nothing ever watched)."""

    @abstractmethod
    async def put_guard(self, state: cluster_pb2.GuardState) -> None:
        """Replace the pool's live-guard state."""

    @abstractmethod
    async def add_pool(self, pool: str) -> None: ...


@dataclass(frozen=True)
class ReportRecord:
    """An agent's latest ``NodeReport`` as one control-plane instance received it.

    ``received_at_unix_ms`` is that instance's clock (liveness is judged against it, never against
    the agent's); ``stream_id`` names the agent stream that owns the node, so a stream that was
    superseded (the agent reconnected elsewhere) or removed cannot overwrite a newer record.
    """

    report: agent_pb2.NodeReport
    received_at_unix_ms: int
    stream_id: str


class ClusterStore(ABC):
    """The node registry, the agents' latest reports, the published load snapshots and the
    routers' ACK/NACKs."""

    @abstractmethod
    async def put_node(self, record: cluster_pb2.NodeRecord) -> None: ...

    @abstractmethod
    async def remove_node(self, pool: str, node_id: str) -> bool: ...

    @abstractmethod
    async def get_nodes(self, pool: str) -> list[cluster_pb2.NodeRecord]: ...

    @abstractmethod
    async def get_node(self, pool: str, node_id: str) -> cluster_pb2.NodeRecord | None: ...

    @abstractmethod
    async def put_report(self, pool: str, record: ReportRecord, *, claim: bool) -> bool:
        """Store a node's latest report. ``claim``: the stream takes the node over (a join);
        otherwise the write happens only while ``record.stream_id`` still owns the node.
        Returns whether it was written."""

    @abstractmethod
    async def get_report(self, pool: str, node_id: str) -> ReportRecord | None: ...

    @abstractmethod
    async def get_reports(self, pool: str) -> dict[str, ReportRecord]:
        """Node id → latest report, for every node that ever reported (and was not removed)."""

    @abstractmethod
    async def remove_report(self, pool: str, node_id: str) -> None:
        """Forget a node's report and its owning stream (the stream's next write fails)."""

    @abstractmethod
    async def expire_report(self, pool: str, node_id: str, received_at_unix_ms: int) -> bool:
        """Forget a node's report as :meth:`remove_report` does, but only while the stored one is
        still the record received at ``received_at_unix_ms`` (the one the caller judged expired):
        a report written meanwhile wins, atomically. Returns whether it was removed."""

    @abstractmethod
    async def publish_load(self, snapshot: cluster_pb2.LoadSnapshot) -> None:
        """Store the latest snapshot and push it on the pool's load channel."""

    @abstractmethod
    async def get_load(self, pool: str) -> cluster_pb2.LoadSnapshot | None: ...

    @abstractmethod
    async def put_ack(self, ack: cluster_pb2.RouterAck) -> None: ...

    @abstractmethod
    async def get_acks(self, pool: str) -> list[cluster_pb2.RouterAck]: ...


class TelemetryStore(ABC):
    """Router traffic reports, the sampled request trace, the rate estimator's state and the
    fleet profile's inputs (Flat-LB windows) and output."""

    @abstractmethod
    async def add_traffic(self, report: cluster_pb2.TrafficReport) -> None: ...

    @abstractmethod
    async def read_traffic(
        self, pool: str, after_id: str, count: int = 1000
    ) -> tuple[str, list[cluster_pb2.TrafficReport]]:
        """Reports after stream id ``after_id`` ("0" for all); returns (last id read, reports)."""

    @abstractmethod
    async def add_samples(self, samples: Sequence[cluster_pb2.SampledRequest]) -> None: ...

    @abstractmethod
    async def read_samples(self, pool: str, count: int) -> list[cluster_pb2.SampledRequest]:
        """The newest ``count`` samples, oldest first."""

    @abstractmethod
    async def save_rates(self, pool: str, blob: bytes) -> None: ...

    @abstractmethod
    async def load_rates(self, pool: str) -> bytes | None: ...

    @abstractmethod
    async def add_fleet_window(self, window: cluster_pb2.FleetWindow, keep: int) -> None:
        """Append one Flat-LB window to its pool's log, keeping the newest ``keep`` (>= 1)."""

    @abstractmethod
    async def read_fleet_windows(self, pool: str) -> list[cluster_pb2.FleetWindow]:
        """The stored windows, oldest first."""

    @abstractmethod
    async def put_fleet_profile(self, profile: cluster_pb2.FleetProfile) -> None: ...

    @abstractmethod
    async def get_fleet_profile(self, pool: str) -> cluster_pb2.FleetProfile | None: ...


class LeaseStore(ABC):
    """A named lease: at most one holder at a time, lost unless renewed within its TTL."""

    @abstractmethod
    async def acquire_or_renew(self, name: str, holder: str, ttl_ms: int) -> bool:
        """True when ``holder`` holds the lease after the call."""

    @abstractmethod
    async def release(self, name: str, holder: str) -> None: ...

    @abstractmethod
    async def holder(self, name: str) -> str | None: ...
