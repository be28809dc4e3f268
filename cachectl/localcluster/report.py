"""The demo's side-by-side summary: Flat-LB phase vs CacheRoute phase, for people and scripts."""

from __future__ import annotations

from typing import Any

from cachectl.loadgen.results import Summary
from cachectl.output import format_table
from cacheroute.v1 import admin_pb2


def _pct(x: float) -> str:
    return f"{x:.1%}"


def _s(x: float) -> str:
    return f"{x:.3f} s"


def _points(before: float, after: float) -> str:
    return f"{(after - before) * 100:+.1f} pts"


def _change(before: float, after: float, *, lower_is_better: bool = True) -> str:
    if before <= 0:
        return "n/a"
    ratio = after / before
    better = ratio < 1 if lower_is_better else ratio > 1
    return f"{ratio:.2f}x ({'better' if better else 'worse'})"


def _reasons(summary: Summary) -> str:
    total = sum(summary.reasons.values()) or 1
    ordered = sorted(summary.reasons.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{name} {count / total:.0%}" for name, count in ordered) or "-"


def side_by_side(flat: Summary, planned: Summary) -> str:
    """An aligned table: metric, Flat-LB, CacheRoute, change."""
    rows: list[list[object]] = [
        [
            "hit rate (token-weighted)",
            _pct(flat.hit_rate),
            _pct(planned.hit_rate),
            _points(flat.hit_rate, planned.hit_rate),
        ],
        [
            "TTFT p50",
            _s(flat.ttft_p50_s),
            _s(planned.ttft_p50_s),
            _change(flat.ttft_p50_s, planned.ttft_p50_s),
        ],
        [
            "TTFT p99",
            _s(flat.ttft_p99_s),
            _s(planned.ttft_p99_s),
            _change(flat.ttft_p99_s, planned.ttft_p99_s),
        ],
        [
            "throughput (req/s)",
            f"{flat.throughput_rps:.2f}",
            f"{planned.throughput_rps:.2f}",
            "",
        ],
        [
            "imbalance (max/mean requests)",
            f"{flat.imbalance:.3f}",
            f"{planned.imbalance:.3f}",
            "",
        ],
        ["requests measured / failed", f"{flat.requests} / {flat.failed}",
         f"{planned.requests} / {planned.failed}", ""],
        ["decisions by reason", _reasons(flat), _reasons(planned), ""],
    ]  # fmt: skip
    return format_table(("", "FLAT-LB (NO PLAN)", "CACHEROUTE PLAN", "CHANGE"), rows)


def plan_dict(
    summary: admin_pb2.PlanSummary, generation: int, acked_by: list[str]
) -> dict[str, Any]:
    meta, stats = summary.metadata, summary.metadata.stats
    return {
        "version": meta.version,
        "generation": generation,
        "acked_by": acked_by,
        "keys_seen": int(stats.num_keys),
        "keys_admitted": int(stats.admitted_keys),
        "admitted_rate_share": stats.admitted_rate_share,
        "total_rate": stats.total_rate,
        "slots_used": int(stats.slots_used),
        "slots_total": int(stats.slots_total),
        "max_replicas": int(stats.max_replicas),
        "planned_imbalance": stats.planned_imbalance,
        "q_cap": meta.params.q_cap,
        "slots_per_node": int(meta.params.slots_per_node),
    }


def plan_lines(plan: dict[str, Any]) -> list[str]:
    return [
        f"  plan {plan['version']} (generation {plan['generation']}): "
        f"{plan['keys_admitted']} of {plan['keys_seen']} keys warm "
        f"({plan['admitted_rate_share']:.0%} of {plan['total_rate']:.1f} req/s), "
        f"{plan['slots_used']}/{plan['slots_total']} slots, up to {plan['max_replicas']} "
        f"replicas, planned imbalance {plan['planned_imbalance']:.3f}",
        f"  ACKed by {', '.join(plan['acked_by'])}",
    ]
