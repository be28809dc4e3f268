"""TableDelta <-> the ``cacheroute.v1.TableDelta`` protobuf (its carrier is a RoutingTable)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from google.protobuf.message import DecodeError

from cacheroute.v1 import table_pb2
from dataplane.core.protobuf_fields import Buffer
from dataplane.core.table import KeyLabel, RoutingTable, TableError
from dataplane.core.table_codec import params_from_proto, stats_from_proto, table_to_proto
from dataplane.core.table_delta import DELTA_FORMAT, TableDelta


def encode_delta(delta: TableDelta) -> bytes:
    return table_pb2.TableDelta(
        format=DELTA_FORMAT,
        base_version=delta.base_version,
        changed=table_to_proto(delta.target),
        removed_key_hashes=delta.removed.astype("<u8", copy=False).tobytes(),
    ).SerializeToString()


def _array(data: bytes, dtype: str, name: str) -> npt.NDArray[np.generic]:
    width = np.dtype(dtype).itemsize
    if len(data) % width:
        raise TableError(f"delta {name} is {len(data)} bytes, not a multiple of {width}")
    return np.frombuffer(data, dtype=dtype).astype(dtype[1:])  # a native, aligned copy


def decode_delta(data: Buffer) -> TableDelta:
    """Parse a serialized delta; :class:`TableError` when it is not one this router reads."""
    try:
        msg = table_pb2.TableDelta.FromString(bytes(data))
    except DecodeError as exc:
        raise TableError(f"not a TableDelta protobuf: {exc}") from exc
    if msg.format != DELTA_FORMAT:
        raise TableError(f"delta format {msg.format} is not supported (this router reads 1)")
    head = msg.changed
    carrier = RoutingTable(
        pool=head.pool, version=head.version, content_hash=head.content_hash,
        created_at_unix_ms=head.created_at_unix_ms, node_ids=tuple(head.node_ids),
        key_hashes=_array(head.key_hashes, "<u8", "key_hashes"),  # type: ignore[arg-type]
        set_offsets=_array(head.set_offsets, "<u4", "set_offsets"),  # type: ignore[arg-type]
        set_members=_array(head.set_members, "<u2", "set_members"),  # type: ignore[arg-type]
        params=params_from_proto(head.params), stats=stats_from_proto(head.stats),
        top_keys=tuple(KeyLabel(k.key_hash, k.key, k.rate) for k in head.top_keys),
    )  # fmt: skip
    removed = _array(msg.removed_key_hashes, "<u8", "removed_key_hashes")
    return TableDelta(msg.base_version, carrier, removed)  # type: ignore[arg-type]
