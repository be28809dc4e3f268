"""``cachectl load --openai URL``: any OpenAI server, measured from the stream and usage alone."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from cachectl.loadgen.openai_client import block_text, prompt_text
from cacheroute_state import Stores
from dataplane.core.keys import prompt_blocks
from dataplane.http_front.front_config import FrontConfig
from dataplane.server import RouterConfig, RouterServer
from sim.engine_model import LLAMA_8B
from simengine.server import EngineOptions, EngineServer
from tests.support.router import QUIET, load_snapshot

pytestmark = [pytest.mark.redis, pytest.mark.grpc]


def test_each_block_is_64_bytes_and_shared_blocks_give_a_shared_text_prefix() -> None:
    assert {len(block_text(b).encode()) for b in (0, 1, 2**64 - 1, 0xDEADBEEF)} == {64}
    assert block_text(1) != block_text(2)
    a = prompt_blocks(prompt_text((11, 22, 33)))
    b = prompt_blocks(prompt_text((11, 22, 44)))
    assert len(a) == 3 and a[:2] == b[:2] and a[2] != b[2]  # the engine's blocks line up


@asynccontextmanager
async def engines(count: int) -> AsyncIterator[list[EngineServer]]:
    profile = LLAMA_8B.with_overrides(kv_blocks=4000)
    options = EngineOptions(profile=profile, model="m", speedup=20.0)
    servers = [EngineServer("127.0.0.1:0", options) for _ in range(count)]
    for server in servers:
        await server.start()
    try:
        yield servers
    finally:
        for server in servers:
            await server.stop()


async def _load(url: str, *extra: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "cachectl", "load", "--openai", url,
        "--workload", "tenants", "--top-k", "4", "--option", "context_tokens=256",
        "--qps", "20", "--duration", "1", "--warmup", "0.5", "--json", *extra,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), 90)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_load_drives_one_engine_directly_and_reads_hits_from_usage() -> None:
    async with engines(1) as (engine,):
        code, out, err = await _load(f"http://127.0.0.1:{engine.port}")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["requests"] == doc["completed"] > 0
    assert 0 < doc["hit_rate"] < 1  # contexts repeat: the engine's own cached_tokens say so
    assert doc["ttft_p50_s"] > 0
    assert doc["openai"] == [f"http://127.0.0.1:{engine.port}"]
    assert doc["route_p50_ms"] is None  # no Route call: nothing measured, not a zero


async def test_several_openai_targets_share_the_load_round_robin() -> None:
    async with engines(2) as servers:
        urls = [f"http://127.0.0.1:{s.port}" for s in servers]
        code, out, err = await _load(urls[0], "--openai", urls[1])
    assert code == 0, err
    doc = json.loads(out)
    assert doc["openai"] == urls
    counts = doc["per_engine"]
    assert set(counts) == set(urls)
    assert abs(counts[urls[0]] - counts[urls[1]]) <= 1  # round-robin by request


async def test_the_table_has_no_route_latency_row_in_openai_mode() -> None:
    async with engines(1) as (engine,):
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "cachectl", "load", "--openai", f"http://127.0.0.1:{engine.port}",
            "--workload", "tenants", "--top-k", "2", "--qps", "10", "--duration", "0.5",
            "--no-progress", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(process.communicate(), 90)
    assert process.returncode == 0, err.decode()
    table = out.decode()
    assert "TTFT p50" in table and "route latency" not in table


async def test_load_through_the_routers_front_sees_its_decisions(
    redis_url: str, stores: Stores
) -> None:
    async with engines(2) as servers:
        addresses = {f"e{i}": f"127.0.0.1:{s.port}" for i, s in enumerate(servers)}
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
                http=FrontConfig(listen="127.0.0.1:0"),
                **QUIET,  # type: ignore[arg-type]
            )
        )
        await router.start()
        try:
            assert router.http is not None
            code, out, err = await _load(f"http://127.0.0.1:{router.http.port}/v1")
        finally:
            await router.stop()
    assert code == 0, err
    doc = json.loads(out)
    assert doc["requests"] == doc["completed"] > 0
    assert set(doc["per_engine"]) <= {"e0", "e1"}
    assert doc["reasons"] == {"no_table": doc["requests"]}
    assert doc["hit_rate"] > 0


async def test_an_unreachable_server_is_a_cli_error_naming_the_url() -> None:
    code, _, err = await _load("http://127.0.0.1:1")
    assert code != 0
    assert "--openai http://127.0.0.1:1" in err
