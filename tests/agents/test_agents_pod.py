"""The agent as a Kubernetes sidecar: the real ``python -m agents`` process against the real
control plane (in-process, real Redis), with the downward API's ``POD_IP``/``POD_NAME`` set.

The node address must be ``POD_IP:<engine port>`` (what a gateway dials) and the node id the
pod's name; on SIGTERM (pod deletion) the node is drained, as routers see it in the load
snapshot, for as long as the engine still holds requests, and only then does the agent leave.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from agents.__main__ import parse_args
from cacheroute.v1 import admin_pb2
from controlplane.core.node_states import state_of
from controlplane.server import ControlPlane
from tests.support.agents import EngineStub, engine, sample
from tests.support.controlplane import clients, quick_config, running
from tests.support.polling import eventually

__all__ = ["engine"]

pytestmark = [pytest.mark.grpc, pytest.mark.redis]
ROOT = Path(__file__).resolve().parents[2]
POD_IP = "10.244.3.17"
POD_NAME = "vllm-llama-7d9f8c6b5-x2k4q"


def idle_vllm_sample() -> str:
    """vllm_v1_a with nothing running or waiting: an engine that finished its requests."""
    return re.sub(
        r"^(vllm:num_requests_(?:running|waiting)\{[^}]*\}) \S+$",
        r"\1 0.0",
        sample("vllm_v1_a"),
        flags=re.MULTILINE,
    )


@pytest.fixture
async def controlplane(redis_url: str) -> AsyncIterator[ControlPlane]:
    async with running(quick_config(redis_url, load_publish_interval_s=0.05)) as cp:
        yield cp


@contextmanager
def agent_process(
    controlplane: ControlPlane, engine: EngineStub, log_path: Path, *extra: str
) -> Iterator[subprocess.Popen[bytes]]:
    """``python -m agents`` as the chart runs it: engine on localhost, identity from the pod."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CACHEROUTE_")}
    env |= {
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "proto")]),
        "POD_IP": POD_IP,
        "POD_NAME": POD_NAME,
    }
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "agents", "--engine-url", engine.url,
             "--controlplane", controlplane.address, "--interval", "0.05", *extra],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log_file,
        )  # fmt: skip
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


async def node_statuses(cp: ControlPlane) -> dict[str, admin_pb2.NodeStatus]:
    async with clients(cp.address) as c:
        listed = await c.nodes.ListNodes(admin_pb2.ListNodesRequest(pool="default"))
    return {s.record.node_id: s for s in listed.nodes}


def test_pod_ip_and_pod_name_are_fallbacks_under_the_explicit_options() -> None:
    pod = {"POD_IP": POD_IP, "POD_NAME": POD_NAME}
    args = parse_args(["--engine-url", "http://127.0.0.1:8000"], pod)
    assert (args.pod_ip, args.pod_name) == (POD_IP, POD_NAME)
    explicit = parse_args(["--pod-name", "gpu-a"], {**pod, "CACHEROUTE_POD_IP": "10.0.0.9"})
    assert (explicit.pod_ip, explicit.pod_name) == ("10.0.0.9", "gpu-a")
    assert parse_args([], {"POD_IP": "fd00::12"}).pod_ip == "[fd00::12]"


async def test_the_agent_registers_pod_ip_with_the_engine_port_and_the_pod_name(
    controlplane: ControlPlane, engine: EngineStub, tmp_path: Path
) -> None:
    engine.serve("vllm_v1_a")
    with agent_process(controlplane, engine, tmp_path / "agent.log") as proc:

        async def registered() -> bool:
            return POD_NAME in await node_statuses(controlplane)

        await eventually(registered, timeout=30)
        status = (await node_statuses(controlplane))[POD_NAME]
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(proc.wait, 15)
    assert status.record.address == f"{POD_IP}:{engine.port}"
    assert status.load.healthy and not status.record.static
    assert code == 0, (tmp_path / "agent.log").read_text()


async def test_sigterm_drains_the_node_while_the_engine_is_busy_then_the_agent_leaves(
    controlplane: ControlPlane, engine: EngineStub, tmp_path: Path
) -> None:
    engine.serve("vllm_v1_a")  # 7 running, 3 waiting
    log_path = tmp_path / "agent.log"
    with agent_process(controlplane, engine, log_path, "--drain-timeout", "120") as proc:

        async def state(wanted: str) -> bool:
            status = (await node_statuses(controlplane)).get(POD_NAME)
            return status is not None and state_of(status) == wanted

        await eventually(lambda: state("healthy"), timeout=30)
        proc.send_signal(signal.SIGTERM)
        await eventually(lambda: state("draining"), timeout=15)
        assert controlplane.stores is not None

        async def routers_see_it_drained() -> bool:
            assert controlplane.stores is not None
            snapshot = await controlplane.stores.cluster.get_load("default")
            nodes = {n.node_id: n for n in snapshot.nodes} if snapshot else {}
            return POD_NAME in nodes and nodes[POD_NAME].draining

        await eventually(routers_see_it_drained, timeout=15)
        # Drained, not gone: the engine still holds requests, so the agent keeps reporting.
        assert proc.poll() is None, log_path.read_text()
        assert not (await node_statuses(controlplane))[POD_NAME].down
        engine.body = idle_vllm_sample()  # the engine finished what it held
        code = await asyncio.to_thread(proc.wait, 30)
    logs = log_path.read_text()
    assert code == 0, logs
    assert "agent_drained" in logs and "agent_drain_timed_out" not in logs
    gone = (await node_statuses(controlplane))[POD_NAME]
    assert gone.down and state_of(gone) == "down"
