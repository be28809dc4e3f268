"""A dead engine while the control plane is away: passive health bounds the misroutes.

Real redis-server, one control plane, four simulated engines (one process each, so one can die
alone), agents, and a router with its HTTP front; all subprocesses on 127.0.0.1. Client load
runs through the front. The control plane is SIGSTOPped (no snapshot will say anything is down),
then one engine is SIGKILLed. The front retries a refused connection once on another engine, so
no client request fails; without passive health the dead engine, idle-looking because its
requests end at once, drew a fixed share of attempts (each a misroute and a retry) for as long
as it was dead. With it, the router ejects the engine after ``FAILURES`` refused attempts and
lets it back on probation when its (growing) ejection time is up, so misroutes are bounded:

    misroutes <= (FAILURES + WORKERS - 1) + WORKERS × returns

(the streak, plus the attempts already under way when it ended; then at most one attempt per
worker per return). With ejections of 1, 2, 3, 4, 4… s, ``DEAD_S`` = 10 s sees at most
``RETURNS_BOUND`` returns. The engine is then restarted on its port: traffic reaches it again
within one maximum ejection time plus margin (``BACK_BOUND_S``).
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path

import aiohttp
import pytest

from cacheroute_state.embedded import EmbeddedRedis
from tests.support.faults import HOST, Fleet, Proc, list_nodes, until
from tests.support.timing import LagMeter

# The timeout is a hang guard, not a bound: a busy machine stretches the waits.
pytestmark = [pytest.mark.e2e, pytest.mark.redis, pytest.mark.grpc, pytest.mark.slow,
              pytest.mark.timeout(480)]  # fmt: skip

CP_FLAGS = ("--load-publish-interval", "0.25", "--node-timeout-intervals", "3")
FAILURES = 5  # the default --outlier-consecutive-failures
BASE_S, MAX_S = 1.0, 4.0
WORKERS = 4
DEAD_S = 10.0
RETURNS_BOUND = 5  # returns at ~1, 3, 6, 10 s after the first ejection, one spare
MISROUTE_BOUND = (FAILURES + WORKERS - 1) + WORKERS * RETURNS_BOUND
BACK_BOUND_S = MAX_S + 8.0


def body(n: int) -> bytes:
    """A fresh conversation per request, so the default policy spreads them over every engine."""
    return json.dumps({"prompt": f"conversation {n}: hello", "max_tokens": 2}).encode()


class Load:
    """``WORKERS`` clients posting completions to the front; records every answer."""

    def __init__(self, url: str) -> None:
        self.url = url
        # (time the request was sent, status, node that answered, node it was retried from):
        # by send time, so an answer the dead engine had written before its death, read late
        # by a busy client, does not count as sent after the kill.
        self.answers: list[tuple[float, int, str, str]] = []
        self._stop = asyncio.Event()
        self._sent = 0
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> Load:
        self._tasks = [asyncio.create_task(self._worker()) for _ in range(WORKERS)]
        return self

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)

    def since(self, at: float) -> list[tuple[float, int, str, str]]:
        return [a for a in self.answers if a[0] >= at]

    async def _worker(self) -> None:
        timeout = aiohttp.ClientTimeout(total=10)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while not self._stop.is_set():
                sent = time.time()
                self._sent += 1
                try:
                    async with session.post(
                        f"{self.url}/v1/completions",
                        data=body(self._sent),
                        headers={"Content-Type": "application/json"},
                    ) as response:
                        await response.read()
                        node = response.headers.get("x-cacheroute-node", "")
                        retried = response.headers.get("x-cacheroute-retried-from", "")
                        self.answers.append((sent, response.status, node, retried))
                except (aiohttp.ClientError, TimeoutError) as exc:
                    self.answers.append((sent, 0, type(exc).__name__, ""))
                await asyncio.sleep(0.005)


async def test_a_dead_engine_with_the_control_plane_away_is_ejected_and_fails_no_request(
    tmp_path: Path, lag: LagMeter
) -> None:
    redis = EmbeddedRedis().start()
    fleet = Fleet(tmp_path / "logs")
    cp: Proc | None = None
    try:
        cp = fleet.controlplane("cp", redis.url, *CP_FLAGS)
        cp_address = (await cp.logged("control plane serving", "listen"))[0]
        engines = [
            fleet.start(f"engine-{i}", "simengine", "--listen", f"{HOST}:0", "--speedup", "20")
            for i in range(4)
        ]
        urls = [(await e.logged("engine serving", "url"))[0] for e in engines]
        nodes = {f"sim-{i}": url for i, url in enumerate(urls)}
        fleet.agents("agents", cp_address, nodes)
        router = fleet.router(
            "router", redis.url, "--http-listen", f"{HOST}:0",
            "--outlier-base-ejection", str(BASE_S), "--outlier-max-ejection", str(MAX_S),
        )  # fmt: skip
        http_port = (await router.logged("router serving", "http_port"))[0]

        async def all_healthy() -> bool:
            statuses = await list_nodes(cp_address)
            return len(statuses) == 4 and all(s.load.healthy for s in statuses)

        await until(all_healthy, 30, "four healthy nodes")
        load = Load(f"http://{HOST}:{http_port}").start()

        async def answers_from_all() -> bool:
            return {a[2] for a in load.answers[-200:] if a[1] == 200} == set(nodes)

        await until(answers_from_all, 30, "the front answers from all four engines")

        cp.signal(signal.SIGSTOP)  # every control plane away: no snapshot will mark sim-0 down
        await asyncio.sleep(1.0)
        engines[0].signal(signal.SIGKILL)
        assert engines[0].wait(10.0)  # gone before the clock starts
        killed_at = time.time()
        await asyncio.sleep(DEAD_S)

        async def enough_traffic() -> bool:  # for the misroute bound to mean something
            return len(load.since(killed_at)) > 300

        await until(enough_traffic, 60, "300 answers since the kill")
        dead = load.since(killed_at)
        failed = [a for a in dead if a[1] != 200]
        misroutes = [a for a in dead if a[3] == "sim-0"]
        assert failed == []  # each refused attempt was retried on a live engine
        assert len(misroutes) <= MISROUTE_BOUND, (len(misroutes), len(dead))
        assert not [a for a in dead if a[2] == "sim-0"]
        ejections = router.events("destination ejected")
        assert ejections and {e["node"] for e in ejections} == {"sim-0"}
        assert ejections[0]["cause"] == "connect"
        assert ejections[0]["consecutive_failures"] == FAILURES
        returns = router.events("ejected destination returned")
        assert len(returns) <= RETURNS_BOUND

        port = urls[0].rpartition(":")[2]
        restarted = fleet.start(
            "engine-0b", "simengine", "--listen", f"{HOST}:{port}", "--speedup", "20"
        )
        await restarted.logged("engine serving", "url")
        back_at = time.time()

        async def sim0_answers() -> bool:
            return any(a[2] == "sim-0" and a[1] == 200 for a in load.since(back_at))

        back = await until(
            sim0_answers, BACK_BOUND_S, "traffic returns to the restarted sim-0", lag=lag
        )
        await load.stop()
        assert [a for a in load.since(killed_at) if a[1] != 200] == []
        assert back <= BACK_BOUND_S  # claimed by until(lag=...) above
    finally:
        if cp is not None:
            cp.signal(signal.SIGCONT)
        fleet.stop()
        redis.stop()
