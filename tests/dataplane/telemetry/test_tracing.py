"""Optional OpenTelemetry spans: off unless asked for; one span per request through each door,
a child of the caller's traceparent, checked with the SDK's in-memory exporter."""

from __future__ import annotations

import aiohttp
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from prometheus_client import CollectorRegistry

from cacheroute_state import Stores
from dataplane.core.router import Router
from dataplane.extproc.context import ExtProcConfig, PickerContext
from dataplane.extproc.stream import PickerStream
from dataplane.health.passive_health import PassiveHealth
from dataplane.requests.holds import Holds
from dataplane.telemetry.served_metrics import ServedMetrics
from dataplane.telemetry.tracing import SPAN_NAME, RequestSpans, spans_from_environment
from tests.dataplane.http_front.conftest import front_url, running_front
from tests.support import extproc as m
from tests.support.engines import recording_engine
from tests.support.router import load_snapshot

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


def in_memory() -> tuple[RequestSpans, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return RequestSpans(provider.get_tracer("test")), exporter


def test_tracing_is_off_unless_an_exporter_is_named() -> None:
    assert spans_from_environment({}) is None
    assert spans_from_environment({"OTEL_TRACES_EXPORTER": "none"}) is None
    disabled = {"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "true"}
    assert spans_from_environment(disabled) is None
    assert isinstance(spans_from_environment({"OTEL_TRACES_EXPORTER": "console"}), RequestSpans)


def test_a_picker_request_is_one_span_child_of_the_callers_trace() -> None:
    spans, exporter = in_memory()
    router = Router()
    router.apply_load(load_snapshot({"node-0": 0.0, "node-1": 0.0}, seq=1))
    registry = CollectorRegistry()
    served = ServedMetrics(registry, spans)
    ctx = PickerContext(
        router, Holds(router), PassiveHealth(router, registry), served, ExtProcConfig(), registry
    )
    stream = PickerStream(ctx)
    headers = {"x-session-id": "s1", "traceparent": TRACEPARENT}
    stream.on_message(m.request_headers(headers, end_of_stream=True))
    assert exporter.get_finished_spans() == ()  # open until the answer ends
    stream.on_message(m.response_headers(200, end_of_stream=True))
    [span] = exporter.get_finished_spans()
    assert span.name == SPAN_NAME
    assert span.parent is not None and format(span.context.trace_id, "032x") == TRACE_ID
    attributes = dict(span.attributes or {})
    assert attributes["cacheroute.door"] == "extproc"
    assert attributes["cacheroute.key_source"] == "x-session-id"
    assert attributes["cacheroute.node"] in ("node-0", "node-1")
    assert span.status.status_code != StatusCode.ERROR
    abandoned = PickerStream(ctx)
    abandoned.on_message(m.request_headers({"x-session-id": "s2"}, end_of_stream=True))
    abandoned.close()  # the client went away
    last = exporter.get_finished_spans()[-1]
    assert last.parent is None  # no traceparent: a root span
    assert last.status.status_code == StatusCode.ERROR


@pytest.mark.redis
async def test_an_http_front_request_is_one_span_with_the_decision(
    redis_url: str, stores: Stores
) -> None:
    spans, exporter = in_memory()
    async with (
        recording_engine() as (address, _),
        running_front(redis_url, stores, [address]) as server,
        aiohttp.ClientSession() as http,
    ):
        server.served.spans = spans  # the front shares the server's ServedMetrics
        body = {"model": "m", "prompt": "p", "prompt_cache_key": "tenant-1"}
        async with http.post(
            f"{front_url(server)}/v1/completions", json=body, headers={"traceparent": TRACEPARENT}
        ) as answer:
            assert answer.status == 200
        [span] = exporter.get_finished_spans()
        assert format(span.context.trace_id, "032x") == TRACE_ID
        attributes = dict(span.attributes or {})
        assert (attributes["cacheroute.door"], attributes["cacheroute.node"]) == ("http", "node-0")
        assert attributes["cacheroute.key_source"] == "prompt_cache_key"
