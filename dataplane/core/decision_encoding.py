"""RouteDecision wire bytes for the hot path, without building a message per decision.

In a loaded router, building a ``RouteDecision`` (nine field writes into a new message) and
serializing it took ~5 µs of the serving thread per request — a quarter of the router's own work
on top of gRPC. Most of a decision repeats: node id, address, reason, version, generation and
policy (and the session token, a function of pool, node and generation) are the same for every
decision to one node under one table. So :class:`DecisionEncoder` serializes those seven fields
once with protobuf (``RouteDecision(...).SerializeToString()``) and
caches the bytes; per decision it appends only the three per-request fields (the key's two are
cached per key too, since the hash is a function of the key; both caches are bounded):

* ``key_hash`` (field 6, fixed64): tag ``0x31`` and 8 little-endian bytes;
* ``key`` (field 7, string) and ``request_id`` (field 9, string): tag, varint length, UTF-8.

Protobuf parsers accept fields in any order and concatenated encodings merge, so the result parses
to exactly the message protobuf would have built (tests compare them). Empty strings and a zero
hash are omitted, as proto3 does. A ``RouteBatchResponse`` is its decisions, each as field 1.
"""

from __future__ import annotations

from collections.abc import Iterable

from cacheroute.v1 import routing_pb2
from dataplane.core.policies import Reason

_KEY_HASH_TAG = b"\x31"  # field 6, wire type 1 (64-bit)
_KEY_TAG = b"\x3a"  # field 7, wire type 2 (length-delimited)
_REQUEST_ID_TAG = b"\x4a"  # field 9, wire type 2
_DECISIONS_TAG = b"\x0a"  # RouteBatchResponse.decisions: field 1, wire type 2
# One prefix per (node, reason) under the current table: 10,000 destinations and their common
# reasons (warm, tail, fallback) fit; at 4,096 such a pool cleared the cache every few hundred
# decisions and rebuilt prefixes (~3 µs each), 3x the encoding cost of a 30-node pool.
PREFIX_LIMIT = 65_536
KEY_LIMIT = 65_536

REASONS: dict[Reason, int] = {
    reason: routing_pb2.RouteReason.Value(f"ROUTE_REASON_{reason.name}")
    if f"ROUTE_REASON_{reason.name}" in routing_pb2.RouteReason.keys()  # noqa: SIM118
    else routing_pb2.ROUTE_REASON_UNSPECIFIED
    for reason in Reason
}


def varint(value: int) -> bytes:
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def string_field(tag: bytes, text: str) -> bytes:
    if not text:
        return b""
    data = text.encode("utf-8")
    return tag + varint(len(data)) + data


class DecisionEncoder:
    """Encodes decisions as ``RouteDecision`` bytes (module docstring); one per servicer."""

    __slots__ = ("_by_object", "_keys", "_prefixes", "policy")

    def __init__(self, policy: str) -> None:
        self.policy = policy
        self._prefixes: dict[tuple[str, str, Reason, str, int, str], bytes] = {}
        self._keys: dict[str, bytes] = {}
        self._by_object: dict[int, tuple[object, bytes]] = {}

    def encode(
        self,
        node_id: str,
        address: str,
        reason: Reason,
        version: str,
        generation: int,
        key_hash: int,
        key: str,
        request_id: str,
        session_token: str = "",
    ) -> bytes:
        shared = (node_id, address, reason, version, generation, session_token)
        prefix = self._prefixes.get(shared)
        if prefix is None:
            prefix = self._prefix(shared)
        keyed = self._keys.get(key)  # the hash is a function of the key: cache both fields
        if keyed is None:
            keyed = self._keyed(key, key_hash)
        if request_id:
            return prefix + keyed + string_field(_REQUEST_ID_TAG, request_id)
        return prefix + keyed

    def encode_outcome(
        self,
        outcome: tuple[str, str, Reason, str, int, str],
        key_hash: int,
        key: str,
        request_id: str,
    ) -> bytes:
        """:meth:`encode` of an outcome ``(node_id, address, reason, version, generation,
        session_token)`` as one tuple (the router's ``RouteOutcome``): the tuple is the cache key
        as it comes."""
        # The router hands out one outcome object per (node, reason) under a table, so the
        # object's identity finds its prefix without hashing its strings (at 10,000 destinations
        # those hash reads were cache misses); the entry holds the object, so its id is not reused.
        entry = self._by_object.get(id(outcome))
        if entry is not None and entry[0] is outcome:
            prefix = entry[1]
        else:
            found = self._prefixes.get(outcome)
            prefix = self._prefix(outcome) if found is None else found
            if len(self._by_object) >= PREFIX_LIMIT:
                self._by_object.clear()
            self._by_object[id(outcome)] = (outcome, prefix)
        keyed = self._keys.get(key)
        if keyed is None:
            keyed = self._keyed(key, key_hash)
        if request_id:
            return prefix + keyed + string_field(_REQUEST_ID_TAG, request_id)
        return prefix + keyed

    def _keyed(self, key: str, key_hash: int) -> bytes:
        keyed = string_field(_KEY_TAG, key)
        if key_hash:
            keyed += _KEY_HASH_TAG + key_hash.to_bytes(8, "little")
        if len(self._keys) >= KEY_LIMIT:
            self._keys.clear()
        self._keys[key] = keyed
        return keyed

    def _prefix(self, shared: tuple[str, str, Reason, str, int, str]) -> bytes:
        node_id, address, reason, version, generation, session_token = shared
        shared = (node_id, address, reason, version, generation, session_token)  # a plain tuple
        prefix = routing_pb2.RouteDecision(
            node_id=node_id,
            address=address,
            reason=REASONS[reason],  # type: ignore[arg-type]
            version=version,
            generation=generation,
            policy=self.policy,
            session_token=session_token,
        ).SerializeToString()
        if len(self._prefixes) >= PREFIX_LIMIT:  # old tables' and nodes' entries go too
            self._prefixes.clear()
        self._prefixes[shared] = prefix
        return prefix


def batch_response(decisions: Iterable[bytes]) -> bytes:
    """``RouteBatchResponse`` bytes from encoded decisions, in order."""
    parts: list[bytes] = []
    append = parts.append
    for decision in decisions:
        append(_DECISIONS_TAG)
        append(varint(len(decision)))
        append(decision)
    return b"".join(parts)
