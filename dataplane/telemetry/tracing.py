"""Optional OpenTelemetry spans of routed requests (the ``otel`` extra; off by default).

On only when the OpenTelemetry SDK is installed (``pip install 'cacheroute[otel]'``) and the
standard ``OTEL_TRACES_EXPORTER`` names an exporter (``otlp``, ``console``); every other setting
comes from the standard ``OTEL_*`` variables (``OTEL_SERVICE_NAME``, default
``cacheroute-router``; ``OTEL_EXPORTER_OTLP_ENDPOINT``; the sampler). ``OTEL_SDK_DISABLED=true``
turns it off again. Each request answered through a door (the HTTP front, the Endpoint Picker)
gets one span, ``cacheroute.route``, from its arrival to the answer's end, a child of the
caller's W3C ``traceparent``/``tracestate`` when given, with the decision as attributes
(``cacheroute.door``, ``.pool``, ``.node``, ``.reason``, ``.version``, ``.key_source``). The spans
ride on :class:`~dataplane.telemetry.served_metrics.AnswerTimer`, the per-answer object both doors
already keep, so the doors need no code of their own for it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import structlog

from dataplane.core.router import RouteOutcome

log = structlog.get_logger("dataplane.telemetry.tracing")
SPAN_NAME = "cacheroute.route"


class RequestSpans:
    """Starts and ends the per-request spans on one OpenTelemetry tracer."""

    def __init__(self, tracer: Any) -> None:
        from opentelemetry.propagate import extract  # noqa: PLC0415 - the extra's import

        self._tracer = tracer
        self._extract = extract

    def start(
        self, headers: Mapping[str, str], attributes: Mapping[str, str], start_ns: int
    ) -> Any:
        context = None
        if "traceparent" in headers:
            context = self._extract({name.lower(): value for name, value in headers.items()})
        return self._tracer.start_span(
            SPAN_NAME, context=context, start_time=start_ns, attributes=dict(attributes)
        )

    @staticmethod
    def end(span: Any, *, completed: bool) -> None:
        if not completed:
            from opentelemetry.trace import Status, StatusCode  # noqa: PLC0415

            span.set_status(Status(StatusCode.ERROR, "not completed"))
        span.end()


def decision_attributes(outcome: RouteOutcome, key_source: str) -> dict[str, str]:
    """The span attributes of a decision (module docstring)."""
    return {
        "cacheroute.node": outcome.node_id,
        "cacheroute.reason": str(outcome.reason),
        "cacheroute.version": outcome.version,
        "cacheroute.key_source": key_source,
    }


def spans_from_environment(environ: Mapping[str, str] | None = None) -> RequestSpans | None:
    """The spans the ``OTEL_*`` variables ask for, or None (module docstring)."""
    env = os.environ if environ is None else environ
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if not exporter or exporter == "none" or env.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return None
    try:
        from opentelemetry.sdk.resources import Resource  # noqa: PLC0415
        from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
        from opentelemetry.sdk.trace.export import (  # noqa: PLC0415
            BatchSpanProcessor,
            ConsoleSpanExporter,
            SpanExporter,
        )
    except ImportError:
        log.warning("OTEL_TRACES_EXPORTER is set but the otel extra is not installed; no spans")
        return None
    span_exporter: SpanExporter
    if exporter == "console":
        span_exporter = ConsoleSpanExporter()
    else:
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (  # noqa: PLC0415
                OTLPSpanExporter,
            )
        except ImportError:
            log.warning("no OTLP exporter installed; no spans", exporter=exporter)
            return None
        span_exporter = OTLPSpanExporter()
    service = env.get("OTEL_SERVICE_NAME", "cacheroute-router")
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(BatchSpanProcessor(span_exporter))
    log.info("tracing on", exporter=exporter, service=service)
    return RequestSpans(provider.get_tracer("cacheroute.dataplane"))
