"""Delivered affinity at the front: follow-ups on the turn-1 node, their cached fraction, and the
fleet load CoV (dataplane/telemetry/affinity.py), on a real Prometheus registry."""

from __future__ import annotations

import json

import pytest
from prometheus_client import CollectorRegistry

from dataplane.core.dispersion import load_cov
from dataplane.telemetry.affinity import DeliveredAffinity, usage_tokens


def answer(prompt: int, cached: int) -> bytes:
    usage = {"prompt_tokens": prompt, "prompt_tokens_details": {"cached_tokens": cached}}
    return json.dumps({"choices": [], "usage": usage}).encode()


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    found = registry.get_sample_value(name, labels)
    return 0.0 if found is None else found


def test_follow_ups_count_by_the_keys_first_node_and_add_their_tokens() -> None:
    registry = CollectorRegistry()
    affinity = DeliveredAffinity(registry)
    affinity.answered("http", "p", 1, "a", answer(100, 0))  # turn 1: no follow-up
    affinity.answered("http", "p", 1, "a", answer(120, 96))
    affinity.answered("http", "p", 1, "b", answer(140, 0))
    affinity.answered("http", "p", 2, "b", answer(50, 0))
    affinity.answered("http", "p", 2, "b", b"no usage in this answer")
    labels = {"door": "http", "pool": "p"}
    assert value(registry, "cacheroute_router_followups_total", node="first", **labels) == 2
    assert value(registry, "cacheroute_router_followups_total", node="other", **labels) == 1
    assert value(registry, "cacheroute_router_followup_prompt_tokens_total", **labels) == 260
    assert value(registry, "cacheroute_router_followup_cached_tokens_total", **labels) == 96


def test_the_first_node_map_is_bounded_and_forgets_the_least_recent_key() -> None:
    registry = CollectorRegistry()
    affinity = DeliveredAffinity(registry, max_keys=2)
    for key in (1, 2, 3):  # key 1 is dropped when key 3 arrives
        affinity.answered("http", "p", key, "a", b"")
    affinity.answered("http", "p", 1, "b", b"")  # a turn 1 again, not a follow-up on "other"
    assert value(registry, "cacheroute_router_followups_total", door="http", pool="p",
                 node="other") == 0  # fmt: skip


def test_usage_and_cov() -> None:
    assert usage_tokens(answer(7, 3)) == (7, 3) and usage_tokens(b"{}") == (None, None)
    assert load_cov([]) == 0.0 and load_cov([0.0, 0.0]) == 0.0
    assert load_cov([1.0, 3.0]) == pytest.approx(0.5)
