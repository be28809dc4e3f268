"""`nodes list` columns: KIND is the engine kind the agent reported, HIT its interval hit rate."""

from __future__ import annotations

from cachectl.nodes_cmd import HEADERS, node_rows
from cacheroute.v1 import admin_pb2, agent_pb2, cluster_pb2


def _status(kind: int, *, static: bool = False, hit: float | None = None) -> admin_pb2.NodeStatus:
    load = cluster_pb2.NodeLoad(node_id="n", healthy=True)
    if hit is not None:
        load.prefix_hit_rate = hit
    record = cluster_pb2.NodeRecord(node_id="n", address="h:1", static=static, engine_kind=kind)
    return admin_pb2.NodeStatus(record=record, load=load)


def _column(status: admin_pb2.NodeStatus, name: str) -> object:
    return node_rows([status])[0][HEADERS.index(name)]


def test_kind_names_the_engine_an_agent_reported() -> None:
    assert _column(_status(agent_pb2.ENGINE_KIND_LLAMACPP), "KIND") == "llamacpp"
    assert _column(_status(agent_pb2.ENGINE_KIND_VLLM), "KIND") == "vllm"
    assert _column(_status(agent_pb2.ENGINE_KIND_SGLANG), "KIND") == "sglang"
    assert _column(_status(agent_pb2.ENGINE_KIND_SIMULATED), "KIND") == "simulated"


def test_kind_is_static_for_an_operator_node_and_agent_before_a_report_says() -> None:
    assert _column(_status(agent_pb2.ENGINE_KIND_UNSPECIFIED, static=True), "KIND") == "static"
    assert _column(_status(agent_pb2.ENGINE_KIND_UNSPECIFIED), "KIND") == "agent"


def test_hit_is_the_interval_hit_rate_or_a_dash_when_unknown() -> None:
    assert _column(_status(agent_pb2.ENGINE_KIND_LLAMACPP, hit=0.5), "HIT") == "50.0%"
    assert _column(_status(agent_pb2.ENGINE_KIND_LLAMACPP), "HIT") == "-"
