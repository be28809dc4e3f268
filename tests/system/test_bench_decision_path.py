"""The benchmarks' in-process decision path (``bench_prefix_sizes.once``, the same loop as
``bench_route.py``'s in-process part) runs against today's router and encoder: a change to
``Router.route`` or ``DecisionEncoder`` that the benchmarks did not follow broke ``bench_route.py``
once without any test noticing. Nothing here is timed; it checks the loop runs and decides."""

from __future__ import annotations

from types import ModuleType

import pytest

from cacheroute.v1 import routing_pb2
from dataplane.core.decision_encoding import DecisionEncoder
from dataplane.core.route_input import parse_request
from dataplane.core.router import Router
from tests.support.scripts import load_script


def load_bench() -> ModuleType:
    return load_script("bench/bench_prefix_sizes.py")


@pytest.mark.parametrize("kind", ["none", "blocks", "prompt"])
def test_the_benchmarks_decision_loop_runs_on_every_request_kind(kind: str) -> None:
    bench = load_bench()
    requests = bench.requests(kind, 50)
    assert bench.once(requests) > 0
    router = Router()
    router.apply_load(bench.snapshot())
    encoder = DecisionEncoder("cacheroute")
    inp = parse_request(requests[0])
    decision = routing_pb2.RouteDecision.FromString(
        encoder.encode_outcome(router.route(inp, 0.0), inp.key_hash, inp.key, inp.request_id)
    )
    assert decision.node_id.startswith("n") and decision.request_id == "r0"
