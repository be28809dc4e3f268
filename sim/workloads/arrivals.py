"""Aggregate arrival processes: Poisson, Gamma renewal with a given CV, bootstrap of real gaps.

The paper replays its workload under three arrival processes (Poisson; Gamma with CV 1.9; a block
bootstrap of real gaps). These fix *when* requests arrive in aggregate; a workload then decides
*who* arrives at each instant (key, conversation thread), so the aggregate process is exactly the
chosen one whatever the conversation structure.

Bootstrap source: the Azure LLM inference trace 2023, conversation service
(``azure_llm_2023_conv.csv``, 19,366 requests in 58.4 min, 5.53 req/s). Its gaps have CV 1.09 but
its counts are over-dispersed at longer windows (variance/mean 1.4 at 1 s, 4.0 at 10 s, 20.6 at
60 s): the burstiness is in slow rate swings, not in single gaps. Blocks of 256 consecutive gaps
(≈ 46 s of the original trace) keep those swings; gaps are rescaled so the mean is 1/qps. The
paper's own bootstrap source had gap CV 2.73 and is not public; the Mooncake conversation
timestamps are quantised to ≈ 3 s slots (10,851 of 12,031 gaps are 0), so their gap CV (3.03) is an
artefact and they are not used. Any Azure-format CSV can be passed instead (``gaps_path``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]

TRACES_DIR = Path(__file__).resolve().parents[3] / "shared" / "traces"
# The default gaps ship inside the package (data/README.md): the trace folder beside a source
# checkout is absent from an installed wheel. Same values as azure_gaps(TRACES_DIR / the CSV).
AZURE_CONV = Path(__file__).resolve().parent / "data" / "azure_llm_2023_conv_gaps.npy"
ARRIVALS = ("poisson", "gamma", "bootstrap")
BOOTSTRAP_BLOCK = 256
GAMMA_CV = 1.9  # the paper's Gamma arrivals


class ArrivalError(ValueError):
    """An arrival process that cannot be built (unknown kind, bad CV, unreadable gap file)."""


@functools.cache
def azure_gaps(path: Path) -> F64:
    """Inter-arrival gaps (s) of an Azure LLM trace CSV (``TIMESTAMP,ContextTokens,...``), or
    of a ``.npy`` file of gaps saved from one."""
    if not path.is_file():
        raise ArrivalError(f"gaps_path {path} is not a file (bootstrap arrivals need a trace)")
    if path.suffix == ".npy":  # gaps saved already (the packaged default)
        saved: F64 = np.asarray(np.load(path, allow_pickle=False), dtype=np.float64)
        saved.setflags(write=False)
        return saved
    stamps = []
    with path.open() as f:
        header = f.readline()
        if not header.startswith("TIMESTAMP"):
            raise ArrivalError(f"gaps_path {path}: expected an Azure CSV with a TIMESTAMP column")
        for line in f:
            clock = line.split(",", 1)[0].split(" ")[-1]
            h, m, s = clock.split(":")
            stamps.append(int(h) * 3600 + int(m) * 60 + float(s))
    gaps = np.diff(np.sort(np.array(stamps, dtype=np.float64)))
    if len(gaps) < BOOTSTRAP_BLOCK:
        raise ArrivalError(f"gaps_path {path}: {len(gaps)} gaps; need >= {BOOTSTRAP_BLOCK}")
    gaps.setflags(write=False)
    return gaps


def _renewal(sample: Callable[[int], F64], draw: int, warm_s: float, duration_s: float) -> F64:
    """Renewal times from gap batches ``sample(draw)``, started ``warm_s`` before 0.

    Starting early puts t = 0 at a random, near-stationary phase of the process instead of
    exactly at an arrival.
    """
    chunks: list[F64] = []
    t = -warm_s
    while t < duration_s:
        times = t + np.cumsum(sample(draw))
        chunks.append(times)
        t = float(times[-1])
    times = np.concatenate(chunks)
    return times[(times >= 0) & (times < duration_s)]


@dataclass(frozen=True)
class ArrivalProcess:
    """One of the three aggregate processes; :meth:`times` draws arrivals in [0, duration)."""

    kind: str = "poisson"
    cv: float = GAMMA_CV
    gaps_path: Path = AZURE_CONV
    block: int = BOOTSTRAP_BLOCK

    def __post_init__(self) -> None:
        if self.kind not in ARRIVALS:
            raise ArrivalError(f"arrival must be one of {', '.join(ARRIVALS)}; got {self.kind!r}")
        if self.kind == "gamma" and not self.cv > 0:
            raise ArrivalError(f"cv must be > 0 for gamma arrivals; got {self.cv}")
        if self.block < 1:
            raise ArrivalError(f"block must be >= 1; got {self.block}")

    def times(self, rng: np.random.Generator, qps: float, duration_s: float) -> F64:
        """Sorted arrival times in [0, duration_s) at a long-run mean rate of ``qps``."""
        if not qps > 0 or not duration_s > 0:
            raise ArrivalError(f"qps and duration_s must be > 0; got {qps}, {duration_s}")
        if self.kind == "poisson":
            n = int(rng.poisson(qps * duration_s))
            return np.sort(rng.uniform(0.0, duration_s, n))
        draw = max(64, int(qps * duration_s * 1.1) + 64)
        if self.kind == "gamma":
            shape = 1.0 / self.cv**2
            scale = 1.0 / (qps * shape)
            return _renewal(lambda n: rng.gamma(shape, scale, n), draw, 50.0 / qps, duration_s)
        gaps = azure_gaps(Path(self.gaps_path))
        unit: F64 = gaps / gaps.mean() / qps  # mean gap exactly 1/qps
        block = min(self.block, len(unit))

        def blocks(n: int) -> F64:
            starts = rng.integers(0, len(unit), -(-n // block))
            idx = (starts[:, None] + np.arange(block)[None, :]) % len(unit)
            picked: F64 = unit[idx.ravel()]
            return picked

        return _renewal(blocks, draw, block / qps, duration_s)
