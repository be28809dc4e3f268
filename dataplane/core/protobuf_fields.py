"""Just enough of the protobuf wire format to find big ``bytes`` fields without copying them.

protobuf's parser copies every bytes field and holds the GIL while it does; for a 1M-key routing
table that is milliseconds of a router's serving thread. Walking the top-level fields (a few
dozen) and leaving the chosen ones in place lets numpy wrap them where they lie.
"""

from __future__ import annotations

from collections.abc import Collection

Buffer = bytes | bytearray | memoryview
_VARINT, _FIXED64, _LENGTH_DELIMITED, _FIXED32 = 0, 1, 2, 5


class WireError(ValueError):
    """Bytes that are not a well-formed protobuf message."""


def _varint(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise WireError("truncated or overlong varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def _skip(buf: memoryview, pos: int, end: int, wire_type: int) -> int:
    """Position after a field's payload (``pos`` is just past its tag)."""
    if wire_type == _VARINT:
        return _varint(buf, pos, end)[1]
    if wire_type == _FIXED64:
        pos += 8
    elif wire_type == _LENGTH_DELIMITED:
        length, pos = _varint(buf, pos, end)
        pos += length
    elif wire_type == _FIXED32:
        pos += 4
    else:
        raise WireError(f"wire type {wire_type} at byte {pos}")
    if pos > end:
        raise WireError("a field runs past the end")
    return pos


def split_fields(
    data: Buffer, kept_in_place: Collection[int]
) -> tuple[bytes, dict[int, tuple[int, int]]]:
    """(every other field re-serialized, {field number: (offset, length)} of the kept ones).

    Only length-delimited occurrences are kept in place; as in proto3, the last one wins.
    """
    buf = memoryview(data)
    end = len(buf)
    rest: list[bytes] = []
    spans: dict[int, tuple[int, int]] = {}
    pos = 0
    while pos < end:
        start = pos
        tag, pos = _varint(buf, pos, end)
        field, wire_type = tag >> 3, tag & 7
        if field in kept_in_place and wire_type == _LENGTH_DELIMITED:
            length, body = _varint(buf, pos, end)
            pos = body + length
            if pos > end:
                raise WireError("a field runs past the end")
            spans[field] = (body, length)
            continue
        pos = _skip(buf, pos, end, wire_type)
        rest.append(bytes(buf[start:pos]))
    return b"".join(rest), spans
