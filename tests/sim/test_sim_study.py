"""The study runner: identical traffic per (seed, QPS), worker processes change nothing."""

from __future__ import annotations

from sim.engine_model import LLAMA_70B
from sim.study import RunSettings, run_study, sim_policy_params
from tests.support.tiny_workload import TinyWorkload

SETTINGS = RunSettings(profile=LLAMA_70B, q_cap=3.0, nodes=4, duration_s=20.0, warmup_s=4.0)


def test_worker_processes_give_the_same_records_as_one_process() -> None:
    policies = ("flat", "cacheroute")
    ladder, seeds = (10.0, 30.0), (1, 2)
    serial = run_study(TinyWorkload(), policies, SETTINGS, ladder=ladder, seeds=seeds, jobs=1)
    parallel = run_study(TinyWorkload(), policies, SETTINGS, ladder=ladder, seeds=seeds, jobs=2)
    assert [(r.policy, r.seed, r.qps) for r in serial] == [
        (p, s, q) for p in policies for s in (1, 2) for q in (10.0, 30.0)
    ]
    assert [r.metrics for r in serial] == [r.metrics for r in parallel]


def test_policies_of_one_task_see_the_same_requests() -> None:
    records = run_study(
        TinyWorkload(), ("flat", "sticky"), SETTINGS, ladder=(20.0,), seeds=(5,), jobs=1
    )
    assert records[0].metrics.requests == records[1].metrics.requests
    assert records[0].metrics.requests_total == records[1].metrics.requests_total


def test_preble_mirrors_the_profiles_kv_capacity() -> None:
    assert sim_policy_params("preble", LLAMA_70B) == {"max_blocks_per_node": 40_071}
    assert sim_policy_params("cacheroute", LLAMA_70B) == {}
