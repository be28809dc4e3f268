"""The Endpoint Picker's holds and passive health, driven by synthetic ext_proc streams: a hold
lasts until the response ends, a serving fallback takes it, and 5xx count against the server."""

from __future__ import annotations

import pytest

from dataplane.core.table import RoutingTable
from tests.support import extproc as m
from tests.support.factories import small_plan
from tests.support.picker_stream import (
    ADDRESSES,
    picker,
    run,
)
from tests.support.router import warm_keys


@pytest.fixture(scope="module")
def plan() -> RoutingTable:
    return small_plan()  # its warm keys have 1, 2 or 4 destinations


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
