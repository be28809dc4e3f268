"""The picker under Envoy's headers-only and buffered-body processing modes (synthetic streams,
a real Router with a real plan, holds and passive health)."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from dataplane.core.keys import hash_key
from dataplane.core.router import Router
from dataplane.core.table import RoutingTable
from dataplane.extproc.context import ExtProcConfig, PickerContext
from dataplane.extproc.modes import BodyMode, body_mode
from dataplane.extproc.stream import PickerStream
from dataplane.health.passive_health import PassiveHealth
from dataplane.requests.holds import Holds
from dataplane.telemetry.served_metrics import ServedMetrics
from tests.support import extproc as m
from tests.support.factories import small_plan
from tests.support.router import load_snapshot, warm_keys

NODES = [f"node-{i}" for i in range(4)]
ADDRESSES = {n: f"10.0.0.{i + 1}:8000" for i, n in enumerate(NODES)}


def context(table: RoutingTable) -> PickerContext:
    router = Router()
    router.apply_load(load_snapshot(dict.fromkeys(NODES, 0.0), seq=1, addresses=ADDRESSES))
    router.install_table("default", table, 1)
    registry = CollectorRegistry()
    return PickerContext(
        router, Holds(router), PassiveHealth(router, registry), ServedMetrics(registry),
        ExtProcConfig(), registry,
    )  # fmt: skip


def members(table: RoutingTable, key: str) -> list[str]:
    ids = table.destination_ids(hash_key(key))
    assert ids is not None
    return [ADDRESSES[n] for n in ids]


def held(ctx: PickerContext) -> float:
    return sum(ctx.router.pools["default"].view.loads)


@pytest.mark.parametrize(
    ("mode", "expected"),
    [("NONE", BodyMode.NONE), ("BUFFERED", BodyMode.BUFFERED),
     ("FULL_DUPLEX_STREAMED", BodyMode.STREAMED), ("BUFFERED_PARTIAL", BodyMode.STREAMED)],
)  # fmt: skip
def test_the_mode_is_what_envoy_announced(mode: str, expected: BodyMode) -> None:
    assert body_mode(m.with_body_mode(m.request_headers(), mode)) is expected
    assert body_mode(m.request_headers()) is BodyMode.STREAMED  # no protocol_config: the default


def test_headers_only_decides_at_the_headers_and_releases_at_the_response_headers() -> None:
    table = small_plan(nodes=4, keys=20)
    ctx = context(table)
    key = warm_keys(table)[0]
    stream = PickerStream(ctx)
    headers = m.with_body_mode(m.request_headers({"x-cacheroute-key": key}), "NONE")
    answers = stream.on_message(headers)
    assert len(answers) == 1 and m.picked(answers)[0] in members(table, key)
    assert held(ctx) == 1.0
    served = m.picked(answers)[0]
    [answer] = stream.on_message(m.response_headers(200, served=served))
    assert answer.WhichOneof("response") == "response_headers"
    stream.close()  # Envoy ends the stream: no body or trailer phase follows
    assert held(ctx) == 0.0


def test_headers_only_without_a_key_header_spreads_the_request_and_counts_nothing() -> None:
    table = small_plan(nodes=4, keys=20)
    ctx = context(table)
    stream = PickerStream(ctx)
    answers = stream.on_message(m.with_body_mode(m.request_headers(), "NONE"))
    assert m.picked(answers)[0] in ADDRESSES.values()  # answered at once: no body will come
    assert ctx.router.pools["default"].traffic.total == 0  # no key: not counted for planning


def test_buffered_lets_the_headers_through_and_picks_on_the_body() -> None:
    table = small_plan(nodes=4, keys=20)
    ctx = context(table)
    key = warm_keys(table)[1]
    stream = PickerStream(ctx)
    [first] = stream.on_message(m.with_body_mode(m.request_headers(), "BUFFERED"))
    assert first.WhichOneof("response") == "request_headers"
    assert not first.request_headers.response.HasField("header_mutation")
    answers = stream.on_message(m.request_body(m.chat_body(prompt_cache_key=key), True))
    assert len(answers) == 1  # one answer: the pick, no echo of the body
    assert m.buffered_pick(answers)[0] in members(table, key)
    stream.close()
    assert held(ctx) == 0.0


def test_buffered_with_a_key_header_picks_at_the_headers_and_passes_the_body() -> None:
    table = small_plan(nodes=4, keys=20)
    ctx = context(table)
    key = warm_keys(table)[0]
    stream = PickerStream(ctx)
    headers = m.with_body_mode(m.request_headers({"x-cacheroute-key": key}), "BUFFERED")
    assert m.picked(stream.on_message(headers))[0] in members(table, key)
    [answer] = stream.on_message(m.request_body(m.chat_body(), True))
    assert answer.WhichOneof("response") == "request_body"
    assert not answer.request_body.response.HasField("body_mutation")  # unchanged, no echo


def test_buffered_body_that_is_not_json_is_a_400() -> None:
    ctx = context(small_plan(nodes=4, keys=20))
    stream = PickerStream(ctx)
    stream.on_message(m.with_body_mode(m.request_headers(), "BUFFERED"))
    status, body = m.immediate(stream.on_message(m.request_body(b"{not json", True)))
    assert status == 400 and body["error"]["type"] == "invalid_request_error"
