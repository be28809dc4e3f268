"""The wire snapshot: a round trip keeps everything, and every kind of corruption is rejected."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from cacheroute.v1 import table_pb2
from dataplane.core.table import (
    KeyLabel,
    PlannerParams,
    PlanStats,
    RoutingTable,
    TableError,
    make_table,
)
from dataplane.core.table_codec import decode_table, encode_table, table_to_proto

u8 = np.dtype("<u8")
u4 = np.dtype("<u4")
u2 = np.dtype("<u2")


def sample_table() -> RoutingTable:
    return make_table(
        pool="pool-eu",
        node_ids=["node-a", "node-b", "node-c"],
        key_hashes=np.array([5, 2**63, 2**64 - 1], dtype=np.uint64),
        set_offsets=np.array([0, 1, 3, 4], dtype=np.uint32),
        set_members=np.array([2, 0, 1, 1], dtype=np.uint16),
        params=PlannerParams(
            q_cap=7.5, slots_per_node=4, placement="random", node_weights=(1.0, 2.0, 0.5), seed=9
        ),
        created_at_unix_ms=1_750_000_000_123,
        stats=PlanStats(
            num_keys=10,
            admitted_keys=3,
            total_rate=40.0,
            admitted_rate_share=0.75,
            slots_used=4,
            slots_total=12,
            max_replicas=2,
            planned_load=(10.0, 20.0, 10.0),
            planned_imbalance=1.5,
            build_ms=0.25,
            tail_rate=10.0,
        ),
        top_keys=[KeyLabel(2**63, "acme/support-bot", 20.0), KeyLabel(5, "tenant-42", 5.0)],
    )


def corrupted(mutate: Callable[[table_pb2.RoutingTable], None]) -> bytes:
    msg = table_to_proto(sample_table())
    mutate(msg)
    return msg.SerializeToString()


def test_round_trip_keeps_every_field() -> None:
    original = sample_table()
    decoded = decode_table(encode_table(original))
    for name in ("pool", "version", "content_hash", "created_at_unix_ms", "node_ids"):
        assert getattr(decoded, name) == getattr(original, name)
    for name in ("key_hashes", "set_offsets", "set_members"):
        assert np.array_equal(getattr(decoded, name), getattr(original, name))
        assert getattr(decoded, name).dtype == getattr(original, name).dtype
    assert decoded.params == original.params
    assert decoded.stats == original.stats
    assert decoded.top_keys == original.top_keys
    assert decoded.destination_ids(2**63) == ["node-a", "node-b"]


def test_round_trip_without_hash_verification_keeps_the_version() -> None:
    original = sample_table()
    decoded = decode_table(encode_table(original), verify_hash=False)
    assert (decoded.version, decoded.content_hash) == (original.version, original.content_hash)


def test_decoded_arrays_are_read_only() -> None:
    decoded = decode_table(encode_table(sample_table()))
    for array in (decoded.key_hashes, decoded.set_offsets, decoded.set_members):
        assert not array.flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            array[0] = 0


@pytest.mark.parametrize("pad", range(8))
def test_decoded_arrays_are_aligned_wherever_the_fields_land(pad: int) -> None:
    """A longer pool name shifts the bytes fields inside the snapshot; an unaligned view made every
    ``searchsorted`` copy the whole hash array (a warm-key lookup O(keys)), so decoding copies
    exactly those, and lookups still find every key."""
    original = sample_table()
    shifted = make_table(
        pool="p" + "x" * pad, node_ids=original.node_ids, key_hashes=original.key_hashes,
        set_offsets=original.set_offsets, set_members=original.set_members,
        params=original.params, created_at_unix_ms=original.created_at_unix_ms,
    )  # fmt: skip
    decoded = decode_table(encode_table(shifted))
    for array in (decoded.key_hashes, decoded.set_offsets, decoded.set_members):
        assert array.flags.aligned and not array.flags.writeable
    assert [decoded.find(int(k)) for k in original.key_hashes] == [0, 1, 2]


def test_encoding_is_little_endian_raw_bytes() -> None:
    msg = table_to_proto(sample_table())
    assert msg.key_hashes == np.array([5, 2**63, 2**64 - 1], dtype=u8).tobytes()
    assert msg.set_offsets == np.array([0, 1, 3, 4], dtype=u4).tobytes()
    assert msg.set_members == np.array([2, 0, 1, 1], dtype=u2).tobytes()
    assert msg.format == 1


def test_an_empty_table_round_trips() -> None:
    empty = make_table(
        pool="default",
        node_ids=["only"],
        key_hashes=np.zeros(0, np.uint64),
        set_offsets=np.zeros(1, np.uint32),
        set_members=np.zeros(0, np.uint16),
        params=PlannerParams(q_cap=1.0, slots_per_node=0),
        created_at_unix_ms=0,
    )
    decoded = decode_table(encode_table(empty))
    assert decoded.num_keys == 0
    assert decoded.content_hash == empty.content_hash


def set_field(name: str, value: object) -> Callable[[table_pb2.RoutingTable], None]:
    def mutate(msg: table_pb2.RoutingTable) -> None:
        setattr(msg, name, value)

    return mutate


def set_nodes(nodes: list[str]) -> Callable[[table_pb2.RoutingTable], None]:
    def mutate(msg: table_pb2.RoutingTable) -> None:
        del msg.node_ids[:]
        msg.node_ids.extend(nodes)

    return mutate


def tamper_member(msg: table_pb2.RoutingTable) -> None:
    """Move key 0 from node-c to node-b: a valid layout with different content."""
    members = bytearray(msg.set_members)
    members[0] = 1
    msg.set_members = bytes(members)


CORRUPT: list[tuple[str, Callable[[table_pb2.RoutingTable], None], str]] = [
    (
        "unsorted hashes",
        set_field("key_hashes", np.array([2**63, 5, 2**64 - 1], u8).tobytes()),
        "key hashes are not sorted and unique",
    ),
    (
        "duplicate hashes",
        set_field("key_hashes", np.array([5, 5, 2**64 - 1], u8).tobytes()),
        "key hashes are not sorted and unique",
    ),
    (
        "member index >= number of nodes",
        set_field("set_members", np.array([3, 0, 1, 1], u2).tobytes()),
        "a set member is 3; there are 3 nodes",
    ),
    (
        "set repeats a member",
        set_field("set_members", np.array([2, 1, 1, 1], u2).tobytes()),
        "a destination set repeats a member",
    ),
    (
        "empty set",
        set_field("set_offsets", np.array([0, 1, 1, 4], u4).tobytes()),
        "a destination set is empty",
    ),
    (
        "offsets length wrong",
        set_field("set_offsets", np.array([0, 1, 4], u4).tobytes()),
        "set_offsets has 3 entries; expected 4",
    ),
    (
        "offsets[0] not 0",
        set_field("set_offsets", np.array([1, 2, 3, 4], u4).tobytes()),
        r"set_offsets\[0\] is not 0",
    ),
    (
        "offsets end not member count",
        set_field("set_offsets", np.array([0, 1, 3, 3], u4).tobytes()),
        "set_offsets ends at 3 but there are 4 set members",
    ),
    (
        "key_hashes not a multiple of 8 bytes",
        set_field("key_hashes", b"\x00" * 23),
        "key_hashes is 23 bytes, not a multiple of 8",
    ),
    (
        "set_offsets not a multiple of 4 bytes",
        set_field("set_offsets", b"\x00" * 15),
        "set_offsets is 15 bytes, not a multiple of 4",
    ),
    (
        "set_members not a multiple of 2 bytes",
        set_field("set_members", b"\x00" * 7),
        "set_members is 7 bytes, not a multiple of 2",
    ),
    ("unknown format", set_field("format", 2), "table format 2 is not supported"),
    ("format missing", set_field("format", 0), "table format 0 is not supported"),
    ("no pool", set_field("pool", ""), "table has no pool"),
    ("no nodes", set_nodes([]), "table has no destinations"),
    ("duplicate node ids", set_nodes(["n", "m", "n"]), "destination ids are not unique"),
    ("unknown placement", lambda m: setattr(m.params, "placement", "greedy"), "placement"),
    (
        "version not matching content",
        set_field("version", "p0000000000000000"),
        "version 'p0000000000000000' does not match content",
    ),
    ("tampered bytes", tamper_member, "content hash mismatch"),
    (
        "content hash field altered",
        set_field("content_hash", "f" * 64),
        "content hash mismatch",
    ),
]


@pytest.mark.parametrize(
    ("mutate", "message"), [c[1:] for c in CORRUPT], ids=[c[0] for c in CORRUPT]
)
def test_decode_rejects_a_corrupt_snapshot_naming_the_rule(
    mutate: Callable[[table_pb2.RoutingTable], None], message: str
) -> None:
    with pytest.raises(TableError, match=message):
        decode_table(corrupted(mutate))


@pytest.mark.parametrize(
    "data", [b"\xff" * 16, b"not a table at all", b"\x08"], ids=["ff", "text", "truncated"]
)
def test_decode_rejects_garbage_bytes(data: bytes) -> None:
    with pytest.raises(TableError, match="not a RoutingTable protobuf"):
        decode_table(data)


def test_decode_rejects_empty_bytes_as_an_unknown_format() -> None:
    with pytest.raises(TableError, match="table format 0"):
        decode_table(b"")


def test_without_verification_the_version_must_still_match_the_stated_hash() -> None:
    data = corrupted(set_field("version", "p0000000000000000"))
    with pytest.raises(TableError, match="does not match content hash"):
        decode_table(data, verify_hash=False)


def test_without_verification_layout_rules_still_apply() -> None:
    data = corrupted(set_field("key_hashes", np.array([5, 5, 2**64 - 1], u8).tobytes()))
    with pytest.raises(TableError, match="not sorted and unique"):
        decode_table(data, verify_hash=False)


def test_without_verification_tampered_bytes_with_a_valid_layout_are_accepted() -> None:
    """The documented trade-off of ``verify_hash=False``: it trusts the content hash."""
    decoded = decode_table(corrupted(tamper_member), verify_hash=False)
    assert decoded.destination_ids(5) == ["node-b"]
    assert decoded.content_hash == sample_table().content_hash
