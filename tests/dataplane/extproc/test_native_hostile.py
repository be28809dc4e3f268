"""The native ext_proc transport against hostile callers (the real binary, a real gRPC client).

Garbage where a message should be ends that stream with INVALID_ARGUMENT, a message over the
limit with RESOURCE_EXHAUSTED, another method with UNIMPLEMENTED, a caller without a token (with
an auth file) with UNAUTHENTICATED; a stream opened before and still waiting for its body is
answered all the same, and nothing stays held.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_grpc

from dataplane.extproc.native_bridge import NativeExtProcServer
from servekit.auth_file import load_auth_file, token_hash
from tests.support import extproc as m
from tests.support.extproc_native import require_binary
from tests.support.native_picker import native_picker, process
from tests.support.picker_stream import picker
from tests.support.polling import eventually

pytestmark = [pytest.mark.grpc, pytest.mark.timeout(90)]
PROCESS = "/envoy.service.ext_proc.v3.ExternalProcessor/Process"
MAX_BODY = 64 * 1024
TOKEN = "gateway-token-0123456789"


@pytest.fixture
async def server() -> AsyncIterator[NativeExtProcServer]:
    async with native_picker(require_binary(), picker(), max_body_bytes=MAX_BODY) as started:
        yield started


async def raw_stream(port: int, payloads: list[bytes], method: str = PROCESS) -> list[bytes]:
    """A stream that sends ``payloads`` as they are (not ext_proc messages)."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.stream_stream(
            method, request_serializer=lambda b: b, response_deserializer=lambda b: b
        )(iter(payloads), timeout=10)
        return [answer async for answer in call]


async def waiting(port: int) -> tuple[grpc.aio.Channel, Any]:
    """A stream whose key is in a body that has not come yet."""
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    call = ext_grpc.ExternalProcessorStub(channel).Process(timeout=20)
    await call.write(m.request_headers({}))
    return channel, call


async def finish(channel: grpc.aio.Channel, call: Any) -> list[str]:
    """The waiting stream's body, then its pick."""
    await call.write(m.request_body(m.chat_body(prompt_cache_key="later"), True))
    await call.done_writing()
    answers = [answer async for answer in call]
    await channel.close()
    return m.picked(answers)


async def no_holds(server: NativeExtProcServer) -> bool:
    return not server.context.holds.open_count and server.streams.open_streams == 0


async def test_garbage_ends_its_stream_with_invalid_argument_and_no_other(
    server: NativeExtProcServer,
) -> None:
    channel, call = await waiting(server.port)
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await raw_stream(server.port, [b"\xff\xff\xff\xff not a protobuf message"])
    assert failed.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "malformed ext_proc message" in (failed.value.details() or "")
    assert await finish(channel, call)
    assert m.picked(await process(server.port, [m.request_headers({"x-cacheroute-key": "k"})]))
    await eventually(lambda: no_holds(server))


async def test_a_message_over_the_limit_is_refused_and_the_next_stream_is_served(
    server: NativeExtProcServer,
) -> None:
    channel, call = await waiting(server.port)
    oversized = m.request_body(b"x" * (server.max_message + 1), True)
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await process(server.port, [m.request_headers({}), oversized])
    assert failed.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    big = m.request_body(b"x" * (MAX_BODY + 1), True)  # under the message limit, over the body's
    status, body = m.immediate(await process(server.port, [m.request_headers({}), big]))
    assert (status, body["error"]["code"]) == (413, "body_too_large")
    assert await finish(channel, call)
    await eventually(lambda: no_holds(server))


async def test_another_method_is_unimplemented(server: NativeExtProcServer) -> None:
    # No message: the transport answers the call's headers, and a write racing that answer fails
    # in the client's own gRPC core as INTERNAL ("Failed execute_batch", seen once in a full run).
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await raw_stream(server.port, [], method="/grpc.health.v1.Health/Watch")
    assert failed.value.code() == grpc.StatusCode.UNIMPLEMENTED


async def test_with_an_auth_file_a_caller_without_a_token_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "auth.yaml"
    path.write_text(f"- {{name: gateway, role: read, sha256: {token_hash(TOKEN)}}}\n")
    path.chmod(0o600)
    ctx = picker()
    async with native_picker(require_binary(), ctx, auth=load_auth_file(path)) as server:
        sent = [m.request_headers({"x-cacheroute-key": "k"}, end_of_stream=True)]
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await process(server.port, sent)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "initial metadata" in (refused.value.details() or "")
        token = (("authorization", f"Bearer {TOKEN}"),)
        assert m.picked(await process(server.port, sent, token))
        refusals = ctx.registry.get_sample_value("cacheroute_router_extproc_refused_total")
        assert refusals == 1.0
        await eventually(lambda: no_holds(server))
