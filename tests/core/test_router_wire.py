"""Hand-assembled RouteDecision bytes parse to exactly what protobuf would have built."""

from __future__ import annotations

import pytest

from cacheroute.v1 import routing_pb2
from dataplane.core.decision_encoding import REASONS, DecisionEncoder, batch_response, varint
from dataplane.core.policies import Reason


def expected(
    node: str, address: str, reason: Reason, version: str, generation: int, key_hash: int,
    key: str, request_id: str, policy: str,
) -> routing_pb2.RouteDecision:  # fmt: skip
    return routing_pb2.RouteDecision(
        node_id=node, address=address, reason=REASONS[reason], version=version,  # type: ignore[arg-type]
        generation=generation, key_hash=key_hash, key=key, policy=policy, request_id=request_id,
    )  # fmt: skip


CASES = [
    ("node-1", "10.0.0.1:8000", Reason.WARM, "p0123456789abcdef", 7, 2**64 - 1, "tenant-1", "r1"),
    ("n", "n", Reason.TAIL, "", 0, 0, "k", ""),
    ("node-é", "[::1]:9", Reason.NO_TABLE, "", 0, 12345, "ключ-" + "x" * 300, "id" * 200),
    ("a", "b", Reason.BALANCE, "p" + "f" * 16, 2**40, 1, "~d1." + "ab" * 16, "x"),
]


@pytest.mark.parametrize("case", CASES)
def test_encoded_decisions_parse_to_the_protobuf_message(case: tuple) -> None:  # type: ignore[type-arg]
    encoder = DecisionEncoder("cacheroute")
    for _ in range(2):  # first call builds the cached prefix, the second reuses it
        data = encoder.encode(*case)
        assert routing_pb2.RouteDecision.FromString(data) == expected(*case, "cacheroute")


def test_every_reason_maps_to_its_proto_value() -> None:
    for reason in Reason:
        name = routing_pb2.RouteReason.Name(REASONS[reason])
        assert name == f"ROUTE_REASON_{reason.name}"


def test_a_batch_response_holds_the_decisions_in_order() -> None:
    encoder = DecisionEncoder("flat")
    parts = [encoder.encode(*case) for case in CASES]
    reply = routing_pb2.RouteBatchResponse.FromString(batch_response(parts))
    assert list(reply.decisions) == [expected(*case, "flat") for case in CASES]
    assert routing_pb2.RouteBatchResponse.FromString(batch_response([])).decisions == []


def test_varint_matches_protobuf() -> None:
    for value in (0, 1, 127, 128, 300, 2**14, 2**21 + 5, 2**35):
        message = routing_pb2.RouteDecision(generation=value)
        assert message.SerializeToString() == (b"\x28" + varint(value) if value else b"")


def test_an_outcome_object_finds_its_own_prefix_even_when_an_id_is_reused() -> None:
    encoder = DecisionEncoder("cacheroute")
    expected = {}
    for version in ("p1", "p2", "p3"):
        # a fresh tuple each time, the previous one freed: CPython may hand out the same id
        outcome = ("node-a", "10.0.0.1:8000", Reason.WARM, version, 1, "")
        data = encoder.encode_outcome(outcome, 7, "k", "r")
        expected[version] = data
        assert routing_pb2.RouteDecision.FromString(data).version == version
        assert encoder.encode_outcome(outcome, 7, "k", "r") == data  # the cached path
    assert len(set(expected.values())) == 3
