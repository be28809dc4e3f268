"""The paper's Table 6 statistics, computed on a generated ``paper`` stream.

One function measures every row from the stream itself (its requests, blocks and threads, not the
generator's parameters), so a test and the calibration can compare a workload option set with
the paper. The population rows (keys, Gini, top 4%, largest share) are properties of the
128,824-key population and are read from it; the per-key inter-arrival CV depends on the rate
regime (``sim.workloads.stats`` explains why) and is reported for the stream as generated.

The retrieved-block break: for consecutive requests *of one key* (whatever their conversation),
the exact prefix breaks at the retrieved block when their common leading blocks stop before the
retrieved block's first block, i.e. equal ``(template + context) // 16``: a different document
changes the block holding its first token (and every later one).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from sim.types import BLOCK_TOKENS
from sim.workloads.paper import PaperStream
from sim.workloads.paper_shape import CONTEXT_TOKENS
from sim.workloads.popularity import paper_active_set
from sim.workloads.stats import (
    consecutive_common_blocks,
    gini,
    key_interarrival_cv,
    top_share,
)


@dataclass(frozen=True)
class Table6:
    keys: int
    gini: float
    largest_share: float
    top4_share: float
    multi_turn_share: float
    requests_per_thread: float
    median_key_cv: float
    mean_input_tokens: float
    preceding_share: float  # tokens before the current turn / prompt tokens
    context_tokens: float
    context_share: float
    rag_break: float  # consecutive same-key pairs whose prefix breaks at the retrieved block

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# The paper's values (PAPER.md Table 6).
PAPER = Table6(
    keys=128_824, gini=0.756, largest_share=0.003, top4_share=0.47, multi_turn_share=0.808,
    requests_per_thread=2.64, median_key_cv=1.93, mean_input_tokens=1200.0, preceding_share=0.90,
    context_tokens=180.0, context_share=0.15, rag_break=0.67,
)  # fmt: skip


def rag_break(stream: PaperStream, template_tokens: int) -> float:
    """Share of consecutive same-key pairs whose common prefix stops at the retrieved block."""
    common = consecutive_common_blocks(stream.requests())
    head = (template_tokens + CONTEXT_TOKENS) // BLOCK_TOKENS
    return float(np.mean(common == head)) if len(common) else 0.0


def measure(stream: PaperStream, template_tokens: int) -> Table6:
    """Every Table 6 row of ``stream`` (``template_tokens``: the stream's template size)."""
    population = paper_active_set(None)
    requests = stream.requests()
    lengths = stream.thread_len.astype(np.float64)  # each request's whole thread, window or not
    cvs = key_interarrival_cv(requests, min_requests=10)
    prompt = stream.prompt_tokens.astype(np.float64)
    return Table6(
        keys=len(population.names),
        gini=gini(population.weights),
        largest_share=float(population.weights.max()),
        top4_share=top_share(population.weights, 0.04),
        multi_turn_share=float(np.mean(lengths >= 2)),
        requests_per_thread=float(1.0 / np.mean(1.0 / lengths)),
        median_key_cv=float(np.median(cvs)) if len(cvs) else float("nan"),
        mean_input_tokens=float(prompt.mean()),
        preceding_share=float(1.0 - stream.current_tokens.sum() / prompt.sum()),
        context_tokens=float(CONTEXT_TOKENS),
        context_share=float(CONTEXT_TOKENS * len(prompt) / prompt.sum()),
        rag_break=rag_break(stream, template_tokens),
    )
