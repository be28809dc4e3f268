"""The capacity study's figure: p99 TTFT against offered QPS per policy (matplotlib, no GUI).

Drawn on a bare :class:`matplotlib.figure.Figure` (Agg canvas), so no pyplot state or display
backend is involved.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from matplotlib.figure import Figure

from sim.report import key_of


def plot(
    results: Sequence[dict[str, Any]], slos: Sequence[float], path: str, title: str = ""
) -> None:
    """p99 TTFT against offered QPS per policy (log scale); hollow markers = lower bounds."""
    figure = Figure(figsize=(8, 5))
    axes = figure.subplots()
    for result in results:
        curve = result["curve"]
        xs = [p["qps"] for p in curve]
        ys = [max(p["p99_ttft_s"], 1e-3) for p in curve]
        (line,) = axes.plot(xs, ys, marker="o", label=result["policy"])
        censored = [(x, y) for x, y, p in zip(xs, ys, curve, strict=True) if p["p99_censored"]]
        if censored:
            axes.scatter(
                [c[0] for c in censored], [c[1] for c in censored], marker="^", s=70,
                facecolors="white", edgecolors=line.get_color(), zorder=3,
            )  # fmt: skip
    for slo in slos:
        axes.axhline(slo, color="grey", linestyle="--", linewidth=0.8)
        axes.annotate(f"SLO {key_of(slo)} s", (axes.get_xlim()[0], slo), fontsize=8)
    axes.set_yscale("log")
    axes.set_xlabel("offered load (QPS)")
    axes.set_ylabel("p99 TTFT (s); ▲ = lower bound (run aborted)")
    axes.set_title(title or "p99 TTFT vs offered load")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
