"""The picker against a hostile caller, over real gRPC to a real router on a real Redis (issue 32).

Before: 40 ext_proc streams naming a pick's last fallback as the endpoint that served ejected 2 of
4 engines (no caller identity, outcomes straight to passive health); 20 unfinished 15 MiB bodies
took the router from 109 to 729 MiB; a bad ``:status`` answered UNKNOWN with a traceback.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import grpc
import pytest
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_grpc

from cacheroute_state import Stores
from dataplane.core.outliers import OutlierConfig
from dataplane.extproc.context import ExtProcConfig
from dataplane.server import RouterServer
from servekit.auth_file import load_auth_file, token_hash
from servekit.tls import ClientTlsConfig, TlsConfig
from tests.support import extproc as m
from tests.support.certs import make_certs
from tests.support.network import non_loopback_ip
from tests.support.polling import eventually
from tests.support.router import NODES, load_snapshot, running_router

pytestmark = [pytest.mark.redis, pytest.mark.grpc, pytest.mark.timeout(90)]
OUTLIERS = OutlierConfig(
    consecutive_failures=1, base_ejection_s=60.0, max_ejection_s=60.0, max_ejected_share=0.5
)
TOKEN = "gateway-token-0123456789"


def auth_file(tmp_path: Path) -> Path:
    path = tmp_path / "auth.yaml"
    path.write_text(f"- {{name: gateway, role: read, sha256: {token_hash(TOKEN)}}}\n")
    path.chmod(0o600)
    return path


async def synced(server: RouterServer, stores: Stores) -> None:
    await stores.cluster.publish_load(load_snapshot(dict.fromkeys(NODES, 0.0), seq=1))

    async def ready() -> bool:
        return len(server.router.pools["default"].view.eligible_nodes) == len(NODES)

    await eventually(ready)


async def stream(
    address: str, messages: list[Any], metadata: tuple[tuple[str, str], ...] = ()
) -> list[Any]:
    """One ext_proc stream as Envoy opens it: initial metadata, then the messages in order."""
    async with grpc.aio.insecure_channel(address) as channel:
        call = ext_grpc.ExternalProcessorStub(channel).Process(iter(messages), metadata=metadata)
        return [answer async for answer in call]


async def blame_the_fallbacks(address: str, rounds: int, metadata: Any = ()) -> None:
    """The attack: each stream says its pick's last entry served, so the others 'failed'."""
    for i in range(rounds):
        async with grpc.aio.insecure_channel(address) as channel:
            call = ext_grpc.ExternalProcessorStub(channel).Process(metadata=metadata)
            await call.write(m.request_headers({"x-cacheroute-key": f"k{i}"}, end_of_stream=True))
            picked = m.picked([await call.read()])
            await call.write(m.response_headers(200, served=picked[-1], end_of_stream=True))
            await call.read()
            await call.done_writing()
            assert await call.read() == grpc.aio.EOF


async def test_without_a_token_the_picker_refuses_and_a_known_gateway_ejects_at_most_its_share(
    redis_url: str, stores: Stores, tmp_path: Path
) -> None:
    config = ExtProcConfig(listen="127.0.0.1:0")
    auth = load_auth_file(auth_file(tmp_path))
    async with running_router(redis_url, outliers=OUTLIERS, auth=auth, extproc=config) as server:
        await synced(server, stores)
        assert server.extproc is not None
        picker = server.extproc.grpc.address
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stream(picker, [m.request_headers({"x-cacheroute-key": "k"})])
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "initial metadata" in (refused.value.details() or "")
        await blame_the_fallbacks(picker, 40, (("authorization", f"Bearer {TOKEN}"),))
        assert len(server.router.pools["default"].outliers.ejected) == 1  # was 2 of 4
        over = server.metrics.registry.get_sample_value(
            "cacheroute_router_health_feedback_ignored_total", {"reason": "caller_share"}
        )
        assert over is not None and over > 0
        await eventually(lambda: _no_holds(server))


async def test_an_anonymous_caller_beyond_loopback_ejects_nothing_unless_opted_in(
    redis_url: str, stores: Stores
) -> None:
    ip = non_loopback_ip()
    if ip is None:
        pytest.skip("this host has no non-loopback address to call from")
    for anonymous, ejected in ((False, 0), (True, 1)):
        config = ExtProcConfig(listen=f"{ip}:0")
        async with running_router(
            redis_url, outliers=OUTLIERS, extproc=config, health_feedback_anonymous=anonymous
        ) as server:
            await synced(server, stores)
            assert server.extproc is not None
            await blame_the_fallbacks(server.extproc.grpc.address, 12)
            assert len(server.router.pools["default"].outliers.ejected) == ejected, anonymous


