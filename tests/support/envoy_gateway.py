"""Two CacheRoute routers as ext_proc Endpoint Pickers behind a real Envoy, and its clients.

Shared by the Envoy acceptance tests (:mod:`tests.dataplane.extproc.test_envoy_e2e`): starting
the gateway is the harness, the tests are what it must do.
"""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
import openai
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_grpc

from cacheroute_state import Stores
from dataplane.core.table import RoutingTable
from dataplane.extproc.context import ExtProcConfig
from dataplane.server import RouterConfig, RouterServer
from sim.engine_model import DEFAULT_PROFILE
from tests.dataplane.http_front.conftest import SimEngines, snapshot
from tests.dataplane.http_front.metrics_util import in_flight, metric_sum
from tests.support import extproc as m
from tests.support.envoy import RECIPE, Envoy
from tests.support.factories import small_plan, store_plan
from tests.support.openai_clients import openai_client
from tests.support.polling import eventually
from tests.support.router import PAPER_DISPATCH, QUIET, rollout

MODEL = DEFAULT_PROFILE


async def true(value: bool) -> bool:
    return value


@dataclass
class Gateway:
    envoy: Envoy
    routers: list[RouterServer]
    engines: SimEngines
    table: RoutingTable
    generation: int

    def client(self) -> openai.AsyncOpenAI:
        """A client of the gateway, closed when the test ends (tests.support.openai_clients)."""
        return openai_client(f"{self.envoy.url}/v1", timeout=120)

    def address(self, node_id: str) -> str:
        return self.engines.addresses[int(node_id.rsplit("-", 1)[1])]

    def held(self) -> dict[str, float]:
        total: dict[str, float] = {}
        for router in self.routers:
            for node, count in in_flight(router).items():
                total[node] = total.get(node, 0.0) + count
        return {n: c for n, c in total.items() if c}


@asynccontextmanager
async def gateway(
    redis_url: str,
    stores: Stores,
    engines: SimEngines,
    workdir: Path,
    *,
    native: Path | None = None,
    recipe: Path = RECIPE,
) -> AsyncIterator[Gateway]:
    """Two routers as pickers (``native``: behind the native transport's binary) and Envoy
    running ``recipe``."""
    routers = []
    envoy: Envoy | None = None
    try:
        for name in ("epp-a", "epp-b"):
            router = RouterServer(
                RouterConfig(
                    **QUIET,
                    **PAPER_DISPATCH,
                    listen="127.0.0.1:0",
                    redis_url=redis_url,
                    router_id=name,
                    grace_s=0.5,
                    extproc=ExtProcConfig(
                        listen="127.0.0.1:0",
                        health_listen="127.0.0.1:0",
                        native=str(native) if native is not None else None,
                    ),
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
        envoy = Envoy(
            workdir,
            engines=[("127.0.0.1", p) for p in engines.ports],
            pickers=pickers,
            recipe=recipe,
        )
        await asyncio.to_thread(envoy.wait_ready)
        await asyncio.to_thread(envoy.wait_healthy, "cacheroute_epp", len(pickers))
        yield Gateway(envoy, routers, engines, table, generation)
    finally:
        if envoy is not None:
            envoy.stop()
        for router in routers:
            await router.stop()


def decisions(router: RouterServer) -> float:
    return metric_sum(router, "cacheroute_router_extproc_decisions_total")


async def pick_through(address: str, key: str) -> list[str]:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = ext_grpc.ExternalProcessorStub(channel)
        call = stub.Process(
            iter([m.request_headers({"x-cacheroute-key": key}, end_of_stream=True)])
        )
        answers = [answer async for answer in call]
    return m.picked(answers)


async def completion(api: openai.AsyncOpenAI, prompt: str) -> str:
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


async def through_a_stop(
    api: openai.AsyncOpenAI, both_used: Callable[[], bool], stop: Callable[[], Awaitable[None]]
) -> ThroughAStop:
    loop = asyncio.get_running_loop()
    outcomes: list[tuple[float, float, str]] = []
    running = True

    async def client(index: int) -> None:
        sent = 0
        while running:
            started = loop.time()
            error = await completion(api, f"client {index} request {sent}")
            outcomes.append((started, loop.time(), error))
            sent += 1

    clients = [asyncio.create_task(client(i)) for i in range(6)]
    try:
        await eventually(lambda: true(both_used() and len(outcomes) >= 20), timeout=60)
        stop_began = loop.time()
        await stop()
        stop_ended = loop.time()
        await eventually(
            lambda: true(sum(1 for o in outcomes if o[0] > stop_ended) >= 60), timeout=120
        )
    finally:
        running = False
        await asyncio.gather(*clients)
    return ThroughAStop(outcomes, stop_began, stop_ended)


def scraped(metrics_port: str, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as page:
        text = page.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))
