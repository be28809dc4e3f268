"""What a scrape becomes: the dialect codes, the engine-neutral :class:`EngineSample`, its error.

Below both the dialect detection (:mod:`agents.dialects`) and the per-engine readers
(:mod:`agents.metric_readers`), so each can name a dialect without importing the other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, TypeAlias

from agents.histograms import Histogram
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

KIND: Final[dict[Dialect, EngineKind]] = {
    VLLM_V1: agent_pb2.ENGINE_KIND_VLLM,
    VLLM_V0: agent_pb2.ENGINE_KIND_VLLM,
    SGLANG_COLON: agent_pb2.ENGINE_KIND_SGLANG,
    SGLANG_UNDERSCORE: agent_pb2.ENGINE_KIND_SGLANG,
    SIMULATED: agent_pb2.ENGINE_KIND_SIMULATED,
    LLAMACPP: agent_pb2.ENGINE_KIND_LLAMACPP,
}

PROCESS_START: Final = "process_start_time_seconds"


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