async def test_unfinished_bodies_are_bounded_in_all_and_in_time(
    redis_url: str, stores: Stores
) -> None:
    config = ExtProcConfig(listen="127.0.0.1:0", max_buffered_bytes=1_000_000, body_timeout_s=1.0)
    chunk = b"x" * 600_000
    async with running_router(redis_url, extproc=config) as server:
        await synced(server, stores)
        assert server.extproc is not None
        async with grpc.aio.insecure_channel(server.extproc.grpc.address) as channel:
            stub = ext_grpc.ExternalProcessorStub(channel)
            first = stub.Process()
            await first.write(m.request_headers({}))
            await first.write(m.request_body(chunk, False))
            await eventually(lambda: _budget_used(server, len(chunk)))
            second = await stream(server.extproc.grpc.address, [
                m.request_headers({}), m.request_body(chunk, False)
            ])  # fmt: skip
            assert m.immediate(second)[0] == 503
            assert m.immediate(second)[1]["error"]["code"] == "picker_busy"
            # The first stream never sends its body's end: 408 after the timeout, budget back.
            status, body = m.immediate([await asyncio.wait_for(first.read(), 30)])
            assert (status, body["error"]["code"]) == (408, "body_timeout")
            await eventually(lambda: _budget_used(server, 0))
        refusals = server.metrics.registry.get_sample_value(
            "cacheroute_router_extproc_buffer_refusals_total"
        )
        assert refusals == 1


async def test_a_bad_status_is_ignored_and_counted_never_unknown(
    redis_url: str, stores: Stores
) -> None:
    async with running_router(redis_url, extproc=ExtProcConfig(listen="127.0.0.1:0")) as server:
        await synced(server, stores)
        assert server.extproc is not None
        address = server.extproc.grpc.address
        for bad in ("abc", "", "99999999999999999999", "-1", "0x1f4", "600"):
            headers = m.raw_response_headers({":status": bad})
            answers = await stream(address, [
                m.request_headers({"x-cacheroute-key": "k"}, end_of_stream=True), headers,
                m.request_headers({"x-cacheroute-key": "again"}, end_of_stream=True),
            ])  # fmt: skip
            assert [a.WhichOneof("response") for a in answers] == [
                "request_headers", "response_headers", "request_headers"
            ]  # fmt: skip
        registry = server.metrics.registry
        ignored = registry.get_sample_value(
            "cacheroute_router_extproc_ignored_fields_total", {"field": ":status"}
        )
        assert ignored == 6
        again = registry.get_sample_value(
            "cacheroute_router_extproc_ignored_fields_total", {"field": "request_headers"}
        )
        assert again == 6
        assert server.router.pools["default"].outliers.ejected == frozenset()
        await eventually(lambda: _no_holds(server))


async def _no_holds(server: RouterServer) -> bool:
    return not server.holds.open_count


async def _budget_used(server: RouterServer, size: int) -> bool:
    assert server.extproc is not None
    return server.extproc.context.budget.used == size


async def test_with_mtls_a_certificate_the_auth_file_names_is_the_gateways_identity(
    redis_url: str, stores: Stores, tmp_path: Path
) -> None:
    certs = make_certs(tmp_path)
    auth_path = tmp_path / "auth.yaml"
    auth_path.write_text("- {name: gateway, role: read, subject: ops.admin}\n")
    auth_path.chmod(0o600)
    tls = TlsConfig(certs["server"], certs["server.key"], client_ca_file=certs["ca"])
    async with running_router(
        redis_url, tls=tls, auth=load_auth_file(auth_path), extproc=ExtProcConfig("127.0.0.1:0")
    ) as server:
        await synced(server, stores)
        assert server.extproc is not None
        address = server.extproc.grpc.address
        message = m.request_headers({"x-cacheroute-key": "k"}, end_of_stream=True)
        for who, known in (("ops", True), ("agent", False)):
            creds = ClientTlsConfig(certs["ca"], certs[who], certs[f"{who}.key"])
            async with grpc.aio.secure_channel(address, creds.channel_credentials()) as channel:
                call = ext_grpc.ExternalProcessorStub(channel).Process(iter([message]))
                if known:
                    assert m.picked([a async for a in call])
                else:
                    with pytest.raises(grpc.aio.AioRpcError) as refused:
                        _ = [a async for a in call]
                    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
