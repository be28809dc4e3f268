"""From run records to what people read: per-policy results, a paper-like table and a plot.

Per policy: the capacity at each SLO (mean over seeds, 95% Student-t interval, censoring), and
at the reference QPS the served KV hit, the load imbalance and the p99 TTFT, each a mean over
seeds. A p99 from an aborted or timed-out run is a lower bound: it is printed with ``>`` and
flagged in ``censored``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from sim.capacity import Interval, Rung, capacity_across_seeds, format_interval
from sim.steady import Protocol
from sim.study import RunRecord, RunSettings


def key_of(value: float) -> str:
    """The JSON key of an SLO or a QPS: ``3.5`` → "3.5", ``5.0`` → "5", ``100.0`` → "100"."""
    return f"{value:g}"


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def summarize_policies(
    records: Sequence[RunRecord], slos: Sequence[float], ref_qps: float
) -> list[dict[str, Any]]:
    """One JSON-ready record per policy, in the order the policies first appear."""
    by_policy: dict[str, list[RunRecord]] = defaultdict(list)
    for record in records:
        by_policy[record.policy].append(record)
    results = []
    for policy, runs in by_policy.items():
        seeds = sorted({r.seed for r in runs})
        ladders = [
            [
                Rung(r.qps, r.metrics.ttft_p99_s, r.metrics.failures, r.metrics.aborted)
                for r in runs
                if r.seed == seed
            ]
            for seed in seeds
        ]
        capacity: dict[str, float] = {}
        ci95: dict[str, list[float]] = {}
        per_seed: dict[str, list[float]] = {}
        cap_censored: dict[str, list[str]] = {}
        non_monotone: dict[str, bool] = {}
        for slo in slos:
            interval, knees = capacity_across_seeds(ladders, slo)
            key = key_of(slo)
            capacity[key] = interval.mean
            ci95[key] = [interval.low, interval.high]
            per_seed[key] = [k.capacity for k in knees]
            cap_censored[key] = list(interval.censored)
            non_monotone[key] = any(k.non_monotone for k in knees)
        at_ref = [r for r in runs if r.qps == ref_qps]
        ref = key_of(ref_qps)
        curve = []
        for qps in sorted({r.qps for r in runs}):
            rung = [r.metrics for r in runs if r.qps == qps]
            curve.append(
                {
                    "qps": qps,
                    "p99_ttft_s": _mean([m.ttft_p99_s for m in rung]),
                    "p99_censored": any(m.p99_censored for m in rung),
                    "kv_hit": _mean([m.kv_hit for m in rung]),
                    "imbalance": _mean([m.imbalance for m in rung]),
                    "failures": _mean([m.failures for m in rung]),
                }
            )
        results.append(
            {
                "policy": policy,
                "seeds": seeds,
                "kv_hit": _mean([r.metrics.kv_hit for r in at_ref]),
                "imbalance": _mean([r.metrics.imbalance for r in at_ref]),
                "imbalance_busy": _mean([r.metrics.imbalance_busy for r in at_ref]),
                "capacity": capacity,
                "capacity_ci95": ci95,
                "capacity_per_seed": per_seed,
                "non_monotone": non_monotone,
                "p99_ttft_s": {ref: _mean([r.metrics.ttft_p99_s for r in at_ref])},
                "censored": {
                    "capacity": cap_censored,
                    "p99_ttft_s": {ref: any(r.metrics.p99_censored for r in at_ref)},
                },
                "curve": curve,
            }
        )
    return results


def table_rows(
    results: Sequence[dict[str, Any]], slos: Sequence[float], ref_qps: float
) -> tuple[list[str], list[list[object]]]:
    """Headers and rows of the paper-like table."""
    ref = key_of(ref_qps)
    headers = ["policy", "KV hit"]
    headers += [f"cap@{key_of(s)}s (QPS)" for s in slos]
    headers += [f"p99@{ref} (s)", "imbalance"]
    rows: list[list[object]] = []
    for result in results:
        row: list[object] = [result["policy"], f"{100 * result['kv_hit']:.1f}%"]
        for slo in slos:
            key = key_of(slo)
            low, high = result["capacity_ci95"][key]
            interval = Interval(
                result["capacity"][key], low, high, len(result["seeds"]),
                tuple(result["censored"]["capacity"][key]),
            )  # fmt: skip
            mark = "*" if result["non_monotone"][key] else ""
            lowest = result["curve"][0]["qps"] if result["curve"] else None
            row.append(format_interval(interval, lowest=lowest) + mark)
        p99 = result["p99_ttft_s"][ref]
        row.append((">" if result["censored"]["p99_ttft_s"][ref] else "") + f"{p99:.2f}")
        row.append(f"{result['imbalance']:.2f}")
        rows.append(row)
    return headers, rows


def protocols_by_qps(records: Sequence[RunRecord]) -> dict[float, Protocol]:
    """The run protocol of each rung (the same for every seed and policy of a rung)."""
    out: dict[float, Protocol] = {}
    for record in sorted(records, key=lambda r: r.qps):
        if record.protocol is not None:
            out.setdefault(record.qps, record.protocol)
    return out


def progress_bar(done: int, total: int, elapsed_s: float, width: int = 30) -> str:
    """``[#####.....] 12/50 tasks, 40 s elapsed, ETA 2 min 7 s`` (ETA from the mean task rate)."""
    filled = int(width * done / total) if total else width
    eta = ""
    if 0 < done < total:
        left = elapsed_s / done * (total - done)
        eta = f", ETA {int(left // 60)} min {int(left % 60)} s"
    bar = "#" * filled + "." * (width - filled)
    return f"[{bar}] {done}/{total} tasks, {elapsed_s:.0f} s elapsed{eta}"


def study_document(
    workload: str,
    policies: Sequence[str],
    ladder: Sequence[float],
    seeds: Sequence[int],
    slos: Sequence[float],
    ref_qps: float,
    settings: RunSettings,
    records: Sequence[RunRecord],
    elapsed_s: float,
) -> dict[str, Any]:
    """The ``--json`` document of a capacity study: inputs, per-policy results, every run."""
    knobs = {k: v for k, v in vars(settings).items() if k != "profile"}
    knobs |= {"profile": settings.profile.name, "kv_blocks": settings.profile.kv_blocks}
    return {
        "workload": workload,
        "policies": list(policies),
        "ladder": list(ladder),
        "seeds": list(seeds),
        "slos": [key_of(s) for s in slos],
        "ref_qps": key_of(ref_qps),
        "settings": knobs,
        "elapsed_s": elapsed_s,
        "protocol": {key_of(q): p.to_dict() for q, p in protocols_by_qps(records).items()},
        "results": summarize_policies(records, slos, ref_qps),
        "runs": [
            {"policy": r.policy, "seed": r.seed, "qps": r.qps, "wall_s": r.wall_s}
            | r.metrics.to_dict()
            | {"prewarm_s": r.protocol.prewarm_s if r.protocol else 0.0}
            for r in records
        ],
    }
