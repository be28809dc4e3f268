"""Hostile node addresses never reach a gateway (issue 32, failure 5: an agent reported
``evil,IP:PORT`` and it became two endpoints of ``x-gateway-destination-endpoint``; NUL, ``;``,
quotes and U+202E passed through; the fake nodes were in 300 of 300 picks).

A real control plane on a real Redis refuses each at the node report (the agent stream) and at
``AddNode``, naming the address; ``cachectl nodes add`` refuses it before calling, naming
``--address``; and a router whose store holds one anyway (written past the control plane) never
puts it into a pick: over real gRPC, the picker's header and metadata hold only valid endpoints.
"""

from __future__ import annotations

import grpc
import pytest
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_grpc

from cacheroute.v1 import admin_pb2
from cacheroute_state import Stores
from dataplane.core.addresses import is_endpoint
from dataplane.extproc.context import ExtProcConfig
from tests.support import extproc as m
from tests.support.cli import Cli
from tests.support.controlplane import StubAgent, clients, quick_config, report, running
from tests.support.polling import eventually
from tests.support.router import load_snapshot, running_router

pytestmark = [pytest.mark.redis, pytest.mark.grpc, pytest.mark.timeout(120)]
HOSTILE = [
    "evil.example:80,10.0.0.1:8000",
    "10.0.0.9\x00:8000",
    "a;b:8000",
    '"x":8000',
    "evil\u202egro:8000",
    "10.0.0.1:70000",
]


async def test_the_control_plane_refuses_them_at_the_report_and_at_add_node(
    redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    async with running(quick_config(redis_url)) as plane, clients(plane.address) as c:
        for address in HOSTILE:
            agent = StubAgent(c.agents)
            await agent.send(report("gpu-1", address=address, interval_ms=60_000))
            assert await agent.status() == grpc.StatusCode.INVALID_ARGUMENT
            assert "address" in (await agent.call.details() or "")
            request = admin_pb2.AddNodeRequest(node_id="s1", address=address)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await c.nodes.AddNode(request)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "address" in (refused.value.details() or "")
            line = await Cli(plane, capsys).refused("nodes", "add", "s1", "--address", address)
            assert "--address" in line
        assert (await c.nodes.ListNodes(admin_pb2.ListNodesRequest())).nodes == []


async def test_a_hostile_address_in_the_store_never_reaches_the_pick(
    redis_url: str, stores: Stores
) -> None:
    addresses = {"good-0": "10.0.0.1:8000", "good-1": "10.0.0.2:8000"}
    addresses.update({f"evil-{i}": a for i, a in enumerate(HOSTILE)})
    config = ExtProcConfig(listen="127.0.0.1:0", fallbacks=len(addresses))
    async with running_router(redis_url, extproc=config) as server:
        snapshot = load_snapshot(dict.fromkeys(addresses, 0.0), seq=1, addresses=addresses)
        await stores.cluster.publish_load(snapshot)

        async def synced() -> bool:
            return len(server.router.pools["default"].view.eligible_nodes) == len(addresses)

        await eventually(synced)
        assert server.extproc is not None
        picked: list[str] = []
        refused = 0
        async with grpc.aio.insecure_channel(server.extproc.grpc.address) as channel:
            stub = ext_grpc.ExternalProcessorStub(channel)
            for i in range(60):
                message = m.request_headers({"x-cacheroute-key": f"k{i}"}, end_of_stream=True)
                answers = [a async for a in stub.Process(iter([message]))]
                if answers[0].WhichOneof("response") == "immediate_response":
                    assert m.immediate(answers)[0] == 503  # the decision was a hostile node
                    refused += 1
                    continue
                endpoints = m.picked(answers)
                assert endpoints[0] in addresses.values()
                picked += endpoints
        assert picked and all(is_endpoint(e) for e in picked)
        assert set(picked) == {"10.0.0.1:8000", "10.0.0.2:8000"}
        assert refused < 60
