"""How stored plans read on a terminal: pointer, summary rows, verdict, replan, destinations.

Apart from :mod:`cachectl.plan_online` (the commands that fetch them) because ``plan``'s other
commands and ``status`` print the same lines.
"""

from __future__ import annotations

from cachectl.admin_client import age_text
from cachectl.output import print_table
from cacheroute.v1 import admin_pb2, cluster_pb2, table_pb2


def pointer_line(pointer: cluster_pb2.ActivePointer) -> str:
    """A pool's active pointer, for people: the version, or why there is none."""
    if not pointer.version and pointer.generation:
        return (
            f"pool {pointer.pool}: planned routing disabled at generation {pointer.generation} "
            f"(Flat-LB, reason no_table; {pointer.action or 'moved'} by {pointer.actor or '?'}, "
            f"{age_text(pointer.updated_at_unix_ms)} ago; `cachectl plan rollback` restores the "
            "last plan)"
        )
    if not pointer.version:
        return f"pool {pointer.pool or '?'}: no active plan"
    return (
        f"pool {pointer.pool}: active {pointer.version} generation {pointer.generation} "
        f"({pointer.action or 'moved'} by {pointer.actor or '?'}, "
        f"{age_text(pointer.updated_at_unix_ms)} ago)"
    )


def verdict_text(verdict: table_pb2.ShadowVerdict) -> str:
    """``pass`` / ``fail`` / ``error`` of a shadow verdict, ``-`` when never replayed."""
    if not verdict.decided_at_unix_ms:
        return "-"
    return table_pb2.ShadowVerdict.Outcome.Name(verdict.outcome).removeprefix("OUTCOME_").lower()


def next_steps(version: str) -> list[str]:
    """What a stored plan goes through before it routes: the rollout's shadow gate refuses a
    version without a passing verdict, so its step comes first."""
    return [
        f"next: cachectl plan shadow {version}    (the shadow gate: a rollout needs a passing "
        "verdict)",
        f"then: cachectl plan rollout {version}",
    ]


def summary_rows(plans: list[admin_pb2.PlanSummary]) -> list[list[object]]:
    """One row per plan under :data:`SUMMARY_HEADERS`."""
    rows: list[list[object]] = []
    for plan in plans:
        meta, stats = plan.metadata, plan.metadata.stats
        rows.append(
            [
                meta.version,
                "*" if plan.active else "",
                age_text(meta.created_at_unix_ms),
                meta.created_by,
                meta.source,
                int(stats.admitted_keys),
                len(stats.planned_load),
                round(stats.admitted_rate_share, 4),
                round(stats.planned_imbalance, 4),
                verdict_text(meta.verdict),
                meta.note,
            ]
        )
    return rows


SUMMARY_HEADERS = (
    "VERSION", "ACTIVE", "AGE", "BY", "SOURCE", "KEYS", "NODES", "WARM_SHARE", "IMBALANCE",
    "SHADOW", "NOTE",
)  # fmt: skip


def replan_line(meta: table_pb2.PlanMetadata) -> str | None:
    """How the plan compares with the version that was active when it was built, if any."""
    if not meta.HasField("replan"):
        return None
    info = meta.replan
    fallback = " (fell back to the fresh plan)" if info.used_fresh else ""
    return (
        f"built against {info.from_version} by the {info.replanner} replanner{fallback}: churn "
        f"{info.churn:.2%} (a fresh plan: {info.fresh_churn:.2%}), imbalance bound "
        f"{info.imbalance_bound:.4f} (fresh {info.fresh_imbalance:.4f}), "
        f"{info.repair_moves} repair moves"
        + (f", churn cap {info.max_churn:.0%}" if info.max_churn else "")
        + ("" if info.bound_met or info.used_fresh else " (the cap held; the bound was missed)")
    )


def destinations_line(check: admin_pb2.DestinationCheck) -> str:
    """How the plan's destinations match the pool's nodes, for people."""
    text = (
        f"destinations: {check.registered} of {check.destinations} registered in the pool, "
        f"{check.eligible} eligible"
    )
    if check.missing:
        warm = f" ({len(check.missing_warm)} holding warm keys)" if check.missing_warm else ""
        text += f"; not registered{warm}: {', '.join(check.missing)}"
    if check.ineligible:
        text += f"; not eligible: {', '.join(check.ineligible)}"
    return text


def print_plan(summary: admin_pb2.PlanSummary, verb: str) -> None:
    """A stored plan's row, its destinations, its replan and its shadow verdict."""
    meta = summary.metadata
    print(f"{verb} {meta.version} in pool {meta.pool}{' (active)' if summary.active else ''}")
    print_table(SUMMARY_HEADERS, summary_rows([summary]))
    if summary.HasField("destinations"):
        print(destinations_line(summary.destinations))
        if summary.destinations.missing_warm:
            print(
                "warning: a rollout of this plan is refused until its warm destinations are "
                "registered nodes of the pool (`cachectl nodes list`), or with "
                "--skip-gate destinations --reason TEXT"
            )
    line = replan_line(meta)
    if line:
        print(line)
    if meta.verdict.decided_at_unix_ms:
        v = meta.verdict
        print(
            f"shadow verdict: {verdict_text(v)} ({v.summary}), by {v.decided_by or '?'} "
            f"{age_text(v.decided_at_unix_ms)} ago on {v.source}"
        )
