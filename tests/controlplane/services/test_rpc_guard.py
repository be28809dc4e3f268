"""servekit.rpc_guard on a real control plane (gRPC on port 0, the state twin).

Issue 23, failures 7 and 8: the control plane accepted 256 MiB on every RPC and parsed it before
the auth check; health ``Watch`` failed for every request (the old decode guard broke
unary-stream handlers); garbage to health and reflection answered UNKNOWN with a traceback.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cacheroute.v1 import admin_pb2
from controlplane.services.auth import token_hash
from tests.support.controlplane import quick_config, running

pytestmark = [pytest.mark.grpc, pytest.mark.timeout(60)]


def _raw(channel: grpc.aio.Channel, method: str) -> grpc.aio.UnaryUnaryMultiCallable:
    return channel.unary_unary(method)  # bytes in, bytes out


async def test_health_watch_streams_the_status_on_the_control_plane(state_url: str) -> None:
    async with (
        running(quick_config(state_url)) as plane,
        grpc.aio.insecure_channel(plane.address) as channel,
    ):
        call = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest())
        first = await call.read()
        assert first.status == health_pb2.HealthCheckResponse.SERVING
        call.cancel()


async def test_garbage_to_health_and_reflection_is_invalid_argument(state_url: str) -> None:
    async with (
        running(quick_config(state_url)) as plane,
        grpc.aio.insecure_channel(plane.address) as channel,
    ):
        for method in ("/grpc.health.v1.Health/Check", "/cacheroute.v1.PlanService/Rollout"):
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await _raw(channel, method)(b"\xff\xff\xff\xff")
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        stream = channel.stream_stream(
            "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
        )
        call = stream(iter([b"\xff\xff\xff"]))
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for _ in call:
                pass
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_each_method_has_its_own_size_limit_checked_before_parsing(state_url: str) -> None:
    config = replace(quick_config(state_url), max_request_bytes=4096, max_import_bytes=1 << 20)
    async with running(config) as plane, grpc.aio.insecure_channel(plane.address) as channel:
        big = admin_pb2.RolloutRequest(pool="default", reason="x" * 8000).SerializeToString()
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _raw(channel, "/cacheroute.v1.PlanService/Rollout")(big)
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "the limit is 4096 bytes" in (caught.value.details() or "")
        # ImportPlan has its own, larger limit: the same size passes to the domain check
        table = admin_pb2.ImportPlanRequest(note="y" * 3000).SerializeToString() + big
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _raw(channel, "/cacheroute.v1.PlanService/ImportPlan")(table)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_strings_and_lists_in_admin_requests_are_bounded(state_url: str) -> None:
    async with (
        running(quick_config(state_url)) as plane,
        grpc.aio.insecure_channel(plane.address) as channel,
    ):
        request = admin_pb2.RolloutRequest(pool="default", reason="r" * 5000)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _raw(channel, "/cacheroute.v1.PlanService/Rollout")(request.SerializeToString())
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "reason: 5000 characters; at most 4096" in (caught.value.details() or "")
        shadow = admin_pb2.ShadowPlanRequest(pool="default", version="p" + "0" * 16,
                                                 nodes=5_000_000)  # fmt: skip
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _raw(channel, "/cacheroute.v1.PlanService/ShadowPlan")(shadow.SerializeToString())
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "nodes must be in [0, 4096]" in (caught.value.details() or "")


async def test_an_anonymous_caller_is_refused_before_its_request_is_read(
    state_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    auth = tmp_path / "auth.yaml"
    auth.write_text(f"- {{name: ops, role: write, sha256: {token_hash('tok')}}}\n")
    auth.chmod(0o600)
    config = replace(quick_config(state_url), auth_file=auth, max_request_bytes=4096)
    async with running(config) as plane, grpc.aio.insecure_channel(plane.address) as channel:
        garbage = b"\xff" * 100_000  # too large *and* malformed: neither is looked at
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _raw(channel, "/cacheroute.v1.PlanService/Rollout")(garbage)
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _raw(channel, "/cacheroute.v1.PlanService/Rollout")(
                garbage, metadata=(("authorization", "Bearer tok"),)
            )
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    logged = capsys.readouterr()
    refused = [line for line in (logged.out + logged.err).splitlines()
               if "request refused before parsing" in line]  # fmt: skip
    assert len(refused) == 1  # only the authenticated call's body was ever looked at
