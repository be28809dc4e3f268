"""Hostile or broken agent reports are refused (INVALID_ARGUMENT, a log line, a metric)."""

from __future__ import annotations

from dataclasses import replace

import grpc
import pytest

from cacheroute.v1 import agent_pb2
from cacheroute_state import Stores
from controlplane.core.report_checks import (
    InvalidReportError,
    ReportRules,
    check_report,
    parse_networks,
)
from tests.support.controlplane import StubAgent, clients, fast_config, report
from tests.support.controlplane import running as running_plane

HOSTILE = [
    ("load", {"running": -1e9}),
    ("load", {"waiting": float("nan")}),
    ("load", {"running": float("inf")}),
    ("interval", {"interval_ms": 2**32 - 1}),
    ("interval", {"interval_ms": 10}),
]


@pytest.mark.parametrize(("reason", "fields"), HOSTILE)
def test_check_report_refuses_out_of_bounds_fields(reason: str, fields: dict[str, float]) -> None:
    with pytest.raises(InvalidReportError) as caught:
        check_report(report("n", **fields), ReportRules())  # type: ignore[arg-type]
    assert caught.value.reason == reason


def test_fractions_and_weights_are_bounded() -> None:
    for field, value in (("kv_usage", 1.5), ("prefix_hit_rate", -0.1), ("weight", 1e9)):
        msg = report("n")
        setattr(msg, field, value)
        with pytest.raises(InvalidReportError):
            check_report(msg, ReportRules())
    check_report(report("n", running=3, waiting=0, interval_ms=250), ReportRules())


def test_addresses_must_lie_in_the_allowed_networks_when_configured() -> None:
    rules = ReportRules(parse_networks(["10.1.0.0/16", "fd00::/8"]))
    check_report(report("n", address="10.1.2.3:8000"), rules)
    check_report(report("n", address="[fd00::1]:8000"), rules)
    for address in ("10.2.0.1:8000", "evil.example:8000", "[2001:db8::1]:80"):
        with pytest.raises(InvalidReportError, match="address"):
            check_report(report("n", address=address), rules)
    check_report(report("n", address="anything.example:1"), ReportRules())  # none configured
    with pytest.raises(ValueError, match="agent network"):
        parse_networks(["10.0.0.0/33"])


def rejected(plane: object, reason: str) -> float:
    value = plane.metrics.registry.get_sample_value(  # type: ignore[attr-defined]
        "cacheroute_controlplane_agent_reports_rejected_total", {"reason": reason}
    )
    return value or 0.0


@pytest.mark.redis
@pytest.mark.grpc
async def test_a_hostile_join_or_heartbeat_is_refused_and_never_reaches_a_snapshot(
    redis_url: str, stores: Stores
) -> None:
    config = replace(fast_config(redis_url), agent_networks=("10.0.0.0/8",))
    async with running_plane(config) as plane, clients(plane.address) as c:
        for n, (reason, fields) in enumerate(HOSTILE):
            agent = StubAgent(c.agents)
            await agent.send(report(f"bad-{n}", **fields))  # type: ignore[arg-type]
            assert await agent.status() == grpc.StatusCode.INVALID_ARGUMENT
            assert rejected(plane, reason) >= 1
        outsider = StubAgent(c.agents)
        await outsider.send(report("outsider", address="192.168.1.5:8000"))
        assert await outsider.status() == grpc.StatusCode.INVALID_ARGUMENT
        assert rejected(plane, "address") == 1

        good = StubAgent(c.agents)
        await good.send(report("good", address="10.0.0.7:8000", running=2))
        await good.read()
        await good.send(report("good", address="10.0.0.7:8000", running=-1e9))  # a later lie
        assert await good.status() == grpc.StatusCode.INVALID_ARGUMENT
        assert rejected(plane, "load") == 4
        nodes = {n.node_id for n in await stores.cluster.get_nodes("default")}
        assert nodes == {"good"}
        stored = await stores.cluster.get_report("default", "good")
        assert stored is not None and stored.report.running == 2


def test_a_refusal_quotes_only_a_few_dozen_bytes_of_the_value() -> None:
    msg = agent_pb2.NodeReport(node_id="n", address="h" * 1_000_000 + ":1")
    with pytest.raises(InvalidReportError) as caught:
        check_report(msg, ReportRules(parse_networks(["10.0.0.0/8"])))
    assert len(str(caught.value)) < 200


NAN = float("nan")


@pytest.mark.parametrize(
    ("bounds", "counts", "count"),
    [
        ([0.1, 0.5], [1.0], 1.0),  # a count missing
        ([0.5, 0.1], [1.0, 2.0], 2.0),  # bounds not ascending
        ([0.1, 0.1], [1.0, 2.0], 2.0),  # a repeated bound
        ([0.1, float("inf")], [1.0, 2.0], 2.0),  # +Inf is `count`, not a bound
        ([0.1, 0.5], [3.0, 2.0], 3.0),  # cumulative counts decreasing
        ([0.1, 0.5], [1.0, 2.0], 1.0),  # total below the last bucket
        ([0.1, 0.5], [1.0, NAN], 2.0),
        ([0.1, 0.5], [-1.0, 2.0], 2.0),
        ([float(i) for i in range(1, 100)], [0.0] * 99, 0.0),  # too many buckets
        ([0.1, 0.5], [1e13, 1e13], 1e13),  # more than an engine could ever count (issue 32)
    ],
)
def test_a_malformed_ttft_histogram_is_refused(
    bounds: list[float], counts: list[float], count: float
) -> None:
    msg = report("n")
    msg.ttft.CopyFrom(agent_pb2.LatencyHistogram(upper_bounds=bounds, counts=counts, count=count))
    with pytest.raises(InvalidReportError) as caught:
        check_report(msg, ReportRules())
    assert caught.value.reason == "ttft" and "ttft histogram" in str(caught.value)


def test_a_well_formed_ttft_histogram_passes() -> None:
    msg = report("n")
    msg.ttft.CopyFrom(
        agent_pb2.LatencyHistogram(upper_bounds=[0.1, 0.5], counts=[1, 3], count=4, sum=1.2)
    )
    check_report(msg, ReportRules())
