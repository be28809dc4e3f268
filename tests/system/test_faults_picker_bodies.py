"""Unfinished picker bodies cannot fill a router's memory (issue 32, failure 4: 20 ext_proc
streams of 15 MiB without end of stream took a router from 109 to 729 MiB; 100 would hold about
1.6 GB).

A real router subprocess on a real Redis, 20 real ext_proc streams as Envoy sends a body
(``FULL_DUPLEX_STREAMED`` chunks of 62,000 bytes), none of them ending it. The router's shared
budget (``--extproc-max-buffered``, 64 MiB by default) ends the streams that do not fit with a
503, and its resident memory grows by far less than the bodies sent (bound: the budget plus
64 MiB of slack; it grows by about 70 MiB). With gRPC's receive windows sized by its bandwidth
probe, core buffered unread chunks and the growth was 110-300 MiB in a quarter of the runs on a
busy machine; the router's ports now keep fixed windows (:mod:`servekit.grpc_hygiene`).
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_grpc

from cacheroute_state import open_stores
from cacheroute_state.embedded import EmbeddedRedis
from tests.support import extproc as m
from tests.support.faults import Fleet
from tests.support.router import NODES, load_snapshot

pytestmark = [pytest.mark.redis, pytest.mark.grpc, pytest.mark.slow, pytest.mark.timeout(240)]
STREAMS = 20
BODY = 15 * 1024 * 1024
CHUNK = 62_000
MIB = 1024 * 1024
REFUSED = STREAMS - (64 * MIB) // BODY - 1  # at least: 4 whole bodies fit, the 5th may partly


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


async def read_all(call: Any) -> list[Any]:
    """Every answer of a stream until it ends (the router's refusal, or our cancel)."""
    found = []
    try:
        while (answer := await call.read()) is not grpc.aio.EOF:
            found.append(answer)
    except (grpc.aio.AioRpcError, asyncio.CancelledError):
        pass
    return found


async def send_unfinished(call: Any, index: int, reader: asyncio.Task[list[Any]]) -> None:
    """Headers, then up to BODY bytes of body, never its end; stops once the router answered."""
    await call.write(m.request_headers({"x-request-id": f"r{index}"}))
    chunk = m.request_body(b"x" * CHUNK, False)
    for _ in range(BODY // CHUNK):
        if reader.done():
            return
        try:
            await call.write(chunk)
        except Exception:  # the router ended the stream: grpc refuses further writes
            return


async def test_twenty_unfinished_15_mib_bodies_stay_within_the_budget(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    redis = EmbeddedRedis().start()
    fleet = Fleet(tmp_path_factory.mktemp("picker-bodies") / "logs")
    try:
        stores = open_stores(redis.url)
        await stores.cluster.publish_load(load_snapshot(dict.fromkeys(NODES, 0.0), seq=1))
        await stores.close()
        router = fleet.router("router", redis.url, "--extproc-listen", "127.0.0.1:0")
        port = (await router.logged("router serving", "extproc_port"))[0]
        assert router.process is not None
        before = rss_mib(router.process.pid)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = ext_grpc.ExternalProcessorStub(channel)
            calls = [stub.Process() for _ in range(STREAMS)]
            readers = [asyncio.create_task(read_all(call)) for call in calls]
            for index, call in enumerate(calls):
                await send_unfinished(call, index, readers[index])
            deadline = asyncio.get_running_loop().time() + 30  # the last answers on their way
            while sum(r.done() for r in readers) < REFUSED and (
                asyncio.get_running_loop().time() < deadline
            ):
                await asyncio.sleep(0.1)
            after = rss_mib(router.process.pid)
            refused = [r.result() for r in readers if r.done()]
            busy = sum(m.immediate(found)[0] == 503 for found in refused if found)
            for call in calls:
                call.cancel()
            await asyncio.gather(*readers)
        print(f"router RSS {before:.0f} -> {after:.0f} MiB; {busy} of {STREAMS} streams got 503")
        assert busy >= REFUSED  # the streams that did not fit the budget
        assert after - before < 64 + 64, (before, after)
        router.check()
        assert "Traceback" not in router.log_path.read_text(errors="replace")
    finally:
        fleet.stop()
        redis.stop()
