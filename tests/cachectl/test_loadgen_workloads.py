"""Workloads by name for the load generator, and the demo's ``tenants`` workload."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from cachectl.loadgen.workloads import NAMES, WorkloadError, convert, parse_options, resolve
from sim.workloads.tenants import CONTEXT_TOKENS, TEMPLATE_TOKENS, TenantsWorkload


def test_every_simulator_workload_and_tenants_resolve_by_name() -> None:
    assert set(NAMES) >= {"paper", "whales", "lowshare", "trace", "tenants"}
    assert resolve("paper", {"top_k": 16}).name == "paper"
    assert isinstance(resolve("tenants", {}), TenantsWorkload)


@pytest.mark.parametrize(
    ("name", "options", "trace", "message"),
    [
        ("nope", {}, None, "unknown workload 'nope'"),
        ("tenants", {"colour": 1}, None, "does not take colour"),
        ("paper", {"colour": 1}, None, "does not take colour"),
        ("paper", {}, Path("x.jsonl"), "--trace goes with --workload trace"),
        ("trace", {}, Path("/no/such/trace.jsonl"), "is not a file"),
        ("tenants", {"context_tokens": -1}, None, "context_tokens must be >= 0"),
    ],
)
def test_bad_workloads_are_refused_with_a_message(
    name: str, options: dict[str, object], trace: Path | None, message: str
) -> None:
    with pytest.raises(WorkloadError, match=message):
        resolve(name, options, trace)


def test_options_are_converted_to_numbers_or_none() -> None:
    assert parse_options(["top_k=32", "cv=1.5", "arrival=gamma", "top_k=none"]) == {
        "top_k": None,
        "cv": 1.5,
        "arrival": "gamma",
    }
    assert convert(" 7 ") == 7
    with pytest.raises(WorkloadError, match="NAME=VALUE"):
        parse_options(["oops"])


def test_tenants_requests_share_their_business_context_and_nothing_else() -> None:
    requests = TenantsWorkload(top_k=8).requests(qps=50, duration_s=10, seed=3)
    assert len(requests) == pytest.approx(500, rel=0.2)
    assert [r.arrival_s for r in requests] == sorted(r.arrival_s for r in requests)
    context_blocks = (TEMPLATE_TOKENS + CONTEXT_TOKENS) // 16
    by_key: dict[str, list[tuple[int, ...]]] = {}
    for r in requests:
        assert len(r.blocks) == math.ceil(r.prompt_tokens / 16)
        assert 4 <= r.prompt_tokens - TEMPLATE_TOKENS - CONTEXT_TOKENS <= 1024
        assert 8 <= r.output_tokens <= 1024
        by_key.setdefault(r.key, []).append(r.blocks)
    heads = {key: blocks[0][:context_blocks] for key, blocks in by_key.items()}
    for key, all_blocks in by_key.items():
        assert all(b[:context_blocks] == heads[key] for b in all_blocks)
    # Different businesses share only the 96-token template (6 blocks).
    keys = sorted(heads)
    a, b = heads[keys[0]], heads[keys[1]]
    assert a[:6] == b[:6] and a[6] != b[6]


def test_tenants_is_deterministic_per_seed() -> None:
    workload = TenantsWorkload(top_k=8, context_tokens=512)
    one = workload.requests(qps=20, duration_s=5, seed=1)
    assert one == workload.requests(qps=20, duration_s=5, seed=1)
    assert one != workload.requests(qps=20, duration_s=5, seed=2)
