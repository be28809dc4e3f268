"""``/metrics`` of one simulated engine: vLLM v1 names plus the simulated-engine marker.

A custom collector reads the engine's state at scrape time, so nothing is updated on the request
path. Names and labels follow vLLM v1 (``vllm/v1/metrics/loggers.py``; CALIBRATION.md §2), with
one series per engine (label ``engine="0"``, the data-parallel rank) and ``model_name``:

* ``vllm:num_requests_running`` / ``vllm:num_requests_waiting`` (gauges): prefilling + decoding
  requests / queued requests not yet admitted;
* ``vllm:kv_cache_usage_perc`` (gauge, 0-1): blocks held by running requests over capacity;
* ``vllm:prefix_cache_queries_total`` / ``vllm:prefix_cache_hits_total`` (counters): prompt tokens
  / cached prompt tokens;
* ``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``,
  ``vllm:request_success_total{finished_reason="length"}`` (counters);
* ``vllm:time_to_first_token_seconds`` (histogram, vLLM's buckets): wall-clock TTFT;
* ``vllm:cache_config_info`` (1): labels ``block_size``, ``num_gpu_blocks``, ...;
* ``process_start_time_seconds``: when this engine started (unix seconds);
* ``cacheroute_sim_info`` (1), the marker (``agents.dialects.SIM_MARKER``): labels ``engine``,
  ``model_name``, ``profile``, ``speedup``;
* ``cacheroute_sim_step_lag_seconds`` and ``cacheroute_sim_resyncs_total``: how late the step
  loop runs behind the wall clock, and how often it gave up catching up (a starved CPU).

``process_start_time_seconds`` is the *engine's* start, not the process's, so that the agent's
restart detection works per engine when several share a process. A prefix-cache reset
(``POST /reset_prefix_cache``) keeps every counter.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from agents.dialects import SIM_MARKER
from simengine.realtime_engine import SimEngine


class EngineCollector(Collector):
    """Yields the engine's metric families at collect time."""

    def __init__(self, engine: SimEngine, model: str) -> None:
        self._engine = engine
        self._model = model

    def collect(self) -> Iterator[Metric]:
        engine, stats = self._engine, self._engine.stats
        names = ["engine", "model_name"]
        labels = ["0", self._model]

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            family = GaugeMetricFamily(name, doc, labels=names)
            family.add_metric(labels, value)
            return family

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            family = CounterMetricFamily(name, doc, labels=names)
            family.add_metric(labels, value)
            return family

        yield gauge(
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            engine.running,
        )
        yield gauge(
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
            engine.waiting,
        )
        yield gauge(
            "vllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage.",
            engine.kv_usage,
        )
        yield counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
            stats.prefix_queries,
        )
        yield counter(
            "vllm:prefix_cache_hits",
            "Prefix cache hits, in terms of number of cached tokens.",
            stats.prefix_hits,
        )
        yield counter(
            "vllm:prompt_tokens", "Number of prefill tokens processed.", stats.prompt_tokens
        )
        yield counter(
            "vllm:generation_tokens",
            "Number of generation tokens processed.",
            stats.generation_tokens,
        )
        success = CounterMetricFamily(
            "vllm:request_success",
            "Count of successfully processed requests.",
            labels=[*names, "finished_reason"],
        )
        success.add_metric([*labels, "length"], stats.requests_finished)
        yield success
        ttft = HistogramMetricFamily(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            labels=names,
        )
        ttft.add_metric(labels, stats.cumulative_buckets(), sum_value=stats.ttft_sum)
        yield ttft
        profile = engine.profile
        config = GaugeMetricFamily(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            labels=["block_size", "enable_prefix_caching", "engine", "num_gpu_blocks"],
        )
        config.add_metric([str(profile.block_tokens), "True", "0", str(profile.kv_blocks)], 1.0)
        yield config
        yield GaugeMetricFamily(
            "process_start_time_seconds",
            "Start time of this simulated engine since unix epoch in seconds.",
            value=engine.started_at_unix,
        )
        lag = GaugeMetricFamily(
            "cacheroute_sim_step_lag_seconds",
            "How late (wall seconds) the latest engine step started: CPU starvation shows here.",
            labels=["engine"],
        )
        lag.add_metric(["0"], stats.lag_s)
        yield lag
        slowdown = GaugeMetricFamily(
            "cacheroute_sim_slowdown",
            "Step-time multiplier injected with POST /admin/slowdown (1: normal).",
            labels=["engine"],
        )
        slowdown.add_metric(["0"], engine.slowdown)
        yield slowdown
        resyncs = CounterMetricFamily(
            "cacheroute_sim_resyncs",
            "Times the engine fell more than max_lag_s behind the wall clock and skipped ahead.",
            labels=["engine"],
        )
        resyncs.add_metric(["0"], stats.resyncs)
        yield resyncs
        marker = GaugeMetricFamily(
            SIM_MARKER,
            "CacheRoute simulated engine (vLLM v1 metric names); the agent detects the SIMULATED "
            "dialect from this metric.",
            labels=["engine", "model_name", "profile", "speedup"],
        )
        marker.add_metric(["0", self._model, profile.name, f"{engine.speedup:g}"], 1.0)
        yield marker


class EngineMetrics:
    """The engine's own registry (several engines share one process without clashes)."""

    def __init__(self, engine: SimEngine, model: str) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(EngineCollector(engine, model))

    def render(self) -> bytes:
        return generate_latest(self.registry)
