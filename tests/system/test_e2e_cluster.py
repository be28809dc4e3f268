"""End to end: the local cluster as subprocesses, load through Route, an engine killed mid-run.

"The agent noticed" is the moment the victim's agent logged ``engine_unhealthy`` (its first
failed scrape; the report it sends at once says ``stale``), read from the agents' log. The
control plane's view is checked too: the node turns unhealthy in ``ListNodes``. The claim under
test: no router decision chose the dead engine later than 1 s after its agent noticed.
Decisions come from the load itself and from a probe routing a fresh key every 5 ms around the
kill; their times are taken on the client when the Route answer arrives (later than the router's
own decision, so the measurement errs against the routers). The probe runs until it has
``PROBES_AFTER`` decisions past the bound (however long a busy machine takes to make them), so
the window where a late decision would show is always covered; the bounds themselves are claimed
through the schedule-lag meter (tests/support/timing.py): missed on a starved machine, skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import grpc
import pytest

from cachectl.loadgen.client import LoadClient
from cachectl.loadgen.results import summarize
from cachectl.loadgen.runner import replay
from cachectl.loadgen.workloads import resolve
from cachectl.localcluster.cluster import LocalCluster
from cachectl.localcluster.spec import ClusterError, ClusterSpec
from cacheroute.v1 import routing_pb2, routing_pb2_grpc
from sim.engine_model import LLAMA_8B
from tests.support.polling import eventually
from tests.support.timing import LagMeter, patiently

# The timeout is a hang guard, not a bound: a busy machine stretches the waits.
pytestmark = [pytest.mark.e2e, pytest.mark.redis, pytest.mark.grpc, pytest.mark.timeout(300)]

VICTIM = "sim-3"
NOTICE_BOUND_S = 1.0
SCRAPE_BOUND_S = 1.0  # the agent scrapes every 250 ms: it notices within a second of the kill
PROBES_AFTER = 100  # probe decisions past noticed + NOTICE_BOUND_S before the probe stops


async def _true(value: bool) -> bool:
    return value


def agent_noticed_at(log: Path, node_id: str) -> float | None:
    """Unix time of the first ``engine_unhealthy`` event of ``node_id`` in the agents' log."""
    for line in log.read_text().splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("event") == "engine_unhealthy" and event.get("node_id") == node_id:
            return datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00")).timestamp()
    return None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ")[-1].startswith("Z"))


async def controlplane_unhealthy_at(cluster: LocalCluster, node_id: str, timeout: float) -> float:
    """Unix time at which the control plane received the report that made the node unhealthy."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for status in await cluster.nodes():
            if status.record.node_id == node_id and (status.down or not status.load.healthy):
                return time.time() - max(0, status.last_report_age_ms) / 1000.0
        await asyncio.sleep(0.02)
    pytest.fail(f"the control plane never marked {node_id} unhealthy")


async def probe_routes(
    addresses: list[str],
    stop: asyncio.Event,
    decisions: list[tuple[float, str]],
    interval_s: float = 0.005,
) -> None:
    """Route a fresh key on each router every ``interval_s`` into ``decisions``: a fine timeline
    of decisions, readable while it grows."""
    channels = [grpc.aio.insecure_channel(a) for a in addresses]
    stubs: list[Any] = [routing_pb2_grpc.RouterServiceStub(c) for c in channels]
    try:
        i = 0
        while not stop.is_set():
            request = routing_pb2.RouteRequest(key=f"probe-{i}")
            with contextlib.suppress(grpc.aio.AioRpcError):
                answer = await stubs[i % len(stubs)].Route(request, timeout=1.0)
                decisions.append((time.time(), answer.node_id))
            i += 1
            await asyncio.sleep(interval_s)
    finally:
        for channel in channels:
            await channel.close()


@pytest.mark.slow
async def test_routers_stop_choosing_a_killed_engine_within_a_second_of_its_agent_noticing(
    tmp_path: Path, lag: LagMeter
) -> None:
    spec = ClusterSpec(
        engines=4,
        routers=2,
        engine_groups=((0, 1, 2), (3,)),  # the victim runs in its own process
        profile=LLAMA_8B.name,
        stream_interval_s=0.25,
    )
    workload = resolve("tenants", {"top_k": 16, "context_tokens": 512})
    requests = workload.requests(qps=30, duration_s=7.0, seed=1)
    cluster = LocalCluster(spec, tmp_path / "logs")
    try:
        cluster.start()
        await patiently(cluster.wait_ready, 60, gives_up=ClusterError)
        async with LoadClient(cluster.router_addresses) as client:
            load = asyncio.create_task(replay(client, requests, drain_timeout_s=20))
            stop_probe = asyncio.Event()
            probed: list[tuple[float, str]] = []
            probe = asyncio.create_task(probe_routes(cluster.router_addresses, stop_probe, probed))
            await eventually(lambda: _true(len(probed) >= PROBES_AFTER), timeout=60)
            victim = cluster.engine_process_of(VICTIM)
            killed_at = time.time()
            victim.signal(signal.SIGKILL)
            cp_noticed = await controlplane_unhealthy_at(cluster, VICTIM, timeout=30)
            bound = cp_noticed + NOTICE_BOUND_S

            async def covered() -> bool:  # enough decisions past the bound to see a late one
                return sum(1 for t, _ in probed if t > bound) >= PROBES_AFTER

            await eventually(covered, timeout=60)
            stop_probe.set()
            await probe
            outcomes = await load
        survivors_alive = all(p.running() for p, _ in cluster.engine_processes if p is not victim)
    finally:
        cluster.stop()
    pids = cluster.pids()
    assert not [pid for pid in pids if alive(pid)], "processes left behind"

    noticed = agent_noticed_at(cluster.log_dir / "agents.log", VICTIM)
    assert noticed is not None, "the victim's agent never logged engine_unhealthy"
    assert killed_at <= noticed
    lag.claim(noticed <= killed_at + SCRAPE_BOUND_S, "the agent noticed within 1 s of the kill")
    assert noticed <= cp_noticed + 0.05
    chose_victim = sorted(
        [o.routed_unix for o in outcomes if o.node_id == VICTIM]
        + [t for t, node in probed if node == VICTIM]
    )
    assert chose_victim and chose_victim[0] < killed_at, "the victim was never chosen before"
    last = chose_victim[-1]
    print(
        f"\nkill → agent noticed {noticed - killed_at:.3f} s; control plane +"
        f"{cp_noticed - noticed:.3f} s; last decision for {VICTIM} {last - noticed:+.3f} s "
        f"after the agent noticed ({len(chose_victim)} decisions chose it)"
    )
    lag.claim(
        last - noticed <= NOTICE_BOUND_S,
        f"a router chose {VICTIM} {last - noticed:.3f} s after its agent noticed (bound 1 s)",
    )
    # Only requests routed to the victim before the routers knew fail; the rest complete.
    assert survivors_alive
    summary = summarize(outcomes)
    assert set(summary.errors) <= {"engine:connect", "engine:disconnected"}
    late = [o for o in outcomes if o.routed_unix > noticed + NOTICE_BOUND_S]
    assert late and all(o.error is None and o.node_id != VICTIM for o in late)
