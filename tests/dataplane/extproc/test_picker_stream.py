"""The Endpoint Picker's stream handler, driven by synthetic ext_proc streams (as Envoy sends):
how a request is keyed (headers, body, derived key) and the bodies it refuses.

A real :class:`~dataplane.core.router.Router` with a real plan, holds and passive health: the
handler is the only thing between these messages and the router's decision path. The choice of
endpoints is in test_picker_choice.py, holds and health in test_picker_holds.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from dataplane.core.keys import derive_key, hash_key
from dataplane.core.table import RoutingTable
from dataplane.extproc import wire
from dataplane.extproc.stream import PickerStream
from tests.support import extproc as m
from tests.support.factories import small_plan
from tests.support.picker_stream import (
    key_sources,
    members,
    picker,
    run,
)
from tests.support.router import warm_keys


@pytest.fixture(scope="module")
def plan() -> RoutingTable:
    return small_plan()  # its warm keys have 1, 2 or 4 destinations


def test_a_key_header_is_decided_at_the_headers_and_the_body_passes_unchanged(
    plan: RoutingTable,
) -> None:
    ctx = picker(table=plan)
    key = warm_keys(plan)[0]
    body = m.chat_body("a prompt that does not matter here")
    stream, first = run(ctx, m.request_headers({"x-cacheroute-key": key}))
    endpoints = m.picked(first)
    assert endpoints[0] in members(plan, key)
    assert len(endpoints) == 3  # the decision and two fallbacks, all distinct
    assert len(set(endpoints)) == 3
    echoes: list[Any] = []
    for chunk in m.body_chunks(body, 7):
        echoes += stream.on_message(chunk)
    assert m.echoed(echoes) == (body, True)
    assert ctx.metrics.decisions.labels("headers")._value.get() == 1


def test_a_body_in_many_chunks_is_gathered_then_keyed_by_prompt_cache_key(
    plan: RoutingTable,
) -> None:
    ctx = picker(table=plan)
    key = warm_keys(plan)[1]
    body = m.chat_body("x" * 150_000, prompt_cache_key=key)
    stream = PickerStream(ctx, "gateway")
    assert stream.on_message(m.request_headers()) == []  # the key is in the body: wait for it
    chunks = m.body_chunks(body, 16_384)
    for chunk in chunks[:-1]:  # nothing is answered before the body is complete
        assert stream.on_message(chunk) == []
    answers = stream.on_message(chunks[-1])
    assert answers[0].WhichOneof("response") == "request_headers"  # the pick comes first
    assert m.echoed(answers) == (body, True)
    assert all(
        len(a.request_body.response.body_mutation.streamed_response.body) <= wire.BODY_CHUNK_BYTES
        for a in answers
        if a.WhichOneof("response") == "request_body"
    )
    assert m.picked(answers)[0] in members(plan, key)
    assert key_sources(ctx, "prompt_cache_key") == 1


def test_without_a_key_the_derived_key_of_model_and_prompt_decides(plan: RoutingTable) -> None:
    ctx = picker(table=plan)
    body = m.chat_body("You are a helpful assistant.")
    _, answers = run(ctx, m.request_headers(), *m.body_chunks(body, 10))
    assert answers[0].WhichOneof("response") == "request_headers"
    assert m.echoed(answers) == (body, True)
    # The same derived key the HTTP front would route by: sent as a key header, same pick.
    derived = derive_key("m", "", "user: You are a helpful assistant.\n")
    view = ctx.router.pools["default"].view
    expected = plan.destination_ids(hash_key(derived))
    if expected is not None:  # warm by chance: inside its set
        assert m.picked(answers)[0] in [view.nodes.addresses[view.nodes.index[n]] for n in expected]
    assert key_sources(ctx, "derived") == 1
    again = picker(table=plan)
    _, same = run(again, m.request_headers(), *m.body_chunks(body, 3))
    assert m.picked(same) == m.picked(answers)  # deterministic for equal views


def test_key_headers_are_honoured_in_their_configured_order_and_counted(
    plan: RoutingTable,
) -> None:
    ctx = picker(table=plan)
    keys = warm_keys(plan)
    order = ["x-cacheroute-key", "x-session-id", "x-smg-routing-key", "x-dynamo-session-id"]
    for skip in range(len(order)):
        headers = {name: keys[i] for i, name in enumerate(order) if i >= skip}
        _, answers = run(ctx, m.request_headers(headers))
        assert m.picked(answers)[0] in members(plan, keys[skip])
        assert key_sources(ctx, order[skip]) == 1
    custom = picker(table=plan, key_headers=("x-tenant",))
    _, answers = run(custom, m.request_headers({"x-tenant": keys[0], "x-session-id": keys[1]}))
    assert m.picked(answers)[0] in members(plan, keys[0])


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b"{not json", 400, "invalid_json"),
        (b"[1, 2]", 400, "invalid_json"),
        (json.dumps({"model": "m", "messages": []}).encode(), 400, None),
        (m.chat_body("y" * 5000), 413, "body_too_large"),
    ],
)
def test_malformed_or_oversized_bodies_get_a_clear_answer_and_nothing_is_forwarded(
    body: bytes, status: int, code: str | None
) -> None:
    ctx = picker(max_body_bytes=4096)
    stream = PickerStream(ctx, "gateway")
    answers = stream.on_message(m.request_headers())
    for chunk in m.body_chunks(body, 1000):
        answers += stream.on_message(chunk)
        if stream.done:
            break
    got, error = m.immediate(answers)  # the only answer: no pick, no body passed on
    assert got == status
    assert error["error"]["message"]
    if code is not None:
        assert error["error"]["code"] == code
    assert ctx.holds.open_count == {}
    assert ctx.metrics.immediate_responses.labels(str(status))._value.get() == 1
