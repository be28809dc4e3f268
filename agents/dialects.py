"""Engine metric dialects: which generation of names an engine exports, and how to read each.

Every dialect maps to one :class:`EngineSample`. Names move between engine releases (vLLM
``gpu_cache_usage_perc`` → ``kv_cache_usage_perc`` in 0.9; SGLang ``sglang:`` → ``sglang_`` and
back), so ``auto`` detects the dialect on every scrape, newest names first, and each reader falls
back to the other generation's names of its engine family. The table of names per dialect is in
docs/components/agents.md.

Sums and means run over label sets: vLLM v1 has one series per data-parallel rank (label
``engine``), SGLang one per scheduler rank. Counts and capacities are summed; fractions (KV usage,
hit-rate gauges) are averaged.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final, TypeAlias

from agents.exposition import Exposition
from agents.histograms import SGLANG_TTFT, VLLM_TTFT, Histogram, read_histogram, sample_names
from cacheroute.v1 import agent_pb2

# The simulated engine server exports this gauge (value 1; labels free, e.g. engine, model_name,
# profile, speedup) beside vLLM v1 names. Any metric whose name starts with SIM_MARKER_PREFIX
# marks a simulated engine; SIM_MARKER is the one it should export.
SIM_MARKER: Final = "cacheroute_sim_info"
SIM_MARKER_PREFIX: Final = "cacheroute_sim_"

Dialect: TypeAlias = agent_pb2.MetricDialect.ValueType
EngineKind: TypeAlias = agent_pb2.EngineKind.ValueType

VLLM_V1: Final = agent_pb2.METRIC_DIALECT_VLLM_V1
VLLM_V0: Final = agent_pb2.METRIC_DIALECT_VLLM_V0
SGLANG_COLON: Final = agent_pb2.METRIC_DIALECT_SGLANG_COLON
SGLANG_UNDERSCORE: Final = agent_pb2.METRIC_DIALECT_SGLANG_UNDERSCORE
SIMULATED: Final = agent_pb2.METRIC_DIALECT_SIMULATED
LLAMACPP: Final = agent_pb2.METRIC_DIALECT_LLAMACPP
UNSPECIFIED: Final = agent_pb2.METRIC_DIALECT_UNSPECIFIED

# --dialect values. "sglang" covers both prefixes (the prefix is always read off the page).
CHOICES: Final = ("auto", "vllm_v1", "vllm_v0", "sglang", "sim", "llamacpp")

KIND: Final[dict[Dialect, EngineKind]] = {
    VLLM_V1: agent_pb2.ENGINE_KIND_VLLM,
    VLLM_V0: agent_pb2.ENGINE_KIND_VLLM,
    SGLANG_COLON: agent_pb2.ENGINE_KIND_SGLANG,
    SGLANG_UNDERSCORE: agent_pb2.ENGINE_KIND_SGLANG,
    SIMULATED: agent_pb2.ENGINE_KIND_SIMULATED,
    LLAMACPP: agent_pb2.ENGINE_KIND_LLAMACPP,
}

PROCESS_START: Final = "process_start_time_seconds"

_VLLM_NAMES: Final = (
    "num_requests_running",
    "num_requests_waiting",
    "kv_cache_usage_perc",
    "gpu_cache_usage_perc",
    "prefix_cache_hits",
    "prefix_cache_queries",
    "gpu_prefix_cache_hits",
    "gpu_prefix_cache_queries",
    "gpu_prefix_cache_hit_rate",
    "prompt_tokens",
    "generation_tokens",
    "cache_config_info",
)
_SGLANG_NAMES: Final = (
    "num_running_reqs",
    "num_queue_reqs",
    "token_usage",
    "cache_hit_rate",
    "cached_tokens",
    "prompt_tokens",
    "generation_tokens",
    "max_total_num_tokens",
    "page_size",
    "num_pages",
    "cache_config_info",
)
# llama.cpp's llama-server with --metrics: no KV-usage gauge, no cache-config info.
_LLAMACPP_NAMES: Final = (
    "requests_processing",
    "requests_deferred",
    "prompt_tokens",
    "prompt_tokens_cached",
    "tokens_predicted",
)


def _with_total(names: list[str]) -> frozenset[str]:
    return frozenset(names + [f"{n}_total" for n in names])


WANTED_NAMES: Final = _with_total(
    [f"vllm:{n}" for n in _VLLM_NAMES]
    + [f"sglang{sep}{n}" for sep in ":_" for n in _SGLANG_NAMES]
    + [f"llamacpp:{n}" for n in _LLAMACPP_NAMES]
    + [PROCESS_START]
) | frozenset(name for family in (VLLM_TTFT, *SGLANG_TTFT) for name in sample_names(family))


def wanted(name: str) -> bool:
    """Which metric names the agent reads (the rest of a page is skipped before parsing)."""
    return name in WANTED_NAMES or name.startswith(SIM_MARKER_PREFIX)


class UnrecognisedMetricsError(ValueError):
    """The page lacks the metrics of every known dialect, or of the one that was forced."""


@dataclass(frozen=True)
class EngineSample:
    """One scrape in engine-neutral terms. Counters are cumulative; None means not exported."""

    dialect: Dialect
    kind: EngineKind
    model: str
    running: float
    waiting: float
    kv_usage: float
    prefix_hits: float | None = None
    prefix_queries: float | None = None
    hit_rate_gauge: float | None = None
    prompt_tokens: float | None = None
    generation_tokens: float | None = None
    kv_capacity_tokens: int = 0
    block_size: int = 0
    process_start: float | None = None
    # Time to first token, cumulative (None: the engine exports no TTFT histogram).
    ttft: Histogram | None = None


def detect(expo: Exposition) -> Dialect:
    """The dialect of a page, newest names first; raises when no known engine metric is there."""
    if any(name.startswith(SIM_MARKER_PREFIX) for name in expo.names()):
        return SIMULATED
    if expo.has("vllm:kv_cache_usage_perc"):
        return VLLM_V1
    if expo.has("vllm:gpu_cache_usage_perc"):
        return VLLM_V0
    if expo.has("vllm:num_requests_running"):
        return VLLM_V1
    if expo.has("sglang:num_running_reqs"):
        return SGLANG_COLON
    if expo.has("sglang_num_running_reqs"):
        return SGLANG_UNDERSCORE
    if expo.has("llamacpp:requests_processing"):
        return LLAMACPP
    raise UnrecognisedMetricsError(
        "no vLLM, SGLang, llama.cpp or simulated-engine metrics on the page "
        "(is the engine still loading, or started without metrics?)"
    )


def decode(expo: Exposition, choice: str = "auto") -> EngineSample:
    """Read one page as ``choice`` (a --dialect value); ``auto`` detects it."""
    if choice == "auto":
        dialect = detect(expo)
    elif choice == "vllm_v1":
        dialect = VLLM_V1
    elif choice == "vllm_v0":
        dialect = VLLM_V0
    elif choice == "sim":
        dialect = SIMULATED
    elif choice == "llamacpp":
        dialect = LLAMACPP
    elif choice == "sglang":
        dialect = SGLANG_UNDERSCORE if expo.has("sglang_num_running_reqs") else SGLANG_COLON
    else:
        raise ValueError(f"dialect must be one of {CHOICES}, got {choice!r}")
    if dialect in (SGLANG_COLON, SGLANG_UNDERSCORE):
        return _read_sglang(expo, dialect)
    if dialect == LLAMACPP:
        return _read_llamacpp(expo)
    return _read_vllm(expo, dialect)


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


def _read_vllm(expo: Exposition, dialect: Dialect) -> EngineSample:
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


def _read_sglang(expo: Exposition, dialect: Dialect) -> EngineSample:
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


def _read_llamacpp(expo: Exposition) -> EngineSample:
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
