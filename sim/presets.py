"""Per-workload defaults of the simulator's commands (each documented in ``--help``).

``paper`` is the paper's flagship setting: Llama-3.3-70B fp8 on 30 TP2 destinations, the top 128
keys as the active set, the paper's QPS ladder with p99 TTFT reported at 100 QPS. The other
workloads take the testbed the paper pairs them with (PAPER.md "Testbeds"): ``whales`` the 8B
mechanism testbed, ``lowshare`` the 32B low-sharing one, traces the 70B testbed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from sim.engine_model import LLAMA_8B, LLAMA_70B, PAPER_TESTBED_FILE, QWEN_32B

PAPER_LADDER = (30.0, 60.0, 80.0, 100.0, 120.0, 140.0, 160.0, 180.0, 220.0, 300.0)
DEFAULT_SLOS = (3.5, 5.0)
DEFAULT_SEEDS = (1, 2, 3)
PAPER_SLOS = (2.0, 3.5, 5.0)  # the paper's Table 1
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
    profile: str
    nodes: int = 30
    ladder: tuple[float, ...] | None = None
    ref_qps: float | None = None
    options: dict[str, Any] = field(default_factory=dict)
    slos: tuple[float, ...] = DEFAULT_SLOS
    seeds: tuple[int, ...] = DEFAULT_SEEDS


PRESETS: dict[str, Preset] = {
    "paper": Preset(
        LLAMA_70B.name,
        30,
        PAPER_LADDER,
        100.0,
        {"top_k": 128} | calibrated_paper_options(),
        PAPER_SLOS,
        PAPER_SEEDS,
    ),
    "whales": Preset(LLAMA_8B.name, 30),
    "lowshare": Preset(QWEN_32B.name, 30),
}
FALLBACK = Preset(LLAMA_70B.name, 30)


def preset_for(workload: str) -> Preset:
    return PRESETS.get(workload, FALLBACK)


def default_ref_qps(ladder: tuple[float, ...], preset: Preset) -> float:
    """The preset's reference QPS when it is on the ladder, else the ladder's middle rung."""
    if preset.ref_qps is not None and preset.ref_qps in ladder:
        return preset.ref_qps
    return sorted(ladder)[(len(ladder) - 1) // 2]
