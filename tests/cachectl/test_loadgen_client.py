"""The load generator against a real router (gRPC, real Redis) and real simulated engines."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import aiohttp
import pytest

from cachectl.loadgen.client import LoadClient, engine_error
from cachectl.loadgen.progress import ProgressLine
from cachectl.loadgen.results import summarize
from cachectl.loadgen.runner import replay
from cachectl.loadgen.workloads import resolve
from cacheroute_state import Stores
from dataplane.core.keys import hash_key
from dataplane.server import RouterConfig, RouterServer
from sim.engine_model import LLAMA_8B
from sim.types import SimRequest
from simengine.server import EngineOptions, EngineServer
from tests.support.router import QUIET, load_snapshot

pytestmark = [pytest.mark.redis, pytest.mark.grpc]


@dataclass
class Rig:
    router: RouterServer
    engines: dict[str, EngineServer]


@asynccontextmanager
async def rig(
    redis_url: str,
    stores: Stores,
    engines: int = 2,
    dead: tuple[str, ...] = (),
    speedup: float = 20.0,
) -> AsyncIterator[Rig]:
    options = EngineOptions(
        profile=LLAMA_8B.with_overrides(kv_blocks=4000), model="m", speedup=speedup
    )
    servers = {f"e{i}": EngineServer("127.0.0.1:0", options) for i in range(engines)}
    for server in servers.values():
        await server.start()
    addresses = {node: f"127.0.0.1:{s.port}" for node, s in servers.items()}
    for node in dead:
        addresses[node] = "127.0.0.1:1"  # nothing listens on port 1
    await stores.cluster.publish_load(
        load_snapshot(dict.fromkeys(addresses, 0.0), seq=1, addresses=addresses)
    )
    router = RouterServer(
        RouterConfig(
            listen="127.0.0.1:0",
            redis_url=redis_url,
            router_id="r1",
            grace_s=0.5,
            metrics_listen=None,
            **QUIET,  # type: ignore[arg-type]
        )
    )
    await router.start()
    try:
        yield Rig(router, servers)
    finally:
        await router.stop()
        for server in servers.values():
            await server.stop()


def request(t: float, key: str, blocks: tuple[int, ...], output: int = 8) -> SimRequest:
    return SimRequest(t, key, hash_key(key), blocks, 16 * len(blocks), output)


async def test_requests_are_routed_streamed_and_measured(redis_url: str, stores: Stores) -> None:
    shared = tuple(range(1, 41))
    requests = [request(0.02 * i, f"key-{i % 3}", (*shared, 1000 + i)) for i in range(30)]
    async with rig(redis_url, stores) as r, LoadClient([r.router.address]) as client:
        outcomes = await replay(client, requests, warmup_s=0.2)
    assert all(o.error is None for o in outcomes)
    assert {o.node_id for o in outcomes} <= {"e0", "e1"}
    assert {o.reason for o in outcomes} == {"no_table"}  # no plan: power-of-two choices
    for o in outcomes:
        assert o.prompt_tokens == 41 * 16
        assert o.output_tokens == 8
        ttft = o.ttft
        assert ttft is not None and 0 < ttft <= o.finished - o.started
        assert o.routed_unix > 0 and o.router == r.router.address
    # The shared 40 blocks are computed once per engine, then served from its cache.
    assert sum(o.cached_tokens for o in outcomes) >= (30 - 2) * 40 * 16 - 2 * 16
    summary = summarize(outcomes, ["e0", "e1"])
    assert summary.requests == 20  # arrivals from 0.2 s on
    assert summary.completed == 20 and summary.failed == 0
    assert summary.hit_rate > 0.9
    assert sum(summary.per_engine.values()) == 20
    assert summary.reasons == {"no_table": 20}
    assert summary.ttft_p99_s >= summary.ttft_p50_s > 0
    assert summary.throughput_rps > 0


async def test_arrivals_follow_the_schedule_open_loop(redis_url: str, stores: Stores) -> None:
    # Long answers keep requests in flight: an open loop still starts each one on time.
    requests = [request(0.1 * i, "k", (1, 2, i + 10), output=150) for i in range(5)]
    async with rig(redis_url, stores, speedup=1.0) as r, LoadClient([r.router.address]) as client:
        outcomes = await replay(client, requests)
    for i, o in enumerate(outcomes):
        assert o.started - o.scheduled == pytest.approx(0.0, abs=0.05)
        assert o.scheduled - outcomes[0].scheduled == pytest.approx(0.1 * i)
    # 150 decode steps of ≥ 6.5 ms: the first two were still streaming when the last started.
    assert all(o.finished > outcomes[-1].started for o in outcomes[:2])


async def test_a_dead_engine_and_an_unknown_pool_are_counted_as_errors(
    redis_url: str, stores: Stores
) -> None:
    requests = [request(0.01 * i, f"k{i}", (i + 1,)) for i in range(20)]
    async with rig(redis_url, stores, engines=1, dead=("dead",)) as r:
        async with LoadClient([r.router.address]) as client:
            outcomes = await replay(client, requests)
        async with LoadClient([r.router.address], pool="nosuchpool") as client:
            unknown = await replay(client, requests[:2])
    errors = {o.error for o in outcomes if o.node_id == "dead"}
    assert errors == {"engine:connect"}
    assert all(o.error is None for o in outcomes if o.node_id == "e0")
    assert {o.error for o in unknown} == {"route:NOT_FOUND"}
    summary = summarize(outcomes)
    assert summary.failed == summary.errors["engine:connect"] > 0


async def test_stragglers_past_the_drain_timeout_are_cancelled_as_timeouts(
    redis_url: str, stores: Stores
) -> None:
    requests = [request(0.0, "k", (1, 2), output=20_000)]  # ≥ 130 s of decode at speed-up 1
    async with (
        rig(redis_url, stores, engines=1, speedup=1.0) as r,
        LoadClient([r.router.address]) as client,
    ):
        outcomes = await replay(client, requests, drain_timeout_s=0.3)
    assert outcomes[0].error == "timeout"


async def test_progress_line_reports_counts_and_percentiles(redis_url: str, stores: Stores) -> None:
    requests = [request(0.01 * i, "k", (1, 2, 3)) for i in range(10)]
    async with rig(redis_url, stores, engines=1) as r, LoadClient([r.router.address]) as client:
        outcomes = await replay(client, requests)
    line = ProgressLine("phase", total_s=1.0, warmup_s=0.0)
    text = line.text(outcomes, started=outcomes[0].started, now=outcomes[0].started + 2.0)
    assert text.startswith("phase measuring   1.0/1s")
    assert "sent 10  done 10  in flight 0" in text
    assert "errors 0" in text


async def test_the_load_command_prints_one_json_object(redis_url: str, stores: Stores) -> None:
    async with rig(redis_url, stores) as r:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "cachectl", "load",
            "--router", r.router.address,
            "--workload", "tenants", "--top-k", "4", "--option", "context_tokens=256",
            "--qps", "20", "--duration", "1", "--warmup", "0.5", "--nodes", "e0,e1,e2",
            "--json",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    doc = json.loads(out)
    assert doc["workload"] == "tenants"
    assert doc["requests"] == doc["completed"] > 0
    assert set(doc["per_engine"]) == {"e0", "e1", "e2"}
    assert doc["per_engine"]["e2"] == 0  # named but never chosen: counts in the imbalance
    assert doc["imbalance"] > 1.0
    assert doc["reasons"] == {"no_table": doc["requests"]}
    assert 0 < doc["hit_rate"] <= 1
    stream = resolve("tenants", {"top_k": 4, "context_tokens": 256}).requests(
        qps=20, duration_s=1.5, seed=1
    )
    assert doc["requests"] == sum(1 for q in stream if q.arrival_s >= 0.5)


async def test_an_engine_that_resets_the_connection_mid_request_counts_as_disconnected() -> None:
    """A killed engine's kernel answers with RST: aiohttp raises a plain ClientOSError."""

    async def reset_after_headers(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await reader.readuntil(b"\r\n\r\n")
        linger_zero = struct.pack("ii", 1, 0)  # close() then sends RST instead of FIN
        writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger_zero)
        writer.close()

    server = await asyncio.start_server(reset_after_headers, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with aiohttp.ClientSession() as session:
            with pytest.raises(aiohttp.ClientError) as caught:
                async with session.post(f"http://127.0.0.1:{port}/v1/completions", json={}) as r:
                    await r.read()
    finally:
        server.close()
        await server.wait_closed()
    assert type(caught.value) is aiohttp.ClientOSError
    assert engine_error(caught.value) == "engine:disconnected"
