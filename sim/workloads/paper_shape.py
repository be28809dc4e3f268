"""The named options of the paper workload's prompt and conversation model, and their laws.

The sizes and distributions of :mod:`sim.workloads.paper` (Table 6 and the module doc there) as
validated options with their defaults, apart from the generator so that the workloads that reuse
the paper's laws (``single_turn``, ``tenants``) and the fit read them without the stream.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import numpy.typing as npt

from sim.workloads.blocks import I64

TEMPLATE_TOKENS = 96
CONTEXT_TOKENS = 180
RAG_DOCS = 32
RAG_SAME = 0.33  # P(two requests of a key retrieve the same document) = 1 - 0.67
RAG_MEAN_TOKENS = 218
CURRENT = (90.0, 0.75, 4, 1024)  # lognormal median, sigma, min, max (tokens)
ANSWER = (129.0, 0.7, 8, 1024)
THINK_MEDIAN_S = 131.0
THINK_SIGMA = 0.98


class PaperShapeError(ValueError):
    """A ``paper`` workload option out of its domain."""


@dataclass(frozen=True)
class PaperShape:
    """The named options of the prompt and conversation model (defaults: see the module doc).

    ``rag_scope`` is where the retrieved block is drawn: ``"request"`` (a new draw every turn,
    so a changed document also breaks the reuse of the history behind it) or ``"conversation"``
    (one draw per thread, fixed across its turns). Both readings of Table 6's 67% are possible;
    the statistic is measured on consecutive requests *of a key* either way.
    """

    template_tokens: int = TEMPLATE_TOKENS
    rag_scope: str = "request"
    rag_docs: int = RAG_DOCS
    rag_same: float = RAG_SAME
    rag_tokens: int = RAG_MEAN_TOKENS
    think_median_s: float = THINK_MEDIAN_S
    think_sigma: float = THINK_SIGMA
    answer_median: float = ANSWER[0]
    answer_sigma: float = ANSWER[1]

    def __post_init__(self) -> None:
        if self.rag_scope not in ("request", "conversation"):
            raise PaperShapeError(
                f"rag_scope must be 'request' or 'conversation', got {self.rag_scope!r}"
            )
        if self.template_tokens < 1 or self.rag_tokens < 2:
            raise PaperShapeError("template_tokens must be >= 1 and rag_tokens >= 2")
        if not 1.0 / self.rag_docs <= self.rag_same < 1.0:
            raise PaperShapeError(
                f"rag_same must be in [1/rag_docs, 1): {self.rag_docs} documents cannot repeat "
                f"with probability {self.rag_same}"
            )
        for name in ("think_median_s", "think_sigma", "answer_median", "answer_sigma"):
            if not getattr(self, name) > 0:
                raise PaperShapeError(f"{name} must be > 0")

    @property
    def answer(self) -> tuple[float, float, int, int]:
        return (self.answer_median, self.answer_sigma, ANSWER[2], ANSWER[3])

    def rag_p(self) -> npt.NDArray[np.float64]:
        """Zipf document probabilities with Σ p² = ``rag_same``."""
        return _rag_probabilities(self.rag_docs, self.rag_same)


@functools.cache
def _rag_probabilities(n: int, same: float) -> npt.NDArray[np.float64]:
    p = np.arange(1, n + 1, dtype=np.float64) ** -_zipf_exponent(n, same)
    p /= p.sum()
    p.setflags(write=False)
    return p


def _zipf_exponent(n: int, same: float) -> float:
    """Zipf exponent s over n items with Σ p² = ``same`` (bisection; Σ p² rises with s)."""
    ranks = np.arange(1, n + 1, dtype=np.float64)
    lo, hi = 0.0, 20.0
    for _ in range(60):
        mid = (lo + hi) / 2
        p = ranks**-mid
        p /= p.sum()
        lo, hi = (mid, hi) if float(np.sum(p * p)) < same else (lo, mid)
    return (lo + hi) / 2


RAG_EXPONENT = _zipf_exponent(RAG_DOCS, RAG_SAME)


def lognormal_tokens(rng: np.random.Generator, law: tuple[float, float, int, int], n: int) -> I64:
    """``n`` integer lengths from a (median, sigma, min, max) lognormal law."""
    median, sigma, lo, hi = law
    return np.clip(np.rint(median * np.exp(sigma * rng.standard_normal(n))), lo, hi).astype(
        np.int64
    )


def shape_options(options: Any) -> dict[str, Any]:
    """The :class:`PaperShape` fields of a workload object (``paper``, ``whales``)."""
    return {f.name: getattr(options, f.name) for f in fields(PaperShape)}
