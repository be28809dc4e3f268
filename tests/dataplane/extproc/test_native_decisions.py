"""Decisions through the native ext_proc transport are the router's own (issue 33, property).

The real binary (``scripts/build_extproc_native.py``) serves a picker context; a real gRPC client
sends what Envoy sends. For every generated input:

* against ``Router.route``: a twin router with the same loads, table and seed decides the same
  input; the pick's first endpoint is its node's (an unknown pool: 404 from both), and the whole
  list is :func:`~dataplane.extproc.pick.pick`'s on a third twin;
* against the Python picker: a sequence of requests (key header or body key, the gateway's subset
  hint, the response's status and served endpoint) through the native transport and through
  :class:`~dataplane.extproc.stream.PickerStream` in process gives byte-identical answers, so
  holds, passive health and fallbacks evolve the same way too.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from dataplane.core.router import UnknownPoolError
from dataplane.extproc import wire
from dataplane.extproc.context import PickerContext
from dataplane.extproc.native_bridge import NativeExtProcServer
from dataplane.extproc.native_streams import CallerOf
from dataplane.extproc.pick import pick
from dataplane.extproc.stream import PickerStream
from dataplane.health.health_feedback import HealthFeedback
from dataplane.openai_api.request_keys import header_request
from tests.support import extproc as m
from tests.support.extproc_native import require_binary
from tests.support.factories import small_plan
from tests.support.native_picker import native_picker, process
from tests.support.picker_stream import ADDRESSES, picker
from tests.support.router import warm_keys

pytestmark = pytest.mark.grpc
PLAN = small_plan(nodes=4, keys=20)
WARM = warm_keys(PLAN)
EXAMPLES = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
loads = st.lists(st.floats(0.0, 8.0, allow_nan=False), min_size=4, max_size=4)
keys = st.one_of(st.sampled_from(WARM), st.text(st.characters(codec="ascii"), max_size=12))
pools = st.sampled_from(["", "default", "elsewhere"])
subsets = st.one_of(
    st.none(), st.lists(st.sampled_from(sorted(ADDRESSES.values())), min_size=1, unique=True)
)


@pytest.fixture
async def server() -> AsyncIterator[NativeExtProcServer]:
    async with native_picker(require_binary(), picker(table=PLAN)) as started:
        yield started


def _serve(server: NativeExtProcServer, ctx: PickerContext) -> PickerContext:
    """``ctx`` is the context the native transport's next streams decide with."""
    ctx.config = server.config
    server.streams.ctx = ctx
    return ctx


def _headers(key: str, pool: str) -> dict[str, str]:
    headers = {"x-cacheroute-key": key, "x-request-id": "r"}
    if pool:
        headers["x-cacheroute-pool"] = pool
    return headers


@EXAMPLES
@given(loads=loads, key=keys, pool=pools)
async def test_the_native_pick_is_router_route_on_the_same_input(
    server: NativeExtProcServer, loads: list[float], key: str, pool: str
) -> None:
    native = _serve(server, picker(loads, table=PLAN))
    route_twin, pick_twin = picker(loads, table=PLAN), picker(loads, table=PLAN)
    headers = _headers(key, pool)
    sent = m.request_headers(headers, end_of_stream=True)
    answers = await process(server.port, [sent])
    found = header_request(headers, native.rules, "r")
    if not key:
        assert found is None  # no key header: power-of-two choices, not a keyed decision
        return
    assert found is not None
    now = time.time()
    try:
        outcome = route_twin.router.route(found.route, now)
    except UnknownPoolError:
        assert m.immediate(answers)[0] == 404
        return
    endpoints = m.picked(answers)
    assert endpoints[0] == ADDRESSES[outcome.node_id]
    chosen = pick(pick_twin.router, found.route, now, subset=None, fallbacks=2, rng=pick_twin.rng)
    assert tuple(endpoints) == chosen.endpoints


request = st.tuples(
    keys,
    st.booleans(),  # the key in the body instead of a header
    subsets,
    st.sampled_from([200, 200, 503, 404]),
    st.integers(0, 2),  # which entry of the pick served (the gateway retried down the list)
)


@EXAMPLES
@given(loads=loads, requests=st.lists(request, min_size=1, max_size=6))
async def test_native_answers_equal_the_python_pickers_byte_for_byte(
    server: NativeExtProcServer, loads: list[float], requests: list[Any]
) -> None:
    native = _serve(server, _counting(loads))
    python = _counting(loads)
    python.config = native.config
    for key, in_body, subset, status, served in requests:
        if in_body:
            body = m.chat_body(prompt_cache_key=key)
            sent = [m.request_headers({}, subset=subset), *m.body_chunks(body, 1 << 16)]
        else:
            sent = [m.request_headers({"x-cacheroute-key": key}, subset=subset)]
        ours, sent = _python(python, sent, status, served)
        theirs = [a.SerializeToString() for a in await process(server.port, sent)]
        assert theirs == ours
    assert native.holds.open_count == python.holds.open_count == {}
    assert _ejected(native) == _ejected(python)


def _counting(loads: list[float]) -> PickerContext:
    """:func:`~tests.support.picker_stream.picker` whose callers' outcomes all count."""
    ctx = picker(loads, table=PLAN)
    registry = CollectorRegistry()
    return PickerContext(
        ctx.router, ctx.holds, ctx.health, ctx.served, ctx.config, registry,
        HealthFeedback(ctx.router, ctx.health, lambda _context: "gateway", registry),
    )  # fmt: skip


def _python(
    ctx: PickerContext, sent: list[Any], status: int, served: int
) -> tuple[list[bytes], list[Any]]:
    """The Python picker's answers to ``sent`` then, once it picked, the response headers from
    the ``served`` entry; and every message sent."""
    caller: Any = CallerOf("ipv4:127.0.0.1:1", "")  # as the native transport names its caller
    stream = PickerStream(ctx, ctx.feedback.caller(caller))
    answers: list[Any] = []
    for message in sent:
        answers += stream.on_message(message)
    endpoints = [e for a in answers for e in _pick_of(a)]
    if endpoints and not stream.done:
        reply = m.response_headers(status, served=endpoints[min(served, len(endpoints) - 1)])
        answers += stream.on_message(reply)
        sent = [*sent, reply]
    stream.close()
    return [a.SerializeToString() for a in answers], sent


def _pick_of(answer: Any) -> list[str]:
    if answer.WhichOneof("response") != "request_headers":
        return []
    found = m.set_headers(answer).get(wire.DESTINATION)
    return found.split(",") if found else []


def _ejected(ctx: PickerContext) -> dict[str, list[str]]:
    return {name: sorted(state.outliers.ejected) for name, state in ctx.router.pools.items()}
