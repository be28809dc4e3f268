"""The control plane's plan-lifecycle options (issue 11), declared once (:mod:`servekit.options`).

Automatic mode (:mod:`controlplane.lifecycle.auto_mode`), the shadow replay's budget
(:mod:`controlplane.lifecycle.shadow`), the live guard (:mod:`controlplane.lifecycle.live_guard`)
and the churn-aware replanner's cap (:mod:`controlplane.core.replanner`).
:mod:`controlplane.config` adds them to its option set and copies their values into
``ControlPlaneConfig`` with :func:`lifecycle_values`.
"""

from __future__ import annotations

import argparse
from typing import Any

from controlplane.core.byte_admission import BYTE_RANKS
from controlplane.core.live_sizes import load_sizes_file
from dataplane.core.policies import DEFAULT_POLICY
from servekit.flags import non_negative_float, non_negative_int, positive_float, positive_int
from servekit.options import Option, switch
from sim.engine_model import UnknownProfileError, get_profile
from sim.shadow_replay import PLAN_POLICIES


def _churn_share(text: str) -> float:
    value = positive_float(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"must be within (0, 1], got {value}")
    return value


def _seeds(text: str) -> int:
    value = positive_int(text)
    if value < 2:
        raise argparse.ArgumentTypeError(f"at least 2 (the noise is their spread), got {value}")
    return value


def _profile(text: str) -> str:
    if text:
        try:
            get_profile(text)
        except UnknownProfileError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return text


MAX_CHURN = Option(
    "max_churn", 0.10, _churn_share,
    "most share of warm keys a churn-aware rebuild may move (0-1]; the imbalance bound gives way "
    "to it when both cannot hold (controlplane/core/replanner.py)",
)  # fmt: skip
AUTO_INTERVAL = Option(
    "auto_interval", 60.0, positive_float,
    "seconds between automatic-mode rounds (build, shadow, roll out if it passes) in pools whose "
    "automatic mode is on (`cachectl plan auto enable`)",
)  # fmt: skip
SHADOW_MAX_REQUESTS = Option(
    "shadow_max_requests", 20_000, positive_int,
    "most requests a shadow replay replays (a longer stream is thinned evenly over its whole "
    "window, sim/shadow_replay.py)",
)  # fmt: skip
SHADOW_SEEDS = Option(
    "shadow_seeds",
    3,
    _seeds,
    "replays per load in a shadow (at least 2: their spread is the noise)",
)
SHADOW_ITERATIONS = Option(
    "shadow_iterations", 4, positive_int, "bisection steps of the shadow replay's knee search"
)
SHADOW_RECENT_MINUTES = Option(
    "shadow_recent_minutes", 10, positive_int,
    "minutes of the routers' sampled trace automatic mode replays",
)  # fmt: skip
SHADOW_PROFILE = Option(
    "shadow_profile", "", _profile,
    "engine profile automatic mode's replays simulate (sim/engine_model.py names; empty: the 70B "
    "testbed profile)", shown_default="''",
)  # fmt: skip
SHADOW_MIN_SAMPLES = Option(
    "shadow_min_samples", 300, positive_int,
    "fewest sampled requests a shadow replay judges on; fewer give the verdict inconclusive "
    "(controlplane/lifecycle/shadow.py)",
)  # fmt: skip
SHADOW_POLICY = Option(
    "shadow_policy", DEFAULT_POLICY, str,
    "the routers' policy a shadow replay follows the candidate plan with; set it to the routers' "
    "--policy (default: the routers' default; sim/shadow_replay.py)",
    choices=PLAN_POLICIES,
)  # fmt: skip
SHADOW_INCONCLUSIVE = Option(
    "shadow_inconclusive", "refuse", str,
    "what the shadow gate does with an inconclusive verdict: refuse the rollout, or allow it "
    "on the other gates (controlplane/lifecycle/verdict_gate.py)",
    choices=("refuse", "allow"),
)  # fmt: skip
GUARD_WINDOW = Option(
    "guard_window", 60.0, positive_float,
    "seconds of the live guard's before and after windows of pool p99 TTFT",
)  # fmt: skip
GUARD_SETTLE = Option(
    "guard_settle", 5.0, non_negative_float,
    "seconds after a rollout before the guard's after-window starts (routers install)",
)  # fmt: skip
GUARD_MAX_REGRESSION = Option(
    "guard_max_regression", 0.5, non_negative_float,
    "the guard fires when p99 after > p99 before x (1 + this) ...",
)  # fmt: skip
GUARD_FLOOR = Option(
    "guard_floor", 0.25, non_negative_float,
    "... and p99 after - p99 before > this many seconds (so noise does not fire it)",
)  # fmt: skip
GUARD_MIN_SAMPLES = Option(
    "guard_min_samples", 50, positive_int,
    "TTFT observations each window needs before the guard judges",
)  # fmt: skip
GUARD_ACTION = Option(
    "guard_action", "disable", str,
    "what the guard does when it fires: disable the plan (Flat-LB) or roll back",
    choices=("disable", "rollback"),
)  # fmt: skip
CACHE_BUDGET = Option(
    "cache_budget", 0.0, non_negative_float,
    "byte-aware admission in live builds: each destination's cache budget in prefix blocks "
    "(0: off, equal slots); sizes from --prefix-sizes, else the routers' reports "
    "(controlplane/core/live_sizes.py)",
)  # fmt: skip
BYTE_RANK = Option(
    "byte_rank", "best", str,
    "byte-aware admission order (controlplane/core/byte_admission.py)", choices=BYTE_RANKS,
)  # fmt: skip
PREFIX_SIZES: Option[tuple[tuple[str, float], ...]] = Option(
    "prefix_sizes", (), load_sizes_file,
    "JSON file of key -> reusable-prefix blocks; these win over the routers' reported sizes",
    metavar="FILE", shown_default="none",
)  # fmt: skip
PLAN_RETENTION = Option(
    "plan_retention", 50, non_negative_int,
    "stored plan versions the leader keeps per pool, newest first, beside the active one, the "
    "rollback target and the guard's (0: keep every version; controlplane/lifecycle/retention.py)",
)  # fmt: skip
GUARD_ALL_ROLLOUTS = switch("guard_all_rollouts", "guard every rollout, not only automatic mode's")

