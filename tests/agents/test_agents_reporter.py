"""agents.reporter against a real gRPC AgentService: join, seq, directives, reconnect, leaving."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from agents.agent_metrics import AgentMetrics, NodeMetrics
from agents.dialing import Backoff
from agents.reporter import Reporter
from cacheroute.v1 import agent_pb2
from tests.support.agents import (
    ControlPlaneStub,
    RecordingAgentService,
    controlplane,
    wait_until,
)
from tests.support.timing import LagMeter

__all__ = ["controlplane"]

pytestmark = pytest.mark.grpc


def report(n: float = 1.0) -> agent_pb2.NodeReport:
    return agent_pb2.NodeReport(
        node_id="n1", pool="default", address="127.0.0.1:8000", running=n, healthy=True
    )


def reporter_for(target: str, metrics: NodeMetrics | None = None) -> Reporter:
    return Reporter(
        target,
        metrics=metrics or AgentMetrics().for_node("n1"),
        backoff=Backoff(base_s=0.05, cap_s=0.2, rng=random.Random(7)),
        close_timeout_s=1.0,
    )


async def test_the_first_report_joins_with_seq_1_and_seq_counts_up(
    controlplane: ControlPlaneStub,
) -> None:
    reporter = reporter_for(controlplane.target)
    reporter.start()
    for n in range(3):
        reporter.offer(report(n))
        await wait_until(lambda n=n: len(controlplane.service.reports) > n)  # type: ignore[misc]
    await reporter.close()
    got = [r for _, r in controlplane.service.reports]
    assert [r.seq for r in got] == [1, 2, 3]
    assert (got[0].node_id, got[0].pool, got[0].address) == ("n1", "default", "127.0.0.1:8000")
    assert all(r.sent_at_unix_ms > 0 for r in got)


async def test_only_the_newest_unsent_report_is_kept(controlplane: ControlPlaneStub) -> None:
    reporter = reporter_for(controlplane.target)
    for n in range(5):
        reporter.offer(report(n))  # not started: nothing is sent yet
    reporter.start()
    await wait_until(lambda: len(controlplane.service.reports) == 1)
    await asyncio.sleep(0.05)
    await reporter.close()
    assert [r.running for _, r in controlplane.service.reports] == [4.0]


async def test_the_reporter_adopts_the_directed_report_interval() -> None:
    service = RecordingAgentService(agent_pb2.AgentDirective(report_interval_ms=500, draining=True))
    cp = await ControlPlaneStub(service).start()
    try:
        reporter = reporter_for(cp.target)
        reporter.start()
        reporter.offer(report())
        await wait_until(lambda: reporter.interval_ms == 500)
        assert reporter.draining
        await reporter.close()
    finally:
        await cp.stop()


async def test_a_directed_interval_is_clamped() -> None:
    service = RecordingAgentService(agent_pb2.AgentDirective(report_interval_ms=1))
    cp = await ControlPlaneStub(service).start()
    try:
        reporter = reporter_for(cp.target)
        reporter.start()
        reporter.offer(report())
        await wait_until(lambda: reporter.interval_ms is not None)
        assert reporter.interval_ms == 50
        await reporter.close()
    finally:
        await cp.stop()


async def test_the_reporter_reconnects_after_a_control_plane_restart_and_continues_seq() -> None:
    cp = await ControlPlaneStub().start()
    metrics = AgentMetrics().for_node("n1")
    reporter = reporter_for(cp.target, metrics)
    reporter.start()
    try:
        reporter.offer(report(1))
        await wait_until(lambda: len(cp.service.reports) == 1)
        await cp.stop()
        await wait_until(lambda: not reporter.connected)
        reporter.offer(report(2))  # written into a dead stream or held: either way not lost
        await asyncio.sleep(0.3)  # a few failed reconnects while the control plane is down
        cp.service = RecordingAgentService()
        await cp.start()  # same port
        await wait_until(lambda: len(cp.service.reports) >= 1)
        reporter.offer(report(3))
        await wait_until(lambda: any(r.running == 3 for _, r in cp.service.reports))
    finally:
        await reporter.close()
        await cp.stop()
    after = [r for _, r in cp.service.reports]
    assert after[0].seq > 1  # seq goes on across the reconnect
    assert [r.seq for r in after] == sorted({r.seq for r in after})
    assert (after[0].node_id, after[0].address) == ("n1", "127.0.0.1:8000")  # re-joins
    reconnects = metrics.families.registry.get_sample_value(
        "cacheroute_agent_reconnects_total", {"node_id": "n1"}
    )
    assert reconnects is not None and reconnects >= 1


async def test_close_sends_leaving_and_ends_the_stream(controlplane: ControlPlaneStub) -> None:
    reporter = reporter_for(controlplane.target)
    reporter.start()
    reporter.offer(report(1))
    await wait_until(lambda: len(controlplane.service.reports) == 1)
    await reporter.close(report(2))
    last = controlplane.service.reports[-1][1]
    assert last.leaving and last.running == 2 and last.seq == 2
    assert reporter.leaving_sent
    await wait_until(lambda: controlplane.service.ended_streams == 1)


async def test_close_without_a_control_plane_returns_promptly(lag: LagMeter) -> None:
    cp = await ControlPlaneStub().start()
    target = cp.target
    await cp.stop()
    reporter = reporter_for(target)
    reporter.start()
    reporter.offer(report())
    await asyncio.sleep(0.2)
    started = time.monotonic()
    await reporter.close(report())
    lag.claim(time.monotonic() - started < 2.5, "close returned within 2.5 s")
    assert not reporter.leaving_sent and not reporter.connected


def test_backoff_doubles_with_jitter_up_to_the_cap_and_resets() -> None:
    backoff = Backoff(base_s=0.2, cap_s=5.0, rng=random.Random(1))
    delays = [backoff.next_delay() for _ in range(8)]
    for n, delay in enumerate(delays):
        ceiling = min(5.0, 0.2 * 2**n)
        assert ceiling / 2 <= delay <= ceiling
    assert max(delays) <= 5.0
    backoff.reset()
    assert backoff.next_delay() <= 0.2


def test_backoff_rejects_a_cap_below_its_base() -> None:
    with pytest.raises(ValueError, match="base"):
        Backoff(base_s=1.0, cap_s=0.5)
