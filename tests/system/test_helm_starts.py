"""The default Helm install starts, authenticated (issue 32, failure 1: it listened on 0.0.0.0 with
no auth file and no explicit opt-out, so the control plane and the router refused to start).

The trial Redis, a control plane and a router run as real processes with the command, arguments
and environment the chart's default render gives their containers (Secrets resolved from the
rendered Secrets, the downward API from a made-up Pod); only listen addresses move to loopback on
free ports and the store URL's Service name to the local Redis (tests/support/helm_run.py). Before
that, the unchanged arguments (``0.0.0.0``) pass each server's own option checks, protected mode
included. Then both serve: the control plane answers the generated operator token and refuses an
anonymous caller, the router routes to a node added through it, the picker answers the gateway.
"""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import redis
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_grpc

from cachectl.localcluster.processes import stop_all
from cacheroute.v1 import admin_pb2, admin_pb2_grpc, routing_pb2, routing_pb2_grpc
from cacheroute_state.embedded import find_redis_server
from controlplane.config import parse_config
from dataplane.__main__ import config_from, parse_args
from servekit.processes import free_port
from tests.support import extproc as m
from tests.support.helm_run import (
    POD,
    ChartProc,
    container,
    environment,
    loopback_args,
    secret_data,
    write_secret_file,
)
from tests.support.polling import eventually

pytestmark = [pytest.mark.redis, pytest.mark.grpc, pytest.mark.slow, pytest.mark.timeout(180)]
AUTH_PATH = "/etc/cacheroute/auth/auth.yaml"
REDIS_CONF = "/etc/redis/redis.conf"


