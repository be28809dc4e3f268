"""Decode a serialized ``RoutingTable`` without holding the GIL for the big arrays.

:func:`dataplane.table_codec.decode_table` is the reference decoder. For a 1M-key table (~14 MB)
it spends several milliseconds inside protobuf's C parser and field accessors copying the three
array fields, holding the GIL all along, so a router decoding in a worker thread still stalls its
serving thread that long. This decoder gives the same result with the GIL released for the bulk:

1. Walk the top-level wire format (a few dozen fields: the arrays are single fields) and note
   where ``key_hashes`` (7), ``set_offsets`` (8) and ``set_members`` (9) lie in the buffer.
2. Parse everything else (pool, version, hash, node ids, params, stats, top keys: kilobytes) with
   protobuf, as the reference decoder does.
3. Wrap the arrays with ``numpy.frombuffer`` (no copy) and hand them to
   :func:`dataplane.table.make_table`, which validates the layout and re-derives the content hash
   (numpy's loops, a copy out of a writable buffer, and BLAKE2b all run without the GIL).

The checks after parsing mirror ``table_from_proto`` (format, pool, version vs content); the tests
hold both decoders to the same results and the same rejections.
"""

from __future__ import annotations

import sys

import numpy as np
import numpy.typing as npt
from google.protobuf.message import DecodeError

from cacheroute.v1 import table_pb2
from dataplane.table import TABLE_FORMAT, KeyLabel, RoutingTable, TableError, make_table
from dataplane.table_codec import params_from_proto, stats_from_proto

Buffer = bytes | bytearray | memoryview
_ARRAY_FIELDS = {7: ("key_hashes", "<u8"), 8: ("set_offsets", "<u4"), 9: ("set_members", "<u2")}
_NATIVE_LITTLE = sys.byteorder == "little"
_LENGTH_DELIMITED = 2


def _varint(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise TableError("not a RoutingTable protobuf: truncated or overlong varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def _skip(buf: memoryview, pos: int, end: int, wire_type: int) -> int:
    """Position after a field's payload (``pos`` is just past its tag)."""
    if wire_type == 0:
        return _varint(buf, pos, end)[1]
    if wire_type == 1:
        pos += 8
    elif wire_type == _LENGTH_DELIMITED:
        length, pos = _varint(buf, pos, end)
        pos += length
    elif wire_type == 5:
        pos += 4
    else:
        raise TableError(f"not a RoutingTable protobuf: wire type {wire_type} at byte {pos}")
    if pos > end:
        raise TableError("not a RoutingTable protobuf: a field runs past the end")
    return pos


def split_fields(data: Buffer) -> tuple[bytes, dict[int, tuple[int, int]]]:
    """(the small fields re-serialized, {array field: (offset, length)}) of a RoutingTable."""
    buf = memoryview(data)
    end = len(buf)
    rest: list[bytes] = []
    arrays: dict[int, tuple[int, int]] = {}
    pos = 0
    while pos < end:
        start = pos
        tag, pos = _varint(buf, pos, end)
        field, wire_type = tag >> 3, tag & 7
        if field in _ARRAY_FIELDS and wire_type == _LENGTH_DELIMITED:
            length, body = _varint(buf, pos, end)
            pos = body + length
            if pos > end:
                raise TableError("not a RoutingTable protobuf: a field runs past the end")
            arrays[field] = (body, length)  # proto3: the last occurrence wins
            continue
        pos = _skip(buf, pos, end, wire_type)
        rest.append(bytes(buf[start:pos]))
    return b"".join(rest), arrays


def _array(data: Buffer, span: tuple[int, int] | None, field: int) -> npt.NDArray[np.generic]:
    name, dtype = _ARRAY_FIELDS[field]
    offset, length = span or (0, 0)
    width = np.dtype(dtype).itemsize
    if length % width:
        raise TableError(f"{name} is {length} bytes, not a multiple of {width}")
    array = np.frombuffer(data, dtype=dtype, count=length // width, offset=offset)
    return array if _NATIVE_LITTLE else array.astype(array.dtype.newbyteorder("="))


def decode_table_buffer(data: Buffer) -> RoutingTable:
    """Parse, validate and wrap a serialized ``RoutingTable``; raises :class:`TableError`."""
    small, arrays = split_fields(data)
    msg = table_pb2.RoutingTable()
    try:
        msg.ParseFromString(small)
    except DecodeError as exc:
        raise TableError(f"not a RoutingTable protobuf: {exc}") from exc
    if msg.format != TABLE_FORMAT:
        raise TableError(f"table format {msg.format} is not supported (this router reads 1)")
    if not msg.pool:
        raise TableError("table has no pool")
    table = make_table(
        pool=msg.pool,
        node_ids=list(msg.node_ids),
        key_hashes=_array(data, arrays.get(7), 7),  # type: ignore[arg-type]
        set_offsets=_array(data, arrays.get(8), 8),  # type: ignore[arg-type]
        set_members=_array(data, arrays.get(9), 9),  # type: ignore[arg-type]
        params=params_from_proto(msg.params),
        created_at_unix_ms=msg.created_at_unix_ms,
        stats=stats_from_proto(msg.stats),
        top_keys=[KeyLabel(k.key_hash, k.key, k.rate) for k in msg.top_keys],
        expected_content_hash=msg.content_hash,
    )
    if table.version != msg.version:
        raise TableError(f"version {msg.version!r} does not match content ({table.version!r})")
    return table
