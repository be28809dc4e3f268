"""vLLM's KV-cache event wire format, decoded tolerantly into plain tuples.

An engine publishes on ZMQ multipart ``[topic, seq, payload]``: ``seq`` 8 bytes big-endian,
``payload`` msgpack of ``EventBatch(ts, events, data_parallel_rank)`` whose events are
``BlockStored(block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium, ...)``,
``BlockRemoved(block_hashes, medium)`` and ``AllBlocksCleared()`` (vLLM's
``vllm/distributed/kv_events.py``; ``../shared/docs/CALIBRATION.md`` §3). Two encodings exist:
msgspec's ``array_like`` + ``tag`` (``["BlockStored", hashes, parent, ...]``, vLLM's own) and maps
with a ``"type"`` key (other publishers). Both decode here, with fields added at the end of an
array or unknown keys in a map ignored, so a newer engine does not break an older agent.

Why not msgspec Structs with ``type=``: a strict schema would reject a whole batch for one new
field. The payload is decoded to generic msgpack values (bounded by the frame-size check before
this module is called) and read by position or name. A block hash is an int (older vLLM, signed
or unsigned 64 bits) or bytes (newer vLLM's sha256 digests); both become one unsigned 64-bit id.
Only blocks in GPU memory count as resident: ``medium`` absent/None or ``"GPU"``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

SEQ_BYTES = 8
# The replay socket's end-of-replay marker: seq -1 as 8 signed big-endian bytes (vLLM's END_SEQ).
END_SEQ = (-1).to_bytes(SEQ_BYTES, "big", signed=True)
_U64 = (1 << 64) - 1
_RESIDENT_MEDIA = (None, "GPU", "gpu")


class WireError(ValueError):
    """A frame or payload that is not a KV event batch; ``reason`` is a metric label."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Stored:
    """Blocks now cached on the GPU (in prefix order)."""

    hashes: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Removed:
    """Blocks evicted from the GPU."""

    hashes: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Cleared:
    """Every block dropped (``AllBlocksCleared``: a cache reset or an engine restart)."""


Event = Stored | Removed | Cleared


@dataclass(frozen=True, slots=True)
class Batch:
    """One decoded ``EventBatch``; ``skipped`` counts events of unknown type or other media."""

    ts: float
    events: tuple[Event, ...]
    skipped: int = 0


def parse_seq(frame: bytes) -> int:
    """The sequence number frame: 8 bytes, big-endian, signed (the replay end marker is -1)."""
    if len(frame) != SEQ_BYTES:
        raise WireError("bad_seq", f"sequence frame has {len(frame)} bytes, expected 8")
    return int.from_bytes(frame, "big", signed=True)


def block_id(value: Any) -> int:
    """One unsigned 64-bit id for an int or bytes block hash (module docstring)."""
    if isinstance(value, bool):
        raise WireError("bad_hash", "a block hash is a boolean")
    if isinstance(value, int):
        return value & _U64
    if isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
        if not data:
            raise WireError("bad_hash", "an empty bytes block hash")
        return int.from_bytes(data[-8:], "big")
    raise WireError("bad_hash", f"a block hash of type {type(value).__name__}")


def _hashes(value: Any) -> tuple[int, ...]:
    if not isinstance(value, list):
        raise WireError("bad_event", "block_hashes is not an array")
    return tuple(block_id(v) for v in value)


def _fields(raw: Any) -> tuple[str, dict[str, Any]]:
    """(type tag, fields by name) of an array-like tagged or a map-encoded event."""
    if isinstance(raw, list) and raw and isinstance(raw[0], str):
        tag, values = raw[0], raw[1:]
        names = _POSITIONS.get(tag, ())
        return tag, dict(zip(names, values, strict=False))
    if isinstance(raw, dict):
        named = raw.get("type", raw.get("event_type"))
        if isinstance(named, str):
            return named, raw
    raise WireError("bad_event", "an event is neither a tagged array nor a map with 'type'")


_POSITIONS: dict[str, tuple[str, ...]] = {
    "BlockStored": (
        "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium",
    ),
    "BlockRemoved": ("block_hashes", "medium"),
    "AllBlocksCleared": (),
}  # fmt: skip


def decode_event(raw: Any) -> Event | None:
    """One event, or None for a type this agent does not read or blocks off the GPU."""
    tag, fields = _fields(raw)
    if tag == "AllBlocksCleared":
        return Cleared()
    if tag not in ("BlockStored", "BlockRemoved"):
        return None
    if fields.get("medium") not in _RESIDENT_MEDIA:
        return None
    if "block_hashes" not in fields:
        raise WireError("bad_event", f"{tag} without block_hashes")
    hashes = _hashes(fields["block_hashes"])
    return Stored(hashes) if tag == "BlockStored" else Removed(hashes)


def decode_batch(payload: bytes) -> Batch:
    """An ``EventBatch`` payload (array ``[ts, events, dp_rank]`` or map) → :class:`Batch`."""
    try:
        raw = msgspec.msgpack.decode(payload)
    except (msgspec.DecodeError, ValueError, RecursionError) as exc:
        raise WireError("garbage", f"not msgpack ({exc})") from None
    if isinstance(raw, list) and len(raw) >= 2:
        ts, events = raw[0], raw[1]
    elif isinstance(raw, dict) and "events" in raw:
        ts, events = raw.get("ts", 0.0), raw["events"]
    else:
        raise WireError("bad_batch", "payload is not an EventBatch (array or map)")
    if not isinstance(events, list):
        raise WireError("bad_batch", "EventBatch.events is not an array")
    if isinstance(ts, bool) or not isinstance(ts, (int, float)):
        raise WireError("bad_batch", "EventBatch.ts is not a number")
    decoded: list[Event] = []
    skipped = 0
    for item in events:
        event = decode_event(item)
        if event is None:
            skipped += 1
        else:
            decoded.append(event)
    return Batch(float(ts), tuple(decoded), skipped)
