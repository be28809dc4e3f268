"""decode_table (wire-walking, GIL-friendly) agrees with table_from_proto (a parsed message);
chunked fetch from Redis."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from google.protobuf.message import DecodeError

from cacheroute.v1 import table_pb2
from cacheroute_state import Stores
from cacheroute_state.redis_table_fetch import ChunkedTableFetcher
from dataplane.core.table import RoutingTable, TableError
from dataplane.core.table_codec import decode_table, encode_table, table_from_proto, table_to_proto
from dataplane.sync.table_watcher import decode_for
from tests.support.factories import metadata_for, small_plan


def same_table(a: RoutingTable, b: RoutingTable) -> bool:
    return (
        (a.pool, a.version, a.content_hash, a.created_at_unix_ms, a.node_ids)
        == (b.pool, b.version, b.content_hash, b.created_at_unix_ms, b.node_ids)
        and np.array_equal(a.key_hashes, b.key_hashes)
        and np.array_equal(a.set_offsets, b.set_offsets)
        and np.array_equal(a.set_members, b.set_members)
        and (a.params, a.stats, a.top_keys) == (b.params, b.stats, b.top_keys)
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_decodes_to_the_same_table_as_the_reference_decoder(seed: int) -> None:
    table = small_plan(nodes=6, keys=300, seed=seed)
    blob = encode_table(table)
    reference = table_from_proto(table_pb2.RoutingTable.FromString(blob))
    for data in (blob, bytearray(blob), memoryview(blob)):
        decoded = decode_table(data)
        assert same_table(decoded, reference)
        assert not decoded.key_hashes.flags.writeable


def test_a_table_decoded_from_a_mutable_buffer_does_not_alias_it() -> None:
    blob = bytearray(encode_table(small_plan()))
    decoded = decode_table(blob)
    before = decoded.key_hashes.copy()
    blob[:] = bytes(len(blob))
    assert np.array_equal(decoded.key_hashes, before)


def mutate(fn: Callable[[table_pb2.RoutingTable], None]) -> bytes:
    msg = table_to_proto(small_plan())
    fn(msg)
    return msg.SerializeToString()


def _unsorted(msg: table_pb2.RoutingTable) -> None:
    hashes = np.frombuffer(msg.key_hashes, dtype="<u8").copy()
    hashes[[0, 1]] = hashes[[1, 0]]
    msg.key_hashes = hashes.tobytes()


def _bad_member(msg: table_pb2.RoutingTable) -> None:
    members = np.frombuffer(msg.set_members, dtype="<u2").copy()
    members[-1] = 999
    msg.set_members = members.tobytes()


def _flip_hash_byte(msg: table_pb2.RoutingTable) -> None:
    data = bytearray(msg.key_hashes)
    data[-1] ^= 0x01
    msg.key_hashes = bytes(data)


CORRUPTIONS: dict[str, bytes] = {
    "garbage": b"\xff\xfe not a protobuf \x00\x01" * 10,
    "truncated": encode_table(small_plan())[:-7],
    "unsorted": mutate(_unsorted),
    "member out of range": mutate(_bad_member),
    "hash mismatch": mutate(_flip_hash_byte),
    "odd members": mutate(lambda m: setattr(m, "set_members", m.set_members + b"\x00")),
    "format": mutate(lambda m: setattr(m, "format", 2)),
    "no pool": mutate(lambda m: setattr(m, "pool", "")),
    "version": mutate(lambda m: setattr(m, "version", "p0000000000000000")),
    "empty": b"",
}


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_rejects_what_the_parsed_message_path_rejects(name: str) -> None:
    data = CORRUPTIONS[name]
    with pytest.raises(TableError) as ours:
        decode_table(bytearray(data))
    try:
        parsed = table_pb2.RoutingTable.FromString(data)
    except DecodeError:
        assert str(ours.value).startswith("not a RoutingTable protobuf")
        return
    with pytest.raises(TableError) as reference:
        table_from_proto(parsed)
    assert str(ours.value) == str(reference.value)


def test_decode_for_checks_the_pool_and_the_version_the_pointer_names() -> None:
    table = small_plan("blue")
    blob = encode_table(table)
    assert decode_for(blob, "blue", table.version).version == table.version
    with pytest.raises(TableError, match="table is for pool 'blue', not 'red'"):
        decode_for(blob, "red", table.version)
    with pytest.raises(TableError, match="the pointer names p0000000000000000"):
        decode_for(blob, "blue", "p0000000000000000")


@pytest.mark.redis
async def test_chunked_fetch_returns_the_stored_bytes(stores: Stores) -> None:
    table = small_plan(nodes=8, keys=2_000)
    blob = encode_table(table)
    await stores.plans.put_plan(blob, metadata_for(table))
    for chunk in (1, 100, len(blob) - 1, len(blob), 1 << 20):
        fetched = await ChunkedTableFetcher(stores.client, chunk_bytes=chunk)(
            "default", table.version
        )
        assert fetched is not None
        assert bytes(fetched) == blob
    missing = await ChunkedTableFetcher(stores.client)("default", "p0000000000000000")
    assert missing is None
