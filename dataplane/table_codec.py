"""RoutingTable <-> the ``cacheroute.v1.RoutingTable`` protobuf snapshot.

Decoding wraps the snapshot's bytes fields with ``numpy.frombuffer`` (no per-key objects), then
validates the layout and, unless told otherwise, re-derives the content hash so a table whose
bytes do not match its version is rejected.
"""

from __future__ import annotations

import sys

import numpy as np
import numpy.typing as npt
from google.protobuf.message import DecodeError

from cacheroute.v1 import table_pb2
from dataplane.table import (
    TABLE_FORMAT,
    KeyLabel,
    PlannerParams,
    PlanStats,
    RoutingTable,
    TableError,
    make_table,
    version_of,
)

_NATIVE_LITTLE = sys.byteorder == "little"


def params_to_proto(params: PlannerParams) -> table_pb2.PlannerParams:
    return table_pb2.PlannerParams(
        q_cap=params.q_cap,
        slots_per_node=params.slots_per_node,
        placement=params.placement,
        node_weights=list(params.node_weights),
        seed=params.seed,
    )


def params_from_proto(msg: table_pb2.PlannerParams) -> PlannerParams:
    return PlannerParams(
        q_cap=msg.q_cap,
        slots_per_node=msg.slots_per_node,
        placement=msg.placement or "lpt",
        node_weights=tuple(msg.node_weights),
        seed=msg.seed,
    )


def stats_to_proto(stats: PlanStats) -> table_pb2.PlanStats:
    return table_pb2.PlanStats(
        num_keys=stats.num_keys,
        admitted_keys=stats.admitted_keys,
        total_rate=stats.total_rate,
        admitted_rate_share=stats.admitted_rate_share,
        slots_used=stats.slots_used,
        slots_total=stats.slots_total,
        max_replicas=stats.max_replicas,
        planned_load=list(stats.planned_load),
        planned_imbalance=stats.planned_imbalance,
        build_ms=stats.build_ms,
        tail_rate=stats.tail_rate,
    )


def stats_from_proto(msg: table_pb2.PlanStats) -> PlanStats:
    return PlanStats(
        num_keys=msg.num_keys,
        admitted_keys=msg.admitted_keys,
        total_rate=msg.total_rate,
        admitted_rate_share=msg.admitted_rate_share,
        slots_used=msg.slots_used,
        slots_total=msg.slots_total,
        max_replicas=msg.max_replicas,
        planned_load=tuple(msg.planned_load),
        planned_imbalance=msg.planned_imbalance,
        build_ms=msg.build_ms,
        tail_rate=msg.tail_rate,
    )


def table_to_proto(table: RoutingTable) -> table_pb2.RoutingTable:
    return table_pb2.RoutingTable(
        format=TABLE_FORMAT,
        pool=table.pool,
        version=table.version,
        content_hash=table.content_hash,
        created_at_unix_ms=table.created_at_unix_ms,
        node_ids=list(table.node_ids),
        key_hashes=table.key_hashes.astype("<u8", copy=False).tobytes(),
        set_offsets=table.set_offsets.astype("<u4", copy=False).tobytes(),
        set_members=table.set_members.astype("<u2", copy=False).tobytes(),
        params=params_to_proto(table.params),
        stats=stats_to_proto(table.stats),
        top_keys=[
            table_pb2.KeyLabel(key_hash=k.key_hash, key=k.key, rate=k.rate) for k in table.top_keys
        ],
    )


def encode_table(table: RoutingTable) -> bytes:
    return table_to_proto(table).SerializeToString()


def _array(data: bytes, dtype: str, name: str) -> npt.NDArray[np.generic]:
    width = np.dtype(dtype).itemsize
    if len(data) % width:
        raise TableError(f"{name} is {len(data)} bytes, not a multiple of {width}")
    array = np.frombuffer(data, dtype=dtype)
    return array if _NATIVE_LITTLE else array.astype(array.dtype.newbyteorder("="))


def table_from_proto(msg: table_pb2.RoutingTable, *, verify_hash: bool = True) -> RoutingTable:
    """Validate a snapshot and wrap it; raises :class:`TableError` naming the broken rule."""
    if msg.format != TABLE_FORMAT:
        raise TableError(f"table format {msg.format} is not supported (this router reads 1)")
    if not msg.pool:
        raise TableError("table has no pool")
    if not verify_hash and msg.version != version_of(msg.content_hash):
        raise TableError(f"version {msg.version!r} does not match content hash")
    table = make_table(
        pool=msg.pool,
        node_ids=list(msg.node_ids),
        key_hashes=_array(msg.key_hashes, "<u8", "key_hashes"),  # type: ignore[arg-type]
        set_offsets=_array(msg.set_offsets, "<u4", "set_offsets"),  # type: ignore[arg-type]
        set_members=_array(msg.set_members, "<u2", "set_members"),  # type: ignore[arg-type]
        params=params_from_proto(msg.params),
        created_at_unix_ms=msg.created_at_unix_ms,
        stats=stats_from_proto(msg.stats),
        top_keys=[KeyLabel(k.key_hash, k.key, k.rate) for k in msg.top_keys],
        expected_content_hash=msg.content_hash if verify_hash else None,
        trusted_content_hash=None if verify_hash else msg.content_hash,
    )
    if table.version != msg.version:
        raise TableError(f"version {msg.version!r} does not match content ({table.version!r})")
    return table


def decode_table(data: bytes, *, verify_hash: bool = True) -> RoutingTable:
    """Parse, validate and wrap a serialized ``RoutingTable``."""
    msg = table_pb2.RoutingTable()
    try:
        msg.ParseFromString(data)
    except DecodeError as exc:
        raise TableError(f"not a RoutingTable protobuf: {exc}") from exc
    return table_from_proto(msg, verify_hash=verify_hash)
