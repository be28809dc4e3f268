"""The shadow-replay gate (``sim/shadow_replay.py``): it rejects CacheRoute where prefix sharing is
low (``lowshare``, the paper's failure regime) and passes it on the paper workload; the noise test
and the load scaling behave as documented."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from cachectl.sim_gate_cmd import print_shadow
from dataplane.core.keys import hash_key
from sim import presets
from sim.engine_model import get_profile
from sim.planning import make_stream, plan_for
from sim.shadow_replay import (
    Replayer,
    ShadowError,
    ShadowSettings,
    Verdict,
    report,
    scaled,
    shadow,
    thinned,
    welch,
)
from sim.types import SimRequest
from sim.workloads.registry import make_workload

# Single-destination knees measured by sim.calibration.single_destination_knee (the default
# `cachectl sim shadow` measures them itself): paper 12.094 req/s, lowshare 1.605 req/s.
Q_CAP = {"paper": 12.094, "lowshare": 1.605}
NODES = [f"d{i:03d}" for i in range(30)]


def gate(
    workload: str, qps: float, duration_s: float, policy: str = "cacheroute"
) -> dict[str, object]:
    preset = presets.preset_for(workload)
    stream = make_stream(
        make_workload(workload, **preset.options), qps=qps, duration_s=duration_s, seed=1,
        prior_window_s=60.0,
    )  # fmt: skip
    table = plan_for("lpt", stream, NODES, q_cap=Q_CAP[workload])
    assert table is not None
    settings = ShadowSettings(
        profile=get_profile(preset.profile), seeds=2, iterations=3, policy=policy
    )
    return report(shadow(stream.requests, table, settings))


@pytest.mark.slow
def test_the_gate_passes_cacheroute_on_the_paper_workload() -> None:
    document = gate("paper", 100.0, 60.0)
    assert document["verdict"] == "pass", document["reason"]
    assert "improves beyond noise" in str(document["reason"])


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["cacheroute", "cacheroute_online"])
def test_the_gate_rejects_cacheroute_on_lowshare_despite_its_higher_hit_rate(policy: str) -> None:
    """Whether the routers follow the plan with the paper's dispatch or the online step (issue
    22), the low-sharing plan is rejected."""
    document = gate("lowshare", 24.0, 120.0, policy)
    assert document["candidate_policy"] == policy
    assert document["verdict"] == "fail", document["reason"]
    near = document["loads"]["near"]  # type: ignore[index]
    assert near["cacheroute"]["kv_hit"] > near["flat"]["kv_hit"]  # hit rate is not enough
    assert "regresses" in str(document["reason"]) or "no improvement" in str(document["reason"])


def test_the_candidate_is_replayed_with_the_routers_policy() -> None:
    """The plan's side runs the policy the settings name (a replay under another policy differs),
    and a policy that does not follow a plan is refused before any replay."""
    preset = presets.preset_for("paper")
    stream = make_stream(make_workload("paper", **preset.options), qps=60.0, duration_s=20.0,
                         seed=1, prior_window_s=20.0)  # fmt: skip
    table = plan_for("lpt", stream, NODES, q_cap=Q_CAP["paper"])
    assert table is not None
    p99 = {}
    for policy in ("cacheroute", "cacheroute_online"):
        settings = ShadowSettings(profile=get_profile(preset.profile), policy=policy)
        replayer = Replayer(stream.requests, table, settings)
        p99[policy] = replayer.run("cacheroute", 400.0, seed=1, abort=False).ttft_p99_s
    assert p99["cacheroute"] != p99["cacheroute_online"]
    settings = ShadowSettings(profile=get_profile(preset.profile), policy="sglang")
    with pytest.raises(ShadowError, match="sglang"):
        shadow(stream.requests, table, settings)


def test_scaling_a_stream_multiplies_its_load() -> None:
    stream = make_stream(make_workload("paper"), qps=20.0, duration_s=10.0, seed=1,
                         prior_window_s=1.0).requests  # fmt: skip
    doubled = scaled(stream, 2.0)
    assert [r.key for r in doubled] == [r.key for r in stream]
    assert doubled[-1].arrival_s == pytest.approx(stream[-1].arrival_s / 2)


def test_welch_interval_excludes_zero_only_for_a_clear_difference() -> None:
    diff, half = welch([2.0, 2.1, 1.9], [1.0, 1.05, 0.95])
    assert diff == pytest.approx(1.0) and diff - half > 0
    diff, half = welch([2.0, 1.0, 3.0], [1.9, 2.6, 1.5])
    assert diff - half < 0 < diff + half
    assert welch([1.0], [2.0])[1] == math.inf


def test_a_tiny_stream_or_bad_settings_are_refused() -> None:
    preset = presets.preset_for("paper")
    stream = make_stream(make_workload("paper"), qps=10.0, duration_s=5.0, seed=1,
                         prior_window_s=5.0)  # fmt: skip
    table = plan_for("lpt", stream, NODES, q_cap=12.0)
    assert table is not None
    profile = get_profile(preset.profile)
    with pytest.raises(ShadowError, match="at least 100"):
        shadow(stream.requests, table, ShadowSettings(profile=profile))
    with pytest.raises(ShadowError, match="seeds"):
        shadow(stream.requests, table, ShadowSettings(profile=profile, seeds=1))


def drifting(n: int, span_s: float) -> list[SimRequest]:
    """``n`` requests over ``span_s``: key "early" in the first half, "late" in the second."""
    return [
        SimRequest(arrival_s=i * span_s / n, key="early" if i < n // 2 else "late",
                   key_hash=hash_key("early" if i < n // 2 else "late"), blocks=(1, 2),
                   prompt_tokens=100, output_tokens=10)
        for i in range(n)
    ]  # fmt: skip


def test_a_long_stream_is_thinned_evenly_over_its_whole_window_not_cut_to_its_head() -> None:
    stream = drifting(3000, 600.0)
    kept = thinned(stream, 1000)
    assert len(kept) == 1000 and kept[0] is stream[0]
    assert kept[-1].arrival_s >= 600.0 - 3 * 600.0 / 3000  # reaches the window's end
    assert Counter(r.key for r in kept) == {"early": 500, "late": 500}  # the drift survives
    assert thinned(stream[:999], 1000) == stream[:999]


def test_a_thinned_replay_keeps_absolute_loads_and_reports_the_thinning() -> None:
    stream = drifting(3000, 600.0)  # 5 QPS recorded
    small = make_stream(make_workload("paper"), qps=10.0, duration_s=5.0, seed=1,
                        prior_window_s=5.0)  # fmt: skip
    table = plan_for("lpt", small, NODES, q_cap=12.0)
    assert table is not None
    profile = get_profile(presets.preset_for("paper").profile)
    settings = ShadowSettings(profile=profile, max_requests=1000)
    replayer = Replayer(stream, table, settings)
    assert replayer.recorded == 3000 and len(replayer.requests) == 1000
    assert replayer.recorded_qps == pytest.approx(5.0, rel=0.01)  # the whole stream's rate
    at = replayer.stream_at(40.0)
    assert len(at) / at[-1].arrival_s == pytest.approx(40.0, rel=0.01)


def test_the_report_and_its_human_form_state_the_thinning(
    capsys: pytest.CaptureFixture[str],
) -> None:
    verdict = Verdict(passed=False, reason="r", knee_qps=10.0, candidate_knee_qps=9.0,
                      recorded_qps=100.0, tests={"slo_s": 3.5}, replayed=20_000,
                      recorded=60_000)  # fmt: skip
    document = report(verdict)
    assert document["replayed"] == {"requests": 20_000, "of": 60_000, "thinning": 3.0}
    print_shadow(document)
    assert "replayed 20,000 of 60,000 requests, thinned evenly" in capsys.readouterr().out
    whole = report(Verdict(False, "r", 1.0, 1.0, 1.0, tests={"slo_s": 3.5}, replayed=5, recorded=5))
    print_shadow(whole)
    assert "thinned" not in capsys.readouterr().out
