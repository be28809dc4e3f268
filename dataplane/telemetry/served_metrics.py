"""What the router measures of the requests it serves, whichever door they came through.

The HTTP front sees every byte of an answer; the Envoy Endpoint Picker sees what Envoy streams
to it. Both report here, labelled by ``door`` (``http``, ``extproc``), pool and model:

* ``cacheroute_router_key_source_total{door,source}``: which rule gave the routing key (a key
  header's name, ``prompt_cache_key``, ``user``, ``derived``, or ``none`` for a bodiless request);
* ``cacheroute_router_ttft_seconds``: request arrival → the first byte of the answer's body;
  also kept per destination node (when the door sets :attr:`AnswerTimer.node`) for the traffic
  reports (:mod:`dataplane.telemetry.node_ttft`);
* ``cacheroute_router_inter_token_seconds``: the gaps between the answer's body chunks after the
  first (engines flush a streamed answer per token or per few tokens, so a chunk gap is the
  inter-token latency as the client sees it);
* ``cacheroute_router_request_seconds``: arrival → the answer's end;
* ``cacheroute_router_cached_tokens``: ``usage.prompt_tokens_details.cached_tokens`` per answer
  that reports it (the last one in the body: a stream's usage chunk, or the JSON answer's);
* delivered affinity (follow-ups on the turn-1 node, their cached fraction, fleet load CoV):
  :mod:`dataplane.telemetry.affinity`, fed by answers whose door named the serving node.

The model label is capped: the first :data:`MAX_MODELS` distinct names are kept (each cut to 64
characters), every later one is ``other``, so a client inventing model names cannot grow the
metrics without bound.

With tracing on (:mod:`dataplane.telemetry.tracing`, the ``otel`` extra) each timer also carries the
request's span, ended with it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

from dataplane.telemetry.affinity import DeliveredAffinity
from dataplane.telemetry.label_cache import LabelCache
from dataplane.telemetry.node_ttft import BOUNDS, NodeTtftCounts
from dataplane.telemetry.tracing import RequestSpans

MAX_MODELS = 32
MAX_MODEL_LABEL = 64
TAIL_BYTES = 2048
_CACHED = re.compile(rb'"cached_tokens"\s*:\s*(\d+)')
_LATENCY_BUCKETS = BOUNDS  # the per-node counts of traffic reports share them
_GAP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0)
_TOKEN_BUCKETS = (0, 16, 64, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)


class ServedMetrics:
    """The histograms and the key-source counter (module docstring), on the router's registry."""

    def __init__(self, registry: CollectorRegistry, spans: RequestSpans | None = None) -> None:
        self.spans = spans
        self.affinity = DeliveredAffinity(registry)
        labels = ["door", "pool", "model"]
        self.key_sources = Counter(
            "cacheroute_router_key_source",
            "Requests by the rule that gave their routing key, per door.",
            ["door", "source"],
            registry=registry,
        )
        self.ttft = Histogram(
            "cacheroute_router_ttft_seconds",
            "Time to first token measured at the router: arrival to the answer's first body byte.",
            labels,
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.inter_token = Histogram(
            "cacheroute_router_inter_token_seconds",
            "Gaps between an answer's body chunks after the first (inter-token latency).",
            labels,
            buckets=_GAP_BUCKETS,
            registry=registry,
        )
        self.request = Histogram(
            "cacheroute_router_request_seconds",
            "End-to-end time of answered requests: arrival to the answer's end.",
            labels,
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.cached_tokens = Histogram(
            "cacheroute_router_cached_tokens",
            "Prompt tokens served from the engine's prefix cache per answer "
            "(usage.prompt_tokens_details.cached_tokens).",
            labels,
            buckets=_TOKEN_BUCKETS,
            registry=registry,
        )
        self._models: set[str] = set()
        self._children = LabelCache()
        self.node_ttft = NodeTtftCounts()

    def model_label(self, model: str) -> str:
        """``model`` (cut), or ``other`` once MAX_MODELS names are known (module docstring)."""
        model = model[:MAX_MODEL_LABEL] or "unknown"
        if model in self._models:
            return model
        if len(self._models) >= MAX_MODELS:
            return "other"
        self._models.add(model)
        return model

    def key_source(self, door: str, source: str) -> None:
        self.child(self.key_sources, (door, source)).inc()

    def child(self, metric: Any, labels: tuple[str, ...]) -> Any:
        """``metric.labels(*labels)``, looked up once (:mod:`.label_cache`; the label sets are
        bounded by ``MAX_MODELS``)."""
        return self._children(metric, *labels)

    def timer(
        self,
        door: str,
        pool: str,
        model: str,
        started: float,
        headers: Mapping[str, str] | None = None,
        attributes: Mapping[str, str] | None = None,
    ) -> AnswerTimer:
        """A timer for one answer; ``started`` is its arrival on ``time.perf_counter``.

        With tracing on, the request's span starts (at ``started``) as a child of ``headers``'
        trace context, with ``attributes``.
        """
        timer = AnswerTimer(self, (door, pool, self.model_label(model)), started)
        if self.spans is not None:
            start_ns = time.time_ns() - int((time.perf_counter() - started) * 1e9)
            tags = {"cacheroute.door": door, "cacheroute.pool": pool, **(attributes or {})}
            timer.span = self.spans.start(headers or {}, tags, start_ns)
        return timer


class AnswerTimer:
    """Times one answer's body as it passes: feed :meth:`chunk`, then :meth:`finish` once."""

    __slots__ = (
        "_first", "_labels", "_last", "_metrics", "_started", "_tail", "_target", "finished",
        "node", "span",
    )  # fmt: skip

    def __init__(self, metrics: ServedMetrics, labels: tuple[str, str, str], started: float):
        self._metrics = metrics
        self._labels = labels
        self._started = started
        self._first = 0.0
        self._last = 0.0
        self._tail = b""
        self._target: tuple[int, str] | None = None
        self.finished = False
        self.span: Any = None
        self.node = ""  # the node whose answer this is, once the door knows (per-node TTFT)

    def serving(self, key_hash: int, node_id: str) -> None:
        """The node answering the request's key (for the delivered-affinity numbers)."""
        self._target = (key_hash, node_id)

    def chunk(self, data: bytes, now: float | None = None) -> None:
        if not data:
            return
        now = time.perf_counter() if now is None else now
        if self._first == 0.0:
            self._first = now
            self._metrics.child(self._metrics.ttft, self._labels).observe(now - self._started)
            self._metrics.node_ttft.observe(self._labels[1], self.node, now - self._started)
        else:
            self._metrics.child(self._metrics.inter_token, self._labels).observe(now - self._last)
        self._last = now
        self._tail = (self._tail + data)[-TAIL_BYTES:]

    def finish(self, now: float | None = None, *, completed: bool = True) -> None:
        """The answer ended (``completed`` False: broken or abandoned, not timed end to end)."""
        if self.finished:
            return
        self.finished = True
        if self.span is not None:
            RequestSpans.end(self.span, completed=completed)
        if not completed:
            return
        now = time.perf_counter() if now is None else now
        self._metrics.child(self._metrics.request, self._labels).observe(now - self._started)
        found = _CACHED.findall(self._tail)
        if found:
            self._metrics.child(self._metrics.cached_tokens, self._labels).observe(int(found[-1]))
        if self._target is not None:
            door, pool = self._labels[0], self._labels[1]
            self._metrics.affinity.answered(door, pool, *self._target, self._tail)
