"""The Endpoint Picker's choice of endpoints, driven by synthetic ext_proc streams: fallbacks in
set order then by load, the subset hint, and 503/404 when nothing is eligible."""

from __future__ import annotations

import pytest

from dataplane.core.table import RoutingTable
from tests.support import extproc as m
from tests.support.factories import small_plan
from tests.support.picker_stream import (
    ADDRESSES,
    NODES,
    members,
    narrow,
    picker,
    run,
)
from tests.support.router import load_snapshot, warm_keys


@pytest.fixture(scope="module")
def plan() -> RoutingTable:
    return small_plan()  # its warm keys have 1, 2 or 4 destinations


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
