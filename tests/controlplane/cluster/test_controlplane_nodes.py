"""Node registry and liveness: the pure state rules (down, unhealthy, idle, draining) and
addresses. Agents over real gRPC are in test_controlplane_agent_nodes.py, static nodes in
test_controlplane_static_nodes.py."""

from __future__ import annotations

import pytest

from cacheroute.v1 import agent_pb2, cluster_pb2
from cacheroute_state.interfaces import ReportRecord
from controlplane.cluster.nodes import (
    InvalidAddressError,
    Liveness,
    node_status,
    validate_address,
)
from controlplane.core.node_states import state_of
from tests.support.controlplane import report

NOW = 1_700_000_000_000


def agent_record(node_id: str = "n1") -> cluster_pb2.NodeRecord:
    return cluster_pb2.NodeRecord(node_id=node_id, pool="default", address="h:1")


def received(msg: agent_pb2.NodeReport, at: int = NOW) -> ReportRecord:
    return ReportRecord(report=msg, received_at_unix_ms=at, stream_id="s")


def test_agent_node_is_down_only_after_three_of_its_own_report_intervals() -> None:
    live = Liveness(timeout_intervals=3, default_interval_ms=250)
    msg = report("n1", running=2, waiting=3, interval_ms=100)
    fresh = node_status(agent_record(), received(msg), NOW + 300, live)
    late = node_status(agent_record(), received(msg), NOW + 301, live)
    assert not fresh.down and fresh.load.healthy and fresh.load.load == 5
    assert late.down and not late.load.healthy
    assert late.last_report_age_ms == 301


def test_report_without_interval_uses_the_configured_one() -> None:
    live = Liveness(timeout_intervals=3, default_interval_ms=250)
    msg = report("n1", interval_ms=0)
    assert not node_status(agent_record(), received(msg), NOW + 750, live).down
    assert node_status(agent_record(), received(msg), NOW + 751, live).down


def test_stale_report_makes_the_node_unhealthy_not_idle_and_not_down() -> None:
    status = node_status(
        agent_record(), received(report("n1", running=4, stale=True)), NOW + 10, Liveness()
    )
    assert not status.down
    assert not status.load.healthy
    assert status.load.load == 4


def test_leaving_or_never_reported_agent_node_is_down() -> None:
    leaving = node_status(agent_record(), received(report("n1", leaving=True)), NOW, Liveness())
    never = node_status(agent_record(), None, NOW, Liveness())
    assert leaving.down and never.down
    assert never.last_report_age_ms == -1


def test_static_node_is_healthy_with_zero_load_and_draining_is_separate() -> None:
    record = cluster_pb2.NodeRecord(node_id="s", address="h:1", static=True, draining=True)
    status = node_status(record, None, NOW, Liveness())
    assert status.load.healthy and not status.down
    assert status.load.draining and status.load.load == 0


@pytest.mark.parametrize(
    "address", ["h:1", "10.0.0.1:8000", "[::1]:50051", "node-a.example.com:65535"]
)
def test_valid_addresses(address: str) -> None:
    assert validate_address(address) == address


@pytest.mark.parametrize(
    "address", ["", "host", ":80", "h:0", "h:65536", "h:x", "::1:80", "a b:1", "h/x:1", "[::1:80"]
)
def test_invalid_addresses_name_the_problem(address: str) -> None:
    with pytest.raises(InvalidAddressError, match="address"):
        validate_address(address)


def test_an_agents_draining_report_drains_the_node_until_a_new_stream_joins_without_it() -> None:
    draining = report("n1", running=3)
    draining.draining = True
    status = node_status(agent_record(), received(draining), NOW, Liveness())
    assert status.load.draining and not status.down and state_of(status) == "draining"
    draining.leaving = True  # it left drained: down, and still out of the panic count
    left = node_status(agent_record(), received(draining), NOW, Liveness())
    assert left.down and left.load.draining and state_of(left) == "down"
    rejoined = node_status(agent_record(), received(report("n1")), NOW, Liveness())
    assert not rejoined.load.draining and state_of(rejoined) == "healthy"
