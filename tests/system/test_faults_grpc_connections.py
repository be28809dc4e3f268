"""Idle TCP connections to a router's gRPC ports under a 1,024 open-file limit (issue 32, #3).

Before: 1,100 half-open connections to the picker port or the ``Route`` port pinned every
descriptor of a router run under ``prlimit --nofile=1024``; new ``Route`` calls failed 5 of 5,
HTTP 4 of 5, and the server closed none. Now each gRPC port takes at most its share of the limit
(servekit/grpc_hygiene.py) and closes connections that never send the HTTP/2 preface.

A real router subprocess under ``prlimit``, a real Redis, 1,100 real sockets that connect and
then say nothing. While they are held on the picker port, ``Route``, the picker's own new callers
after the handshake timeout, and HTTP answer; held on the ``Route`` port, the picker and HTTP
answer at once and ``Route`` answers again once the handshake timeout has closed the held
connections; the router's descriptors stay below the limit throughout.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import socket
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import pytest
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_grpc

from cachectl.localcluster.processes import python_module
from cacheroute.v1 import routing_pb2, routing_pb2_grpc
from cacheroute_state import Stores, open_stores
from cacheroute_state.embedded import EmbeddedRedis
from servekit.grpc_hygiene import ConnectionHygiene
from tests.support import extproc as m
from tests.support.faults import HOST, LOG, Fleet, Proc
from tests.support.router import NODES, load_snapshot

pytestmark = [pytest.mark.redis, pytest.mark.grpc, pytest.mark.slow, pytest.mark.timeout(300)]
LIMIT = 1024
HELD = 1100
HANDSHAKE_S = ConnectionHygiene().handshake_timeout_s  # 10 s
CALLS = 5


@dataclass
class Router:
    proc: Proc
    route: str
    picker: str
    http: str


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Router]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 3 * HELD:
        pytest.skip(f"holding {HELD} sockets needs a hard open-file limit >= {3 * HELD}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 3 * HELD), hard))
    redis = EmbeddedRedis().start()
    fleet = Fleet(tmp_path_factory.mktemp("grpc-connections") / "logs")
    try:
        asyncio.run(publish(open_stores(redis.url)))
        args = python_module(
            "dataplane", "--listen", f"{HOST}:0", "--redis-url", redis.url, "--router-id", "r",
            "--metrics-listen", f"{HOST}:0", "--grace", "1", "--extproc-listen", f"{HOST}:0",
            "--http-listen", f"{HOST}:0", *LOG,
        )  # fmt: skip
        proc = Proc("router", ["prlimit", f"--nofile={LIMIT}:{LIMIT}", *args], fleet.log_dir)
        fleet.procs.append(proc.start())
        route = asyncio.run(proc.logged("router serving", "address"))[0]
        (event,) = proc.events("router serving")
        yield Router(
            proc, route, f"{HOST}:{event['extproc_port']}", f"http://{HOST}:{event['http_port']}"
        )
    finally:
        fleet.stop()
        redis.stop()


async def publish(stores: Stores) -> None:
    await stores.cluster.publish_load(load_snapshot(dict.fromkeys(NODES, 0.0), seq=1))
    await stores.close()


@contextlib.contextmanager
def held(address: str) -> Iterator[list[socket.socket]]:
    """``HELD`` connections to ``address`` that never send a byte."""
    host, port = address.rsplit(":", 1)
    sockets: list[socket.socket] = []
    try:
        sockets.extend(socket.create_connection((host, int(port)), timeout=10) for _ in range(HELD))
        yield sockets
    finally:
        for sock in sockets:
            sock.close()


def closed_by_server(sockets: list[socket.socket]) -> int:
    """How many of ``sockets`` the server has closed (end of stream or reset)."""
    count = 0
    for sock in sockets:
        sock.setblocking(False)
        try:
            while sock.recv(65536):
                pass
            count += 1  # b"": the server closed it
        except BlockingIOError:
            pass
        except OSError:
            count += 1
    return count


def all_closed(
    sockets: list[socket.socket], count: int = HELD, within_s: float = HANDSHAKE_S * 6
) -> None:
    """Wait until the server closed ``count`` of ``sockets`` (generously by default: a timer may
    be late on a busy machine)."""
    deadline = time.monotonic() + within_s
    while (closed := closed_by_server(sockets)) < count:
        assert time.monotonic() < deadline, f"{closed} of {len(sockets)} closed, {count} expected"
        time.sleep(0.2)


def descriptors(proc: Proc) -> int:
    """Open descriptors of the router (prlimit execs it in place: the pid is the router's)."""
    assert proc.process is not None
    return len(os.listdir(f"/proc/{proc.process.pid}/fd"))


def route_ok(address: str, *, wait_s: float) -> bool:
    with grpc.insecure_channel(address) as channel:
        stub = routing_pb2_grpc.RouterServiceStub(channel)
        try:
            answer = stub.Route(
                routing_pb2.RouteRequest(key="k"), timeout=wait_s, wait_for_ready=wait_s > 5
            )
        except grpc.RpcError:
            return False
        return bool(answer.node_id)


def picker_ok(address: str) -> bool:
    with grpc.insecure_channel(address) as channel:
        stub = ext_grpc.ExternalProcessorStub(channel)
        message = m.request_headers({"x-cacheroute-key": "k"}, end_of_stream=True)
        try:
            answers = list(stub.Process(iter([message]), timeout=5))
        except grpc.RpcError:
            return False
        return bool(m.picked(answers))


def http_ok(base: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base}/health", timeout=5) as reply:
            return int(reply.status) == 200
    except OSError:
        return False


def test_connections_held_on_the_picker_port_leave_route_and_http_serving(router: Router) -> None:
    with held(router.picker) as sockets:
        assert sum(route_ok(router.route, wait_s=5) for _ in range(CALLS)) == CALLS
        assert sum(http_ok(router.http) for _ in range(CALLS)) == CALLS
        assert descriptors(router.proc) < LIMIT - 100
        all_closed(sockets, HELD - LIMIT // 8, within_s=HANDSHAKE_S * 0.8)  # over the cap
        all_closed(sockets)  # the rest: no preface within the handshake timeout
        assert picker_ok(router.picker)
    router.proc.check()


def test_connections_held_on_the_route_port_are_closed_and_route_serves_again(
    router: Router,
) -> None:
    with held(router.route) as sockets:
        assert sum(picker_ok(router.picker) for _ in range(CALLS)) == CALLS
        assert sum(http_ok(router.http) for _ in range(CALLS)) == CALLS
        assert descriptors(router.proc) < LIMIT - 100
        started = time.monotonic()
        assert all(route_ok(router.route, wait_s=HANDSHAKE_S * 4) for _ in range(CALLS))
        assert time.monotonic() - started < HANDSHAKE_S * 4
        all_closed(sockets)
    router.proc.check()
    log = router.proc.log_path.read_text(errors="replace")
    assert "Traceback" not in log
