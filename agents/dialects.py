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

from typing import Final

from agents.engine_sample import (
    KIND,
    LLAMACPP,
    PROCESS_START,
    SGLANG_COLON,
    SGLANG_UNDERSCORE,
    SIM_MARKER,
    SIM_MARKER_PREFIX,
    SIMULATED,
    UNSPECIFIED,
    VLLM_V0,
    VLLM_V1,
    Dialect,
    EngineKind,
    EngineSample,
    UnrecognisedMetricsError,
)
from agents.exposition import Exposition
from agents.histograms import SGLANG_TTFT, VLLM_TTFT, sample_names
from agents.metric_readers import read_llamacpp, read_sglang, read_vllm

__all__ = [
    "CHOICES",
    "KIND",
    "LLAMACPP",
    "PROCESS_START",
    "SGLANG_COLON",
    "SGLANG_UNDERSCORE",
    "SIMULATED",
    "SIM_MARKER",
    "SIM_MARKER_PREFIX",
    "UNSPECIFIED",
    "VLLM_V0",
    "VLLM_V1",
    "WANTED_NAMES",
    "Dialect",
    "EngineKind",
    "EngineSample",
    "UnrecognisedMetricsError",
    "decode",
    "detect",
    "wanted",
]

# --dialect values. "sglang" covers both prefixes (the prefix is always read off the page).
CHOICES: Final = ("auto", "vllm_v1", "vllm_v0", "sglang", "sim", "llamacpp")

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
        return read_sglang(expo, dialect)
    if dialect == LLAMACPP:
        return read_llamacpp(expo)
    return read_vllm(expo, dialect)