LIFECYCLE_OPTIONS: tuple[Option[Any], ...] = (
    MAX_CHURN, AUTO_INTERVAL, SHADOW_MAX_REQUESTS, SHADOW_SEEDS, SHADOW_ITERATIONS,
    SHADOW_RECENT_MINUTES, SHADOW_PROFILE, SHADOW_POLICY, SHADOW_MIN_SAMPLES, SHADOW_INCONCLUSIVE,
    GUARD_WINDOW,
    GUARD_SETTLE, GUARD_MAX_REGRESSION, GUARD_FLOOR, GUARD_MIN_SAMPLES, GUARD_ACTION,
    GUARD_ALL_ROLLOUTS, CACHE_BUDGET, BYTE_RANK,
    PREFIX_SIZES, PLAN_RETENTION,
)  # fmt: skip


def lifecycle_values(args: argparse.Namespace) -> dict[str, Any]:
    """``ControlPlaneConfig`` fields from parsed ``args``."""
    return {
        "max_churn": MAX_CHURN.value(args),
        "auto_interval_s": AUTO_INTERVAL.value(args),
        "shadow_max_requests": SHADOW_MAX_REQUESTS.value(args),
        "shadow_seeds": SHADOW_SEEDS.value(args),
        "shadow_iterations": SHADOW_ITERATIONS.value(args),
        "shadow_recent_minutes": SHADOW_RECENT_MINUTES.value(args),
        "shadow_profile": SHADOW_PROFILE.value(args),
        "shadow_policy": SHADOW_POLICY.value(args),
        "shadow_min_samples": SHADOW_MIN_SAMPLES.value(args),
        "shadow_inconclusive": SHADOW_INCONCLUSIVE.value(args),
        "guard_window_s": GUARD_WINDOW.value(args),
        "guard_settle_s": GUARD_SETTLE.value(args),
        "guard_max_regression": GUARD_MAX_REGRESSION.value(args),
        "guard_floor_s": GUARD_FLOOR.value(args),
        "guard_min_samples": GUARD_MIN_SAMPLES.value(args),
        "guard_action": GUARD_ACTION.value(args),
        "guard_all_rollouts": GUARD_ALL_ROLLOUTS.value(args),
        "cache_budget": CACHE_BUDGET.value(args),
        "byte_rank": BYTE_RANK.value(args),
        "prefix_sizes": dict(PREFIX_SIZES.value(args)),
        "plan_retention": PLAN_RETENTION.value(args),
    }