@pytest.fixture
def trial_redis(tmp_path: Path) -> Iterator[str]:
    """The chart's trial Redis with its arguments and password file; yields its HOST:PORT."""
    spec = container("default", "-redis/redis")
    conf = write_secret_file(tmp_path, "redis.conf", secret_data("default", "-store")["redis.conf"])
    args = [str(a) for a in spec["args"]]
    port = free_port()
    args[args.index("--port") + 1] = str(port)
    args[args.index("--bind") + 1] = "127.0.0.1"
    args[args.index("--dir") + 1] = str(tmp_path)
    binary = find_redis_server()
    log = (tmp_path / "redis.log").open("wb")
    process = subprocess.Popen(
        [str(binary), *(str(conf) if a == REDIS_CONF else a for a in args)],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(10)
        log.close()


def test_the_trial_redis_wants_the_generated_password(trial_redis: str) -> None:
    host, port = trial_redis.split(":")
    password = secret_data("default", "-store")["redis-password"]
    assert re.fullmatch(r"[A-Za-z0-9]{32,}", password)
    assert secret_data("default", "-store")["url"].startswith(f"redis://:{password}@")
    deadline = time.monotonic() + 30
    while True:
        client = redis.Redis(host=host, port=int(port), password=password)
        try:
            assert client.ping()
            break
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
        finally:
            client.close()
    anonymous = redis.Redis(host=host, port=int(port))
    try:
        with pytest.raises(redis.AuthenticationError):
            anonymous.ping()
    finally:
        anonymous.close()


def chart_env(suffix: str, redis_address: str) -> dict[str, str]:
    env = environment("default", container("default", suffix))
    url = env["CACHEROUTE_REDIS_URL"]
    env["CACHEROUTE_REDIS_URL"] = re.sub(r"@[^/]+/", f"@{redis_address}/", url)
    return env


async def test_the_default_render_starts_both_servers_and_they_serve(
    trial_redis: str, tmp_path: Path
) -> None:
    auth = secret_data("default", "-auth")
    files = {AUTH_PATH: write_secret_file(tmp_path, "auth.yaml", auth["auth.yaml"])}
    cp_spec = container("default", "-controlplane/controlplane")
    router_spec = container("default", "-router/router")
    cp_env = chart_env("-controlplane/controlplane", trial_redis)
    router_env = chart_env("-router/router", trial_redis)
    # The chart's own arguments, 0.0.0.0 and all, pass each server's checks (protected mode).
    exact = [str(files.get(a, a)) for a in cp_spec["args"]]
    assert "0.0.0.0:50051" in exact
    parse_config(exact, cp_env)
    exact = [str(files.get(a, a)) for a in router_spec["args"]]
    assert {"0.0.0.0:50061", "0.0.0.0:9002"} <= set(exact)
    router_config = config_from(parse_args(exact, router_env))
    assert router_config.auth is not None
    procs: list[ChartProc] = []
    try:
        for name, spec, env in (
            ("controlplane", cp_spec, cp_env),
            ("router", router_spec, router_env),
        ):
            assert spec["command"][0] == "python"
            args = [sys.executable, *spec["command"][1:], *loopback_args(spec["args"], files)]
            procs.append(ChartProc(name, args, tmp_path, env).start())
        cp, router = procs
        cp_address = (await cp.logged("control plane serving", "listen", timeout=60))[0]
        serving = (await router.logged("router serving", "address", timeout=60))[0]
        picker_port = router.events("router serving")[0]["extproc_port"]
        await serve_checks(cp_address, serving, f"127.0.0.1:{picker_port}", auth)
        for proc in procs:
            proc.check()
            assert "Traceback" not in proc.log_path.read_text(errors="replace")
    finally:
        stop_all(procs, grace_s=5.0)


async def serve_checks(cp: str, router: str, picker: str, auth: dict[str, str]) -> None:
    admin = (("authorization", f"Bearer {auth['admin-token']}"),)
    async with grpc.aio.insecure_channel(cp) as channel:
        nodes = admin_pb2_grpc.NodeServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await nodes.ListNodes(admin_pb2.ListNodesRequest(), timeout=10)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        request = admin_pb2.AddNodeRequest(node_id="n1", address="127.0.0.1:8000")
        await nodes.AddNode(request, metadata=admin, timeout=10)
    async with grpc.aio.insecure_channel(router) as channel:
        stub = routing_pb2_grpc.RouterServiceStub(channel)

        async def routed() -> bool:
            try:
                answer = await stub.Route(routing_pb2.RouteRequest(key="k"), timeout=5)
            except grpc.aio.AioRpcError:
                return False
            return str(answer.node_id) == "n1"

        await eventually(routed, timeout=60)
    async with grpc.aio.insecure_channel(picker) as channel:
        call = ext_grpc.ExternalProcessorStub(channel).Process(
            iter([m.request_headers({"x-cacheroute-key": "k"}, end_of_stream=True)])
        )
        answers = [answer async for answer in call]
    assert m.picked(answers) == ["127.0.0.1:8000"]


def replica(name: str, spec: dict[str, Any], env: dict[str, str], index: int,
            files: dict[str, Path], workdir: Path) -> ChartProc:  # fmt: skip
    """Replica ``index`` of a rendered container: its Pod name (and what derives from it) is
    ``cr-pod-<index>``, as a Deployment's second Pod would differ from the first."""
    pod = POD["metadata.name"]
    own = {k: v.replace(pod, f"cr-pod-{index}") for k, v in env.items()}
    args = [sys.executable, *spec["command"][1:], *loopback_args(spec["args"], files)]
    return ChartProc(f"{name}-{index}", args, workdir, own).start()


async def test_two_replicas_of_each_serve_and_one_of_each_stops_while_the_others_go_on(
    trial_redis: str, tmp_path: Path
) -> None:
    """The chart's default runs two control planes and two routers. Both of each start from the
    rendered command, arguments and environment; one of each is stopped (SIGTERM, as the kubelet
    does: the leader) and exits cleanly; the survivors go on: the other control plane takes the
    lease and publishes what an operator changes through it, and the other router follows it."""
    auth = secret_data("default", "-auth")
    admin = (("authorization", f"Bearer {auth['admin-token']}"),)
    files = {AUTH_PATH: write_secret_file(tmp_path, "auth.yaml", auth["auth.yaml"])}
    cp_spec = container("default", "-controlplane/controlplane")
    router_spec = container("default", "-router/router")
    cp_env = chart_env("-controlplane/controlplane", trial_redis)
    router_env = chart_env("-router/router", trial_redis)
    procs: list[ChartProc] = []
    try:
        cps = [replica("controlplane", cp_spec, cp_env, i, files, tmp_path) for i in (0, 1)]
        routers = [replica("router", router_spec, router_env, i, files, tmp_path) for i in (0, 1)]
        procs = [*cps, *routers]
        cp_addresses = [(await p.logged("control plane serving", "listen", timeout=60))[0]
                        for p in cps]  # fmt: skip
        router_addresses = [(await p.logged("router serving", "address", timeout=60))[0]
                            for p in routers]  # fmt: skip
        async with grpc.aio.insecure_channel(cp_addresses[0]) as channel:
            nodes = admin_pb2_grpc.NodeServiceStub(channel)
            for node in ("n1", "n2"):
                request = admin_pb2.AddNodeRequest(node_id=node, address=f"{node}.svc:8000")
                await nodes.AddNode(request, metadata=admin, timeout=10)
        for address in router_addresses:
            assert await routes_only_to(address, {"n1", "n2"})

        async def elected() -> bool:
            return any(p.events("became leader") for p in cps)

        await eventually(elected, timeout=60)
        leader = next(i for i, p in enumerate(cps) if p.events("became leader"))
        survivor = cps[1 - leader]
        for stopped in (cps[leader], routers[0]):
            stopped.signal(signal.SIGTERM)
        for stopped in (cps[leader], routers[0]):
            assert await asyncio.to_thread(stopped.wait, 30.0), f"{stopped.name} did not stop"
            assert stopped.process is not None and stopped.process.returncode == 0, stopped.tail()

        await survivor.logged("became leader", "term", timeout=60)  # the lease, handed over
        async with grpc.aio.insecure_channel(cp_addresses[1 - leader]) as channel:
            nodes = admin_pb2_grpc.NodeServiceStub(channel)
            drain = admin_pb2.SetDrainingRequest(node_id="n1", draining=True, actor="test")
            await nodes.SetDraining(drain, metadata=admin, timeout=10)
        # Only a leader publishes load snapshots: n1 drained reaches the router only if the
        # surviving control plane took the lease.
        assert await routes_only_to(router_addresses[1], {"n2"})
        for proc in (survivor, routers[1]):
            proc.check()
            assert "Traceback" not in proc.log_path.read_text(errors="replace")
    finally:
        stop_all(procs, grace_s=5.0)


async def routes_only_to(router: str, allowed: set[str]) -> bool:
    """Eventually, 20 Route calls in a row answer only nodes in ``allowed``."""
    async with grpc.aio.insecure_channel(router) as channel:
        stub = routing_pb2_grpc.RouterServiceStub(channel)

        async def settled() -> bool:
            try:
                answers = [await stub.Route(routing_pb2.RouteRequest(key=f"k{i}"), timeout=5)
                           for i in range(20)]  # fmt: skip
            except grpc.aio.AioRpcError:
                return False
            return {str(a.node_id) for a in answers} <= allowed

        await eventually(settled, timeout=60)
    return True
