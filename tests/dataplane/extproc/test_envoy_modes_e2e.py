"""The headers-only and buffered-body Envoy recipes (``deploy/envoy/envoy-headers-only.yaml``,
``envoy-buffered.yaml``) with a real Envoy, a CacheRoute router as the picker, four
``python -m simengine`` engines and the ``openai`` client: warm keys land on the plan's node by
the recipe's key (a header; the body), other requests are still served, holds end."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import openai
import pytest

from cacheroute_state import Stores
from dataplane.core.keys import hash_key
from dataplane.core.table import RoutingTable
from dataplane.extproc.context import ExtProcConfig
from dataplane.server import RouterConfig, RouterServer
from sim.engine_model import DEFAULT_PROFILE
from tests.dataplane.http_front.conftest import SimEngines, snapshot
from tests.dataplane.http_front.metrics_util import in_flight
from tests.support.envoy import BUFFERED, HEADERS_ONLY, Envoy
from tests.support.factories import small_plan, store_plan
from tests.support.polling import eventually
from tests.support.router import PAPER_DISPATCH, QUIET, rollout, warm_keys

pytestmark = [pytest.mark.redis, pytest.mark.grpc, pytest.mark.e2e, pytest.mark.slow]
MODEL = DEFAULT_PROFILE
MESSAGES = [{"role": "user", "content": "a question about the shared context"}]


@pytest.fixture(scope="module")
def engines() -> Iterator[SimEngines]:
    started = SimEngines(4, "--speedup", "4")
    try:
        started.wait_ready()
        yield started
    finally:
        started.stop()


@asynccontextmanager
async def gateway(
    redis_url: str, stores: Stores, engines: SimEngines, workdir: Path, recipe: Path
) -> AsyncIterator[tuple[openai.AsyncOpenAI, RouterServer, RoutingTable]]:
    router = RouterServer(
        RouterConfig(
            **QUIET, **PAPER_DISPATCH, listen="127.0.0.1:0", redis_url=redis_url, router_id="epp",
            grace_s=0.5,
            extproc=ExtProcConfig(listen="127.0.0.1:0", health_listen="127.0.0.1:0"),
        )
    )  # fmt: skip
    await router.start()
    envoy: Envoy | None = None
    try:
        await stores.cluster.publish_load(snapshot(engines.addresses, seq=1))
        table = small_plan(nodes=4, keys=20)
        generation = await rollout(stores, await store_plan(stores, table))

        async def synced() -> bool:
            pool = router.router.pools["default"]
            return len(pool.view.eligible_nodes) == 4 and pool.table_generation == generation

        await eventually(synced, timeout=20)
        assert router.extproc is not None
        envoy = Envoy(
            workdir, engines=[("127.0.0.1", p) for p in engines.ports],
            pickers=[("127.0.0.1", router.extproc.port, router.extproc.health_port or 0)],
            recipe=recipe,
        )  # fmt: skip
        await asyncio.to_thread(envoy.wait_ready)
        api = openai.AsyncOpenAI(
            base_url=f"{envoy.url}/v1", api_key="unused", max_retries=0, timeout=120
        )
        try:
            yield api, router, table
        finally:
            await api.close()
    finally:
        if envoy is not None:
            envoy.stop()
        await router.stop()


async def no_holds(router: RouterServer) -> bool:
    return not any(in_flight(router).values())


async def ask(api: openai.AsyncOpenAI, stream: bool, **kwargs: Any) -> Any:
    raw: Any = await api.chat.completions.with_raw_response.create(
        model=MODEL, messages=MESSAGES, max_tokens=3, stream=stream, **kwargs
    )
    parsed = raw.parse()
    if stream:
        assert [chunk async for chunk in parsed]
    else:
        assert parsed.choices[0].message.content
    return raw


@pytest.mark.parametrize("recipe", [HEADERS_ONLY, BUFFERED], ids=["headers-only", "buffered"])
async def test_warm_keys_land_on_the_plans_node_under_each_recipe(
    redis_url: str, stores: Stores, engines: SimEngines, tmp_path: Path, recipe: Path
) -> None:
    async with gateway(redis_url, stores, engines, tmp_path, recipe) as (api, router, table):
        for index, key in enumerate(warm_keys(table)):
            members = table.destination_ids(hash_key(key))
            assert members is not None
            if recipe == HEADERS_ONLY or index % 2:
                raw = await ask(api, bool(index % 2), extra_headers={"x-session-id": key})
            else:
                raw = await ask(api, bool(index % 4), extra_body={"prompt_cache_key": key})
            assert raw.headers["x-cacheroute-node"] in members, key
            assert raw.headers["x-cacheroute-reason"] == "warm"
        # a request without the recipe's key is served all the same
        await ask(api, False, extra_body={"prompt_cache_key": "not-in-a-header"})
        models = await api.models.list()  # bodiless
        assert models.data
        await eventually(lambda: no_holds(router), timeout=10)


@pytest.mark.parametrize("recipe", [HEADERS_ONLY, BUFFERED], ids=["headers-only", "buffered"])
async def test_how_long_a_hold_lasts_under_each_recipe(
    redis_url: str, stores: Stores, engines: SimEngines, tmp_path: Path, recipe: Path
) -> None:
    """Envoy 1.40 ends the headers-only stream after the response headers (nothing else is asked
    for), so the hold covers the time to the first byte; the buffered recipe's stream stays open
    until the answer ends, so its hold does too (docs/components/extproc.md)."""
    async with gateway(redis_url, stores, engines, tmp_path, recipe) as (api, router, _):
        raw: Any = await api.chat.completions.with_raw_response.create(
            model=MODEL, messages=MESSAGES, max_tokens=20_000, stream=True,
            extra_headers={"x-session-id": "long"},
        )  # fmt: skip
        stream = raw.parse()
        await stream.__anext__()
        node = raw.headers["x-cacheroute-node"]
        if recipe == HEADERS_ONLY:
            await eventually(lambda: no_holds(router), timeout=10)  # while still streaming
        else:
            await asyncio.sleep(0.5)
            assert in_flight(router).get(node) == 1.0
        await stream.close()
        await eventually(lambda: no_holds(router), timeout=10)
