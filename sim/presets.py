"""Per-workload defaults of the simulator's commands (each documented in ``--help``).

``paper`` is the paper's flagship setting: Llama-3.3-70B fp8 on 30 TP2 destinations, the top 128
keys as the active set, the paper's QPS ladder with p99 TTFT reported at 100 QPS. The other
workloads take the testbed the paper pairs them with (PAPER.md "Testbeds"): ``whales`` the 8B
mechanism testbed, ``lowshare`` the 32B low-sharing one, traces the 70B testbed.

A ladder must reach the knee of the fleet it runs on, so a preset may give a profile its own
ladder (and reference QPS): the paper's ladder 30…300 brackets the slow ``paper-testbed``
profile, while the public H100 profile's knee is several times higher (docs/results.md §4).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from sim.engine_model import LLAMA_8B, LLAMA_70B, PAPER_TESTBED_FILE, QWEN_32B

PAPER_LADDER = (30.0, 60.0, 80.0, 100.0, 120.0, 140.0, 160.0, 180.0, 220.0, 300.0)
DEFAULT_SLOS = (3.5, 5.0)
DEFAULT_SEEDS = (1, 2, 3)
PAPER_SLOS = (2.0, 3.5, 5.0)  # the paper's Table 1
# The public 70B H100 profile on the paper workload: its knee is ≈ 8× the testbed's (a Flat-LB
# probe, seed 2: p99 1.4 s at 600 QPS, diverged at 1,000), so the ladder climbs to 2,000 QPS and is
# finer around Flat-LB's knee; 100 QPS stays a rung (the paper's reference load), but p99, hit and
# imbalance are reported at 800 QPS, near Flat-LB's knee as 100 QPS is on the testbed.
# 900 resolves the knees the first run found between 800 and 1,000 (docs/results.md §4.6).
PUBLIC_PAPER_LADDER = (
    100.0, 200.0, 400.0, 600.0, 700.0, 800.0, 900.0, 1000.0, 1200.0, 1600.0, 2000.0,
)  # fmt: skip
PUBLIC_PAPER_REF_QPS = 800.0
# The 8B whales ablation (the paper: 30…500 on the 8B testbed); reference 300 QPS, half the
# fleet's ≈ 600 QPS (sim/workloads/whales.py).
WHALES_LADDER = (30.0, 60.0, 100.0, 150.0, 200.0, 250.0, 300.0, 400.0, 500.0)
WHALES_REF_QPS = 300.0
# Qwen3-32B low sharing: a 30-destination fleet of ≈ 1.6 req/s knees (long prompts) saturates
# near 50-60 QPS; the reference 40 QPS is loaded but below every knee seen by the shadow gate.
LOWSHARE_LADDER = (10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 100.0)
LOWSHARE_REF_QPS = 40.0
PAPER_SEEDS = (2, 3, 4, 5, 6)
TABLE1_POLICIES = ("flat", "sticky", "chwbl", "dualmap", "preble", "sglang", "cacheroute")


def calibrated_paper_options() -> dict[str, Any]:
    """The ``paper`` workload options frozen by the calibration (empty when none is frozen)."""
    if not PAPER_TESTBED_FILE.is_file():
        return {}
    options: dict[str, Any] = json.loads(PAPER_TESTBED_FILE.read_text())["workload"]
    return dict(options)


@dataclass(frozen=True)
class Preset:
    """``ladder``/``ref_qps``: for every profile not in ``by_profile`` (name → ladder, ref QPS).

    Only studies (:func:`study_preset`) read ``by_profile``; the gate commands use the base.
    """

    profile: str
    nodes: int = 30
    ladder: tuple[float, ...] | None = None
    ref_qps: float | None = None
    options: dict[str, Any] = field(default_factory=dict)
    slos: tuple[float, ...] = DEFAULT_SLOS
    seeds: tuple[int, ...] = DEFAULT_SEEDS
    by_profile: dict[str, tuple[tuple[float, ...], float]] = field(default_factory=dict)

    def for_profile(self, profile: str) -> Preset:
        """This preset with the ladder and reference QPS of ``profile`` when it has its own."""
        if profile not in self.by_profile:
            return self
        ladder, ref_qps = self.by_profile[profile]
        return replace(self, ladder=ladder, ref_qps=ref_qps)


PRESETS: dict[str, Preset] = {
    "paper": Preset(
        LLAMA_70B.name,
        30,
        PAPER_LADDER,
        100.0,
        {"top_k": 128} | calibrated_paper_options(),
        PAPER_SLOS,
        PAPER_SEEDS,
        {LLAMA_70B.name: (PUBLIC_PAPER_LADDER, PUBLIC_PAPER_REF_QPS)},
    ),
    # Ladders per profile only: the gate commands (drift, shadow) keep their own default loads.
    "whales": Preset(
        LLAMA_8B.name,
        30,
        slos=PAPER_SLOS,
        by_profile={LLAMA_8B.name: (WHALES_LADDER, WHALES_REF_QPS)},
    ),
    "lowshare": Preset(
        QWEN_32B.name,
        30,
        slos=PAPER_SLOS,
        by_profile={QWEN_32B.name: (LOWSHARE_LADDER, LOWSHARE_REF_QPS)},
    ),
}
FALLBACK = Preset(LLAMA_70B.name, 30)


def preset_for(workload: str, profile: str | None = None) -> Preset:
    """The workload's preset; with ``profile``, that profile's ladder when the preset has one."""
    preset = PRESETS.get(workload, FALLBACK)
    return preset if profile is None else preset.for_profile(profile)


def study_preset(workload: str, profile: str | None) -> Preset:
    """What a capacity study on ``profile`` (None: the workload's testbed) starts from."""
    return preset_for(workload, profile or preset_for(workload).profile)


def default_ref_qps(ladder: tuple[float, ...], preset: Preset) -> float:
    """The preset's reference QPS when it is on the ladder, else the ladder's middle rung."""
    if preset.ref_qps is not None and preset.ref_qps in ladder:
        return preset.ref_qps
    return sorted(ladder)[(len(ladder) - 1) // 2]
