"""RouteRequest validation: pool syntax, key rules, derived keys, prefix blocks, batch limits."""

from __future__ import annotations

import pytest

from cacheroute.v1 import routing_pb2
from dataplane.core.keys import derive_key, hash_key, prompt_blocks
from dataplane.core.route_input import (
    MAX_LABEL,
    MAX_PREFIX_BLOCKS,
    MAX_REQUEST_ID,
    InvalidRequestError,
    PoolNames,
    parse_batch,
    parse_request,
)


def req(**fields: object) -> routing_pb2.RouteRequest:
    return routing_pb2.RouteRequest(**fields)  # type: ignore[arg-type]


def test_a_keyed_request_keeps_its_key_and_hashes_it() -> None:
    inp = parse_request(req(pool="blue", key="tenant-1", request_id="r9"))
    assert (inp.pool, inp.key, inp.key_hash, inp.request_id) == (
        "blue",
        "tenant-1",
        hash_key("tenant-1"),
        "r9",
    )


def test_an_empty_pool_means_default() -> None:
    assert parse_request(req(key="k")).pool == "default"


@pytest.mark.parametrize("pool", ["Blue", "-x", "a b", "x" * 64, "é"])
def test_a_malformed_pool_is_rejected_naming_the_rule(pool: str) -> None:
    with pytest.raises(InvalidRequestError, match=r"pool .* does not match"):
        parse_request(req(pool=pool, key="k"))


def test_the_pool_cache_stops_growing_at_its_limit() -> None:
    names = PoolNames(limit=3)
    for i in range(10):
        assert names.check(f"p{i}") == f"p{i}"
    assert len(names.known) == 3
    with pytest.raises(InvalidRequestError):
        names.check("NOPE")


def test_a_key_of_512_bytes_is_accepted_and_513_rejected() -> None:
    assert parse_request(req(key="k" * 512)).key == "k" * 512
    with pytest.raises(InvalidRequestError, match="key is 513 bytes; the limit is 512"):
        parse_request(req(key="k" * 513))


def test_the_key_limit_counts_utf8_bytes_not_characters() -> None:
    with pytest.raises(InvalidRequestError, match="key is 514 bytes"):
        parse_request(req(key="é" * 257))


def test_a_key_starting_with_tilde_is_reserved() -> None:
    with pytest.raises(InvalidRequestError, match="must not start with '~'"):
        parse_request(req(key="~d1.abc"))


def test_no_key_and_no_prompt_is_rejected() -> None:
    with pytest.raises(InvalidRequestError, match="no key and no prompt_prefix"):
        parse_request(req(model="m"))


def test_without_a_key_the_key_is_derived_from_model_salt_and_prompt() -> None:
    inp = parse_request(req(model="llama", cache_salt="lora-7", prompt_prefix="You are"))
    expected = derive_key("llama", "lora-7", "You are")
    assert inp.key == expected
    assert inp.key.startswith("~d2.")
    assert inp.key_hash == hash_key(expected)


def test_blocks_come_from_prefix_blocks_when_given_else_from_the_prompt() -> None:
    given = parse_request(req(key="k", prompt_prefix="x" * 200, prefix_blocks=[5, 6, 7]))
    assert given.blocks() == (5, 6, 7)
    derived = parse_request(req(key="k", prompt_prefix="x" * 200))
    assert derived.blocks() == prompt_blocks("x" * 200)
    assert parse_request(req(key="k")).blocks() == ()


def test_prefix_blocks_are_capped_to_a_leading_run() -> None:
    inp = parse_request(req(key="k", prefix_blocks=list(range(MAX_PREFIX_BLOCKS + 50))))
    assert inp.blocks() == tuple(range(MAX_PREFIX_BLOCKS))


def test_a_batch_is_validated_whole_and_names_the_bad_index() -> None:
    good = [req(key=f"k{i}") for i in range(3)]
    assert [i.key for i in parse_batch(good, 10)] == ["k0", "k1", "k2"]
    with pytest.raises(InvalidRequestError, match=r"requests\[1\]: key must not start"):
        parse_batch([good[0], req(key="~x"), req(pool="BAD")], 10)


def test_a_batch_over_the_limit_is_rejected() -> None:
    with pytest.raises(InvalidRequestError, match="batch has 4 requests; the limit is 3"):
        parse_batch([req(key="k")] * 4, 3)


@pytest.mark.parametrize(
    ("fields", "over"),
    [
        ({"request_id": "r" * MAX_REQUEST_ID}, None),
        ({"request_id": "r" * (MAX_REQUEST_ID + 1)}, "request_id"),
        ({"request_id": "é" * MAX_REQUEST_ID}, None),  # characters, not bytes
        ({"model": "m" * (MAX_LABEL + 1)}, "model"),
        ({"cache_salt": "s" * (MAX_LABEL + 1)}, "cache_salt"),
    ],
)
def test_bounds_hold_when_the_wire_size_is_given(fields: dict[str, str], over: str | None) -> None:
    """The servicer passes the wire size to skip the bounds of small messages: a message over a
    bound is never small enough to skip them."""
    message = req(key="k", **fields)
    size = message.ByteSize()
    if over is None:
        assert parse_request(message, wire_size=size).key == "k"
    else:
        assert size > MAX_REQUEST_ID
        with pytest.raises(InvalidRequestError, match=over):
            parse_request(message, wire_size=size)
