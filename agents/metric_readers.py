"""One reader per engine family: a page of metrics, in its detected dialect, to an EngineSample.

Each reader falls back to the other generation's names of its family; sums and means run over
label sets (see :mod:`agents.dialects`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from agents.engine_sample import (
    KIND,
    LLAMACPP,
    PROCESS_START,
    SGLANG_UNDERSCORE,
    SIM_MARKER,
    VLLM_V0,
    Dialect,
    EngineSample,
    UnrecognisedMetricsError,
)
from agents.exposition import Exposition
from agents.histograms import VLLM_TTFT, read_histogram
from cacheroute.v1 import agent_pb2


def _required(value: float | None, name: str, dialect: Dialect) -> float:
    if value is None:
        label = agent_pb2.MetricDialect.Name(dialect)
        raise UnrecognisedMetricsError(f"{label}: metric {name} is missing from the page")
    return value


def _first(read: Callable[[str], float | None], names: tuple[str, ...]) -> float | None:
    """The first of ``names`` that is present, read with ``read`` (e.g. ``expo.mean``)."""
    for name in names:
        value = read(name)
        if value is not None:
            return value
    return None


def read_vllm(expo: Exposition, dialect: Dialect) -> EngineSample:
    new, old = "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"
    kv_names = (old, new) if dialect == VLLM_V0 else (new, old)
    hit_prefixes = ("vllm:gpu_prefix_cache", "vllm:prefix_cache")
    if dialect != VLLM_V0:
        hit_prefixes = hit_prefixes[::-1]
    hits, queries = _counter_pair(expo, [(f"{p}_hits", f"{p}_queries") for p in hit_prefixes])
    capacity, block = _vllm_capacity(expo)
    running = expo.sum("vllm:num_requests_running")
    return EngineSample(
        dialect=dialect,
        kind=KIND[dialect],
        model=_model(expo, ("vllm:num_requests_running", SIM_MARKER)),
        running=_required(running, "vllm:num_requests_running", dialect),
        waiting=_required(
            expo.sum("vllm:num_requests_waiting"), "vllm:num_requests_waiting", dialect
        ),
        kv_usage=_fraction(_required(_first(expo.mean, kv_names), kv_names[0], dialect)),
        prefix_hits=hits,
        prefix_queries=queries,
        hit_rate_gauge=expo.mean("vllm:gpu_prefix_cache_hit_rate"),
        prompt_tokens=expo.counter("vllm:prompt_tokens"),
        generation_tokens=expo.counter("vllm:generation_tokens"),
        kv_capacity_tokens=capacity,
        block_size=block,
        process_start=expo.sum(PROCESS_START),
        ttft=read_histogram(expo, VLLM_TTFT),
    )


def read_sglang(expo: Exposition, dialect: Dialect) -> EngineSample:
    p = "sglang_" if dialect == SGLANG_UNDERSCORE else "sglang:"
    hits, queries = _counter_pair(expo, [(f"{p}cached_tokens", f"{p}prompt_tokens")])
    capacity, block = _sglang_capacity(expo, p)
    return EngineSample(
        dialect=dialect,
        kind=KIND[dialect],
        model=_model(expo, (f"{p}num_running_reqs", f"{p}prompt_tokens_total")),
        running=_required(expo.sum(f"{p}num_running_reqs"), f"{p}num_running_reqs", dialect),
        waiting=_required(expo.sum(f"{p}num_queue_reqs"), f"{p}num_queue_reqs", dialect),
        kv_usage=_fraction(_required(expo.mean(f"{p}token_usage"), f"{p}token_usage", dialect)),
        prefix_hits=hits,
        prefix_queries=queries,
        hit_rate_gauge=expo.mean(f"{p}cache_hit_rate"),
        prompt_tokens=expo.counter(f"{p}prompt_tokens"),
        generation_tokens=expo.counter(f"{p}generation_tokens"),
        kv_capacity_tokens=capacity,
        block_size=block,
        process_start=expo.sum(PROCESS_START),
        ttft=read_histogram(expo, f"{p}time_to_first_token_seconds"),
    )


def read_llamacpp(expo: Exposition) -> EngineSample:
    """llama-server: processing/deferred requests; prompt tokens cached out of all prompt tokens.

    Its ``prompt_tokens_total`` counts the prompt tokens it *processed*, cached ones excluded (the
    HELP text of the pinned build says so, and ``tests/data/metrics/llamacpp.txt`` is captured
    from it), so the queries, and the prompt tokens, are cached + processed: reading processed as
    the queries turned a true 50% hit into 100%. It exports no KV-usage gauge and no cache size
    (``/slots`` has per-slot state), so kv_usage is 0 and the capacity unknown.
    """
    p = "llamacpp:"
    hits, processed = expo.counter(f"{p}prompt_tokens_cached"), expo.counter(f"{p}prompt_tokens")
    queries = None if hits is None or processed is None else hits + processed
    prompt = None if processed is None else processed + (hits or 0.0)
    return EngineSample(
        dialect=LLAMACPP,
        kind=KIND[LLAMACPP],
        model=_model(expo, (f"{p}requests_processing",)),
        running=_required(expo.sum(f"{p}requests_processing"), f"{p}requests_processing", LLAMACPP),
        waiting=_required(expo.sum(f"{p}requests_deferred"), f"{p}requests_deferred", LLAMACPP),
        kv_usage=0.0,
        prefix_hits=None if queries is None else hits,
        prefix_queries=queries,
        prompt_tokens=prompt,
        generation_tokens=expo.counter(f"{p}tokens_predicted"),
        process_start=expo.sum(PROCESS_START),
    )


def _counter_pair(
    expo: Exposition, candidates: list[tuple[str, str]]
) -> tuple[float | None, float | None]:
    """The first (hits, queries) counter pair of which both are exported."""
    for hits_name, queries_name in candidates:
        hits, queries = expo.counter(hits_name), expo.counter(queries_name)
        if hits is not None and queries is not None:
            return hits, queries
    return None, None


def _vllm_capacity(expo: Exposition) -> tuple[int, int]:
    """(KV tokens, block size) from ``vllm:cache_config_info``, summed over engine ranks."""
    capacity, block = 0, 0
    for series in expo.series("vllm:cache_config_info"):
        size = _int_label(series.labels, "block_size")
        tokens = _int_label(series.labels, "kv_cache_size_tokens")
        if tokens == 0:
            tokens = _int_label(series.labels, "num_gpu_blocks") * size
        capacity += tokens
        block = block or size
    return capacity, block


def _sglang_capacity(expo: Exposition, p: str) -> tuple[int, int]:
    info = expo.series(f"{p}cache_config_info")
    page = _int(expo.mean(f"{p}page_size"))
    if not page and info:
        page = _int_label(info[0].labels, "page_size")
    capacity = _int(expo.sum(f"{p}max_total_num_tokens"))
    if not capacity and page:
        pages = _int(expo.sum(f"{p}num_pages")) or sum(
            _int_label(s.labels, "num_pages") for s in info
        )
        capacity = pages * page
    return capacity, page


def _model(expo: Exposition, names: tuple[str, ...]) -> str:
    for label in ("model_name", "model"):
        for name in names:
            for value in expo.label_values(name, label):
                if value:
                    return value
    return ""


def _fraction(value: float) -> float:
    return min(max(value, 0.0), 1.0)


def _int(value: float | None) -> int:
    return int(value) if value is not None and math.isfinite(value) and value > 0 else 0


def _int_label(labels: Mapping[str, str], name: str) -> int:
    raw = labels.get(name, "")
    try:
        return max(int(float(raw)), 0)
    except (TypeError, ValueError):
        return 0  # "None" when vLLM has not sized the cache yet
