"""Passive health through the real front: an engine answering 5xx is ejected, then let back."""

from __future__ import annotations

import asyncio
import time

import pytest

from cacheroute_state import Stores
from dataplane.core.outliers import OutlierConfig
from tests.dataplane.http_front.conftest import SimEngines, front_url, running_front
from tests.dataplane.http_front.metrics_util import metric_sum
from tests.support.engines import BODY, failing_engine, post_raw
from tests.support.timing import LagMeter

pytestmark = [pytest.mark.redis, pytest.mark.grpc]
OUTLIERS = OutlierConfig(consecutive_failures=3, base_ejection_s=0.5, max_ejection_s=2.0)


async def test_an_engine_failing_every_attempt_is_ejected_and_returns_on_probation(
    redis_url: str, stores: Stores, shared_engines: SimEngines, lag: LagMeter
) -> None:
    async with failing_engine("500") as bad:
        addresses = [bad, shared_engines.addresses[0], shared_engines.addresses[1]]
        router = {"outliers": OUTLIERS}
        async with running_front(redis_url, stores, addresses, router=router) as server:
            view = server.router.pools["default"].view
            view.loads[1] = view.loads[2] = 1000.0  # p2c prefers the bad engine whenever drawn
            url = front_url(server)
            retried = 0
            for _ in range(40):
                status, headers, data = await post_raw(url, BODY)
                assert status == 200, data  # every failure was retried elsewhere
                retried += headers.get("x-cacheroute-retried-from") == "node-0"
                if metric_sum(server, "cacheroute_router_outlier_ejections_total"):
                    break
            assert retried == 3  # exactly the streak that ejected it
            assert metric_sum(server, "cacheroute_router_outlier_ejected", pool="default") == 1
            # Ejected: never tried while its time runs. Judged on the answers that came back
            # before the ejection ended (the router runs in this process, on this clock): on a
            # slow machine ten requests can outlast the 0.5 s, and then node-0 is rightly back.
            until = server.router.pools["default"].outliers.ejected_until("node-0")
            assert until is not None
            judged = 0
            for _ in range(10):
                _, headers, _ = await post_raw(url, BODY)
                if time.monotonic() >= until:
                    break
                assert "x-cacheroute-retried-from" not in headers
                judged += 1
            lag.claim(judged > 0, "no answer came back while node-0 was ejected")
            deadline = time.monotonic() + 10
            while not metric_sum(server, "cacheroute_router_outlier_returns_total", node="node-0"):
                assert time.monotonic() < deadline, "node-0 never returned"
                await asyncio.sleep(0.05)
            # back on probation: the first failure ejects it again at once, for longer
            for _ in range(40):
                status, headers, _ = await post_raw(url, BODY)
                assert status == 200
                if headers.get("x-cacheroute-retried-from") == "node-0":
                    break
            assert metric_sum(server, "cacheroute_router_outlier_ejections_total") == 2
            until = server.router.pools["default"].outliers.ejected_until("node-0")
            assert until is not None
            left = until - time.monotonic()  # 2 × base this time: more than 0.5 s were set
            lag.claim(left > 0.5, f"the second ejection had {left:.2f} s left (2 x base)")
