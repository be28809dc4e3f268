"""``python -m dataplane`` as a real process: options, serving, and a clean exit on SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cacheroute.v1 import routing_pb2, routing_pb2_grpc
from cacheroute_state import Stores
from servekit.processes import free_port
from tests.support.factories import small_plan, store_plan
from tests.support.router import NODES, load_snapshot, rollout, warm_keys
from tests.support.timing import run_patiently

ROOT = Path(__file__).resolve().parents[2]


def test_help_documents_every_option_and_its_environment_variable() -> None:
    result = run_patiently(
        [sys.executable, "-m", "dataplane", "--help"],
        capture_output=True, text=True, check=True, cwd=ROOT, timeout=60,
    )  # fmt: skip
    text = " ".join(result.stdout.split())
    for option in ("--listen", "--redis-url", "--router-id", "--policy", "--seed",
                   "--table-interval", "--ack-interval", "--report-interval", "--top-keys",
                   "--sample-rate", "--metrics-listen", "--tls-cert", "--tls-key",
                   "--tls-client-ca", "--log-format", "--config", "--grace"):  # fmt: skip
        assert option in text
    assert "(env: CACHEROUTE_REDIS_URL)" in text
    assert "(env: CACHEROUTE_SAMPLE_RATE)" in text


def test_inconsistent_tls_options_are_refused() -> None:
    result = run_patiently(
        [sys.executable, "-m", "dataplane", "--tls-cert", "/nonexistent.pem"],
        check=False, capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert "--tls-cert and --tls-key go together" in result.stderr


@pytest.mark.redis
@pytest.mark.grpc
async def test_the_router_process_serves_route_and_exits_cleanly_on_sigterm(
    redis_url: str, stores: Stores, tmp_path: Path
) -> None:
    table = small_plan(seed=1)
    await rollout(stores, await store_plan(stores, table))
    await stores.cluster.publish_load(load_snapshot(dict.fromkeys(NODES, 0.0), seq=1))
    listen = f"127.0.0.1:{free_port()}"
    config = tmp_path / "router.yaml"
    config.write_text("seed: 7\nsample-rate: 0.5\n")
    env = {**os.environ, "CACHEROUTE_POLICY": "cacheroute", "CACHEROUTE_ROUTER_ID": "proc-1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "dataplane", "--listen", listen, "--redis-url", redis_url,
         "--config", str(config), "--grace", "1"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        async with grpc.aio.insecure_channel(listen) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            deadline = time.monotonic() + 30
            while True:
                try:
                    reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=1)
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        break
                except grpc.aio.AioRpcError:
                    pass
                assert process.poll() is None, process.stderr.read() if process.stderr else ""
                assert time.monotonic() < deadline, "router did not become SERVING"
                await asyncio.sleep(0.1)
            stub = routing_pb2_grpc.RouterServiceStub(channel)
            key = warm_keys(table)[0]
            decision = await stub.Route(routing_pb2.RouteRequest(key=key, request_id="x1"))
        assert (decision.version, decision.generation, decision.request_id) == (
            table.version,
            1,
            "x1",
        )
        assert decision.policy == "cacheroute"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    _, err = process.communicate()  # the rest of its output, and both pipes closed
    stderr = err.decode()
    events = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    names = [e["event"] for e in events]
    assert "router serving" in names and names[-1] == "router stopped"
    serving = next(e for e in events if e["event"] == "router serving")
    assert serving["router_id"] == "proc-1"
    assert serving["metrics_port"] > 0
    assert all(e["service"] == "dataplane" for e in events)
    acks = await stores.cluster.get_acks("default")
    assert [(a.router_id, a.version) for a in acks] == [("proc-1", table.version)]
