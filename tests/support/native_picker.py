"""The Endpoint Picker behind its native transport, around a given picker context, for tests.

:func:`native_picker` starts :class:`~dataplane.extproc.native_bridge.NativeExtProcServer` (the
real binary as a child process, the socket on the test's event loop) and :func:`process` runs one
``Process`` stream against it with a real gRPC client, as a gateway would.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_grpc

from dataplane.extproc.context import PickerContext
from dataplane.extproc.native_bridge import NativeExtProcServer
from servekit.auth_file import AuthTable


@asynccontextmanager
async def native_picker(
    binary: Path, ctx: PickerContext, auth: AuthTable | None = None, **config: Any
) -> AsyncIterator[NativeExtProcServer]:
    """``ctx``'s picker served by the native transport on a free loopback port."""
    settings = dataclasses.replace(
        ctx.config, listen="127.0.0.1:0", native=str(binary), grace_s=0.5, **config
    )
    ctx.config = settings
    server = NativeExtProcServer(ctx, settings, auth)
    await server.start(serving=True)
    try:
        yield server
    finally:
        await server.stop(0.5)


async def process(
    port: int, messages: Sequence[Any], metadata: Sequence[tuple[str, str]] = ()
) -> list[Any]:
    """The answers to ``messages`` on one stream (raises grpc.aio.AioRpcError on its failure)."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = ext_grpc.ExternalProcessorStub(channel).Process(
            iter(messages), metadata=tuple(metadata) or None, timeout=10
        )
        return [answer async for answer in call]
