"""The Endpoint Picker's stream handler, driven by synthetic ext_proc streams (as Envoy sends).

A real :class:`~dataplane.core.router.Router` with a real plan, holds and passive health: the
handler is the only thing between these messages and the router's decision path.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from dataplane.core.keys import derive_key, hash_key
from dataplane.core.outliers import OutlierConfig
from dataplane.core.router import Router
from dataplane.core.table import RoutingTable
from dataplane.extproc import wire
from dataplane.extproc.context import ExtProcConfig, PickerContext
from dataplane.extproc.stream import PickerStream
from dataplane.health.passive_health import PassiveHealth
from dataplane.requests.holds import Holds
from dataplane.telemetry.served_metrics import ServedMetrics
from tests.support import extproc as m
from tests.support.factories import small_plan
from tests.support.router import load_snapshot, warm_keys

NODES = [f"node-{i}" for i in range(4)]
ADDRESSES = {n: f"10.0.0.{i + 1}:8000" for i, n in enumerate(NODES)}


def picker(
    loads: list[float] | None = None, table: RoutingTable | None = None, **config: Any
) -> PickerContext:
    router = Router(outliers=OutlierConfig(consecutive_failures=1, max_ejected_share=1.0))
    snapshot = load_snapshot(
        dict(zip(NODES, loads or [0.0] * 4, strict=True)), seq=1, addresses=ADDRESSES
    )
    router.apply_load(snapshot)
    if table is not None:
        router.install_table("default", table, 1)
    registry = CollectorRegistry()
    return PickerContext(
        router,
        Holds(router),
        PassiveHealth(router, registry),
        ServedMetrics(registry),
        ExtProcConfig(**config),
        registry,
    )


def run(ctx: PickerContext, *messages: Any) -> tuple[PickerStream, list[Any]]:
    stream = PickerStream(ctx, "gateway")
    answers: list[Any] = []
    for message in messages:
        answers += stream.on_message(message)
    return stream, answers


def members(table: RoutingTable, key: str) -> list[str]:
    ids = table.destination_ids(hash_key(key))
    assert ids is not None
    return [ADDRESSES[n] for n in ids]


def sample(ctx: PickerContext, name: str, labels: dict[str, str]) -> float:
    return float(ctx.registry.get_sample_value(name, labels) or 0.0)


def key_sources(ctx: PickerContext, source: str) -> float:
    labels = {"door": "extproc", "source": source}
    return sample(ctx, "cacheroute_router_key_source_total", labels)


@pytest.fixture(scope="module")
def plan() -> RoutingTable:
    return small_plan()  # its warm keys have 1, 2 or 4 destinations


def narrow(plan: RoutingTable) -> str:
    """A warm key with at most two destinations (so some endpoints are outside its set)."""
    return next(k for k in warm_keys(plan) if len(members(plan, k)) <= 2)


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


def test_fallbacks_are_the_other_set_members_then_the_least_loaded_others(
    plan: RoutingTable,
) -> None:
    key = next(k for k in warm_keys(plan) if len(members(plan, k)) == 2)
    inside = members(plan, key)
    loads = [0.0] * 4
    by_address = {a: i for i, a in enumerate(ADDRESSES.values())}
    loads[by_address[inside[0]]] = 3.0  # the second member is less loaded: it is the decision
    outside = [a for a in ADDRESSES.values() if a not in inside]
    loads[by_address[outside[0]]] = 2.0
    loads[by_address[outside[1]]] = 1.0
    _, answers = run(picker(loads, plan), m.request_headers({"x-cacheroute-key": key}))
    assert m.picked(answers) == [inside[1], inside[0], outside[1]]
    _, answers = run(picker(loads, plan, fallbacks=0), m.request_headers({"x-cacheroute-key": key}))
    assert m.picked(answers) == [inside[1]]


def test_the_subset_hint_keeps_the_pick_and_fallbacks_inside_it(plan: RoutingTable) -> None:
    key = narrow(plan)
    outside = [a for a in ADDRESSES.values() if a not in members(plan, key)]
    ctx = picker(table=plan)
    _, answers = run(ctx, m.request_headers({"x-cacheroute-key": key}, subset=outside[:2]))
    assert sorted(m.picked(answers)) == sorted(outside[:2])
    inside = members(plan, key)[0]
    _, answers = run(ctx, m.request_headers({"x-cacheroute-key": key}, subset=[inside]))
    assert m.picked(answers) == [inside]


@pytest.mark.parametrize("subset", [[], ["10.9.9.9:8000"]])
def test_a_subset_with_no_eligible_endpoint_is_a_503_in_openai_style(
    plan: RoutingTable, subset: list[str]
) -> None:
    ctx = picker(table=plan)
    stream, answers = run(ctx, m.request_headers({"x-cacheroute-key": "k"}, subset=subset))
    status, body = m.immediate(answers)
    assert status == 503
    assert body["error"]["type"] == "service_unavailable_error"
    assert body["error"]["code"] == "no_eligible_engine"
    assert stream.done
    assert ctx.holds.open_count == {}


def test_a_pool_without_eligible_engines_is_a_503_and_an_unknown_pool_a_404() -> None:
    ctx = picker()
    drained = load_snapshot(dict.fromkeys(NODES, 0.0), seq=2, draining=tuple(NODES))
    ctx.router.apply_load(drained)
    status, body = m.immediate(run(ctx, m.request_headers({"x-cacheroute-key": "k"}))[1])
    assert (status, body["error"]["code"]) == (503, "no_eligible_engine")
    answers = run(
        picker(), m.request_headers({"x-cacheroute-key": "k", "x-cacheroute-pool": "nope"})
    )[1]
    status, body = m.immediate(answers)
    assert (status, body["error"]["param"]) == (404, "x-cacheroute-pool")


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


def test_the_hold_lasts_until_the_response_ends_and_releases_on_stream_close(
    plan: RoutingTable,
) -> None:
    ctx = picker(table=plan)
    key = warm_keys(plan)[0]
    stream, answers = run(ctx, m.request_headers({"x-cacheroute-key": key}, end_of_stream=True))
    primary = m.picked(answers)[0]
    node = next(n for n, a in ADDRESSES.items() if a == primary)
    assert ctx.holds.open_count == {("default", node): 1}
    stream.on_message(m.response_headers(200, served=primary))
    usage = b'{"usage":{"prompt_tokens_details":{"cached_tokens":48}}}'
    body = b'data: {"choices":[]}\n\ndata: ' + usage + b"\n\n"
    echoes = stream.on_message(m.response_body(body[:20], False))
    assert ctx.holds.open_count == {("default", node): 1}
    echoes += stream.on_message(m.response_body(body[20:], True))
    assert m.echoed(echoes, "response_body") == (body, True)
    assert ctx.holds.open_count == {}
    registry = ctx.registry
    labels = {"door": "extproc", "pool": "default", "model": "unknown"}
    assert registry.get_sample_value("cacheroute_router_ttft_seconds_count", labels) == 1
    assert registry.get_sample_value("cacheroute_router_inter_token_seconds_count", labels) == 1
    assert registry.get_sample_value("cacheroute_router_cached_tokens_sum", labels) == 48
    abandoned, _ = run(ctx, m.request_headers({"x-cacheroute-key": key}, end_of_stream=True))
    assert ctx.holds.open_count == {("default", node): 1}
    abandoned.close()  # the client went away before an answer: Envoy ends the stream
    assert ctx.holds.open_count == {}
    assert registry.get_sample_value("cacheroute_router_request_seconds_count", labels) == 1
    # The recipe's mode: no response body, the stream's end after the headers is the answer's end.
    quiet, _ = run(ctx, m.request_headers({"x-cacheroute-key": key}, end_of_stream=True))
    quiet.on_message(m.response_headers(200, served=primary))
    assert ctx.holds.open_count == {("default", node): 1}
    quiet.close()
    assert ctx.holds.open_count == {}
    assert registry.get_sample_value("cacheroute_router_request_seconds_count", labels) == 2


def test_a_fallback_that_served_takes_the_hold_and_the_skipped_entry_counts_as_failed(
    plan: RoutingTable,
) -> None:
    ctx = picker(table=plan)
    key = warm_keys(plan)[0]
    stream, answers = run(ctx, m.request_headers({"x-cacheroute-key": key}, end_of_stream=True))
    first, second = m.picked(answers)[:2]
    ids = {a: n for n, a in ADDRESSES.items()}
    answer = stream.on_message(m.response_headers(200, served=second))
    headers = m.set_headers(answer[0], "response_headers")
    assert headers["x-cacheroute-node"] == ids[second]
    assert headers["x-cacheroute-retried-from"] == ids[first]
    assert ctx.holds.open_count == {("default", ids[second]): 1}
    assert ids[first] in ctx.router.pools["default"].outliers.ejected  # one failure ejects here
    assert ctx.metrics.fallbacks._value.get() == 1
    stream.on_message(m.response_body(b"{}", True))
    assert ctx.holds.open_count == {}


def test_a_5xx_counts_against_the_node_that_served(plan: RoutingTable) -> None:
    ctx = picker(table=plan)
    stream, answers = run(ctx, m.request_headers({"x-cacheroute-key": "k"}, end_of_stream=True))
    primary = m.picked(answers)[0]
    node = next(n for n, a in ADDRESSES.items() if a == primary)
    stream.on_message(m.response_headers(503, served=primary, end_of_stream=True))
    assert node in ctx.router.pools["default"].outliers.ejected
    assert ctx.holds.open_count == {}
