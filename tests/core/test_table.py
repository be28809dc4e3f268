"""The in-memory routing table: layout validation, lookup, immutability and the content hash."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import numpy as np
import pytest

from dataplane.core.table import (
    PlannerParams,
    PlanStats,
    RoutingTable,
    TableError,
    make_table,
    validate_arrays,
    version_of,
)

NODES = ("node-a", "node-b", "node-c")
HASHES = [10, 20, 30]
OFFSETS = [0, 1, 3, 4]
MEMBERS = [2, 0, 1, 1]  # key 10 -> {c}, key 20 -> {a, b}, key 30 -> {b}
PARAMS = PlannerParams(q_cap=5.0, slots_per_node=2)


def table(**overrides: Any) -> RoutingTable:
    args: dict[str, Any] = {
        "pool": "default",
        "node_ids": NODES,
        "key_hashes": np.array(HASHES, dtype=np.uint64),
        "set_offsets": np.array(OFFSETS, dtype=np.uint32),
        "set_members": np.array(MEMBERS, dtype=np.uint16),
        "params": PARAMS,
        "created_at_unix_ms": 1_700_000_000_000,
    }
    args.update(overrides)
    return make_table(**args)


def check(
    hashes: list[int], offsets: list[int], members: list[int], nodes: tuple[str, ...] = NODES
) -> None:
    validate_arrays(
        nodes,
        np.array(hashes, dtype=np.uint64),
        np.array(offsets, dtype=np.uint32),
        np.array(members, dtype=np.uint16),
    )


# -- validation: each rule, each with a message naming it -------------------------------------

CORRUPT = [
    ("unsorted hashes", [20, 10, 30], OFFSETS, MEMBERS, "key hashes are not sorted and unique"),
    ("duplicate hashes", [10, 20, 20], OFFSETS, MEMBERS, "key hashes are not sorted and unique"),
    ("member index >= nodes", HASHES, OFFSETS, [2, 0, 3, 1], "a set member is 3; there are 3"),
    ("set repeats a member", HASHES, OFFSETS, [2, 1, 1, 1], "a destination set repeats a member"),
    ("set not sorted", HASHES, OFFSETS, [2, 1, 0, 1], "a destination set repeats a member or"),
    ("empty set", HASHES, [0, 1, 1, 2], [2, 0], "a destination set is empty"),
    ("offsets too short", HASHES, [0, 1, 3], MEMBERS[:3], "set_offsets has 3 entries; expected 4"),
    ("offsets too long", HASHES, [0, 1, 2, 3, 4], MEMBERS, "set_offsets has 5 entries; expected 4"),
    ("offsets[0] != 0", HASHES, [1, 2, 3, 4], MEMBERS, re.escape("set_offsets[0] is not 0")),
    ("offsets end short", HASHES, [0, 1, 2, 3], MEMBERS, "set_offsets ends at 3 but there are 4"),
    ("offsets end long", HASHES, [0, 1, 3, 5], MEMBERS, "set_offsets ends at 5 but there are 4"),
]


@pytest.mark.parametrize(
    ("hashes", "offsets", "members", "message"),
    [case[1:] for case in CORRUPT],
    ids=[case[0] for case in CORRUPT],
)
def test_validate_arrays_rejects_a_corrupt_layout_naming_the_rule(
    hashes: list[int], offsets: list[int], members: list[int], message: str
) -> None:
    with pytest.raises(TableError, match=f"^{message}"):  # the message starts with the rule
        check(hashes, offsets, members)


@pytest.mark.parametrize(
    ("nodes", "message"),
    [
        ((), "table has no destinations"),
        (("a", "b", "a"), "destination ids are not unique"),
        (("a", "", "c"), "a destination id is empty"),
        (tuple(f"n{i}" for i in range(65536)), "table has 65536 destinations; the limit is 65535"),
    ],
    ids=["no nodes", "duplicate ids", "empty id", "too many"],
)
def test_validate_arrays_rejects_bad_destination_lists(
    nodes: tuple[str, ...], message: str
) -> None:
    with pytest.raises(TableError, match=f"^{message}"):
        check(HASHES, OFFSETS, MEMBERS, nodes)


def test_an_empty_table_is_valid_and_serves_no_key() -> None:
    empty = table(key_hashes=[], set_offsets=[0], set_members=[])
    assert (empty.num_keys, empty.nbytes) == (0, 4)
    assert [empty.destinations(h) for h in (0, 10, 2**64 - 1)] == [None, None, None]
    with pytest.raises(TableError, match="set_offsets has 0 entries; expected 1"):
        check([], [], [])  # the one offset an empty table needs is still required


def test_the_largest_hash_and_a_set_of_every_destination_are_valid_and_found() -> None:
    t = table(key_hashes=[0, 2**64 - 1], set_offsets=[0, 3, 4], set_members=[0, 1, 2, 2])
    assert t.destinations(0) == [0, 1, 2]
    assert t.destination_ids(2**64 - 1) == ["node-c"]
    assert t.find(2**64 - 2) == -1


def test_the_largest_allowed_destination_list_of_65535_is_valid() -> None:
    nodes = tuple(f"n{i}" for i in range(65535))
    t = table(node_ids=nodes, set_members=[65534, 0, 1, 1])
    assert t.destination_ids(10) == ["n65534"]


def test_make_table_rejects_an_unknown_placement() -> None:
    with pytest.raises(TableError, match="unknown placement 'greedy'"):
        table(params=PlannerParams(q_cap=1.0, slots_per_node=1, placement="greedy"))


def test_make_table_rejects_weights_not_matching_the_destinations() -> None:
    with pytest.raises(TableError, match="2 node weights for 3 destinations"):
        table(params=PlannerParams(q_cap=1.0, slots_per_node=1, node_weights=(1.0, 2.0)))


@pytest.mark.parametrize("seed", [-1, 2**64])
def test_make_table_rejects_a_seed_outside_u64(seed: int) -> None:
    with pytest.raises(TableError, match=r"seed must be an integer in \[0, 2\*\*64\)"):
        table(params=PlannerParams(q_cap=1.0, slots_per_node=1, seed=seed))


# -- lookup -----------------------------------------------------------------------------------


def test_find_returns_the_row_of_a_warm_key_and_minus_one_otherwise() -> None:
    t = table()
    assert [t.find(h) for h in HASHES] == [0, 1, 2]
    assert [t.find(h) for h in (0, 15, 31, 2**64 - 1)] == [-1, -1, -1, -1]


def test_destinations_returns_the_set_or_none() -> None:
    t = table()
    assert t.destinations(20) == [0, 1]
    assert t.destination_ids(20) == ["node-a", "node-b"]
    assert t.destination_ids(10) == ["node-c"]
    assert t.destinations(25) is None
    assert t.destination_ids(25) is None


def test_lookup_on_an_empty_table_finds_nothing() -> None:
    t = table(
        key_hashes=np.zeros(0, np.uint64),
        set_offsets=np.zeros(1, np.uint32),
        set_members=np.zeros(0, np.uint16),
    )
    assert t.num_keys == 0
    assert t.destinations(10) is None


def test_nbytes_is_8_per_key_4_per_offset_and_2_per_member() -> None:
    t = table()
    assert t.num_keys == 3
    assert t.nbytes == 3 * 8 + 4 * 4 + 4 * 2


# -- immutability -----------------------------------------------------------------------------


def test_table_arrays_are_read_only() -> None:
    t = table()
    for array in (t.key_hashes, t.set_offsets, t.set_members):
        with pytest.raises(ValueError, match="read-only"):
            array[0] = 1


def test_table_fields_cannot_be_reassigned() -> None:
    t = table()
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.pool = "other"  # type: ignore[misc]


def test_make_table_leaves_the_callers_arrays_writable_and_unshared() -> None:
    hashes = np.array(HASHES, dtype=np.uint64)
    t = table(key_hashes=hashes)
    hashes[0] = 99  # the caller may reuse its array ...
    assert t.key_hashes[0] == 10  # ... without changing the table


def test_a_writable_base_of_a_view_cannot_change_the_table() -> None:
    base = np.array([0, *HASHES], dtype=np.uint64)
    t = table(key_hashes=base[1:])
    base[1] = 5
    assert t.key_hashes.tolist() == HASHES


def test_arrays_over_immutable_bytes_are_kept_without_a_copy() -> None:
    data = np.array(HASHES, dtype="<u8").tobytes()
    hashes = np.frombuffer(data, dtype="<u8")
    t = table(key_hashes=hashes)
    assert np.shares_memory(t.key_hashes, hashes)


def test_make_table_accepts_plain_lists() -> None:
    t = table(key_hashes=HASHES, set_offsets=OFFSETS, set_members=MEMBERS)
    assert (t.key_hashes.dtype, t.set_offsets.dtype, t.set_members.dtype) == (
        np.uint64,
        np.uint32,
        np.uint16,
    )
    assert t.nbytes == 3 * 8 + 4 * 4 + 4 * 2
    assert t.destination_ids(30) == ["node-b"]


# -- content hash and version -----------------------------------------------------------------


def test_version_is_p_and_the_first_16_hex_digits_of_the_content_hash() -> None:
    t = table()
    assert re.fullmatch(r"[0-9a-f]{64}", t.content_hash)
    assert t.version == version_of(t.content_hash) == "p" + t.content_hash[:16]


def test_content_hash_ignores_build_time_stats_and_labels() -> None:
    a = table()
    b = table(created_at_unix_ms=1, stats=PlanStats(num_keys=9, build_ms=3.0))
    assert a.content_hash == b.content_hash


@pytest.mark.parametrize(
    "change",
    [
        {"pool": "other"},
        {"node_ids": ("node-a", "node-b", "node-x")},
        {"key_hashes": np.array([10, 20, 31], dtype=np.uint64)},
        {"set_members": np.array([2, 0, 2, 1], dtype=np.uint16)},
        {"set_offsets": np.array([0, 2, 3, 4], dtype=np.uint32)},
        {"params": PlannerParams(q_cap=5.5, slots_per_node=2)},
        {"params": PlannerParams(q_cap=5.0, slots_per_node=3)},
        {"params": PlannerParams(q_cap=5.0, slots_per_node=2, placement="hash")},
        {"params": PlannerParams(q_cap=5.0, slots_per_node=2, seed=7)},
        {"params": PlannerParams(q_cap=5.0, slots_per_node=2, node_weights=(1.0, 1.0, 2.0))},
        {"params": PlannerParams(q_cap=5.0, slots_per_node=2, seed=2**63)},
    ],
    ids=lambda change: next(iter(change)),
)
def test_content_hash_changes_with_any_content(change: dict[str, Any]) -> None:
    if "set_offsets" in change:
        change = {**change, "set_members": np.array([0, 2, 1, 1], dtype=np.uint16)}
    assert table(**change).content_hash != table().content_hash


def test_content_hash_covers_weight_values_not_just_their_count() -> None:
    # plans that differ only in capacity weights must get different versions
    weights = [(1.0, 1.0, 2.0), (1.0, 2.0, 1.0), (1.0, 1.0, 2.5)]
    hashes = {
        table(params=PlannerParams(q_cap=5.0, slots_per_node=2, node_weights=w)).content_hash
        for w in weights
    }
    assert len(hashes) == len(weights)


def test_content_hash_tells_apart_pool_and_node_id_boundaries() -> None:
    # length prefixes: moving bytes between adjacent strings changes the hash
    a = table(node_ids=("ab", "c", "d"))
    b = table(node_ids=("a", "bc", "d"))
    assert a.content_hash != b.content_hash


def test_expected_content_hash_must_match() -> None:
    good = table().content_hash
    assert table(expected_content_hash=good).content_hash == good
    message = f"^content hash mismatch: table says {'0' * 16}…, content is {good[:16]}…$"
    with pytest.raises(TableError, match=message):
        table(expected_content_hash="0" * 64)


def test_the_largest_u32_slot_count_is_hashed() -> None:
    # W is hashed as an unsigned 32-bit field, so the top of its range must hash (and differ)
    top = table(params=PlannerParams(q_cap=5.0, slots_per_node=2**32 - 1)).content_hash
    assert top != table(params=PlannerParams(q_cap=5.0, slots_per_node=2**31 - 1)).content_hash


def test_trusted_content_hash_is_taken_without_hashing_but_layout_is_still_checked() -> None:
    trusted = table(trusted_content_hash="ab" * 32)
    assert trusted.content_hash == "ab" * 32
    assert trusted.version == "p" + "ab" * 8
    with pytest.raises(TableError, match="not sorted"):
        table(trusted_content_hash="ab" * 32, key_hashes=np.array([3, 2, 1], np.uint64))
