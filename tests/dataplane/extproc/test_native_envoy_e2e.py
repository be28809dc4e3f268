"""The Envoy acceptance tests (:mod:`tests.dataplane.extproc.test_envoy_e2e`) again, every picker
behind the native ext_proc transport (``--extproc-native``), plus the headers-only recipe.

The tests are the same functions; only the ``native`` fixture differs: here it is the binary
``scripts/build_extproc_native.py`` built (skipped without it, failed under
``CACHEROUTE_REQUIRE_EXTPROC_NATIVE=1``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cacheroute_state import Stores
from dataplane.core.keys import hash_key
from tests.dataplane.extproc.test_envoy_e2e import (
    MESSAGES,
    module_engines,
    test_a_killed_engine_is_answered_by_the_fallback_and_fails_nothing_unstarted,
    test_a_killed_picker_process_costs_at_most_its_in_flight_requests,
    test_a_stopped_picker_costs_at_most_its_in_flight_requests_then_100_of_100_succeed,
    test_both_replicas_give_identical_picks_for_every_warm_key,
    test_held_load_returns_to_zero_when_streams_end_or_clients_disconnect,
    test_warm_keys_land_on_the_active_plans_node_streaming_or_not,
)
from tests.dataplane.http_front.conftest import SimEngines
from tests.support.envoy import HEADERS_ONLY
from tests.support.envoy_gateway import MODEL, decisions, gateway, true
from tests.support.extproc_native import require_binary
from tests.support.polling import eventually
from tests.support.router import warm_keys

pytestmark = [pytest.mark.redis, pytest.mark.grpc, pytest.mark.e2e, pytest.mark.slow]
__all__ = [
    "module_engines",
    "test_a_killed_engine_is_answered_by_the_fallback_and_fails_nothing_unstarted",
    "test_a_killed_picker_process_costs_at_most_its_in_flight_requests",
    "test_a_stopped_picker_costs_at_most_its_in_flight_requests_then_100_of_100_succeed",
    "test_both_replicas_give_identical_picks_for_every_warm_key",
    "test_held_load_returns_to_zero_when_streams_end_or_clients_disconnect",
    "test_warm_keys_land_on_the_active_plans_node_streaming_or_not",
]


@pytest.fixture
def native() -> Path:
    return require_binary()


async def test_the_headers_only_recipe_through_the_native_transport(
    redis_url: str, stores: Stores, module_engines: SimEngines, tmp_path: Path, native: Path
) -> None:
    """deploy/envoy/envoy-headers-only.yaml: the key in ``x-cacheroute-key``, decided at the
    request headers; holds end with the response headers."""
    async with gateway(
        redis_url, stores, module_engines, tmp_path, native=native, recipe=HEADERS_ONLY
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
