"""Every Table 6 statistic, measured on generated ``paper`` streams under both RAG scopes.

Tolerances: population rows are exact by construction (1e-3); thread rows ± 0.02 (sampling of
≈ 12k requests); prompt-size rows ± 5%; the 67% break ± 0.02. The per-key CV is a property of
the rate regime, checked in test_workloads_paper.py's low-rate test; here it must be Poisson-like
(≈ 1) at the flagship, where each key has many overlapping conversations.
"""

from __future__ import annotations

import pytest

from sim.workloads.paper import PaperWorkload
from sim.workloads.table6 import PAPER, measure


@pytest.mark.parametrize("scope", ["request", "conversation"])
def test_generated_stream_has_every_table6_statistic(scope: str) -> None:
    workload = PaperWorkload(rag_scope=scope)
    stats = measure(workload.stream(qps=100.0, duration_s=120.0, seed=3), workload.template_tokens)
    assert stats.keys == PAPER.keys
    assert stats.gini == pytest.approx(PAPER.gini, abs=1e-3)
    assert stats.largest_share < PAPER.largest_share
    assert stats.top4_share == pytest.approx(PAPER.top4_share, abs=1e-3)
    assert stats.multi_turn_share == pytest.approx(PAPER.multi_turn_share, abs=0.02)
    assert stats.requests_per_thread == pytest.approx(PAPER.requests_per_thread, abs=0.06)
    assert stats.mean_input_tokens == pytest.approx(PAPER.mean_input_tokens, rel=0.05)
    assert stats.preceding_share == pytest.approx(PAPER.preceding_share, abs=0.02)
    assert stats.context_share == pytest.approx(PAPER.context_share, abs=0.01)
    assert stats.rag_break == pytest.approx(PAPER.rag_break, abs=0.02)
    assert stats.median_key_cv == pytest.approx(1.0, abs=0.1)


def test_a_conversation_scoped_block_never_breaks_inside_a_conversation() -> None:
    workload = PaperWorkload(top_k=8, rag_scope="conversation")
    stream = workload.stream(qps=20.0, duration_s=600.0, seed=2)
    docs: dict[int, int] = {}
    for thread, doc in zip(stream.thread.tolist(), stream.rag_doc.tolist(), strict=True):
        assert docs.setdefault(thread, doc) == doc


def test_bad_shape_options_are_refused_naming_the_option() -> None:
    with pytest.raises(ValueError, match="rag_scope"):
        PaperWorkload(rag_scope="turn")
    with pytest.raises(ValueError, match="rag_same"):
        PaperWorkload(rag_docs=2)
    with pytest.raises(ValueError, match="answer_median"):
        PaperWorkload(answer_median=0)
