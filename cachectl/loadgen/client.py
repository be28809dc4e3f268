"""One request end to end: ``Route`` on a router (gRPC), then a streamed completion on the engine.

The client holds one gRPC channel per router and one aiohttp session (one connection pool) for
every engine, so a run of thousands of requests costs a few sockets. Each request is sent to
``http://<decision.address>/v1/completions`` with ``stream: true``, ``stream_options.include_usage``
(for ``cached_tokens``) and the simulated engine's ``cacheroute`` extension carrying the workload
request's exact prefix blocks and token counts (docs/components/localcluster.md); ``max_tokens`` is
the request's output length. TTFT is measured to the first streamed chunk that carries text.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from typing import Any

import aiohttp
import grpc

from cachectl.loadgen.results import Outcome
from cacheroute.v1 import routing_pb2, routing_pb2_grpc
from sim.types import SimRequest

REASON_NAMES = {
    value: name.removeprefix("ROUTE_REASON_").lower()
    for name, value in routing_pb2.RouteReason.items()
}
_JSON = {"Content-Type": "application/json"}


def engine_error(exc: BaseException) -> str:
    if isinstance(exc, aiohttp.ClientConnectorError):
        return "engine:connect"
    # A reset connection (ECONNRESET from a killed engine) is a plain ClientOSError: the
    # engine went away mid-request, exactly as a ServerDisconnectedError says.
    disconnected = (
        aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError | aiohttp.ClientOSError
    )
    if isinstance(exc, disconnected):
        return "engine:disconnected"
    return f"engine:{type(exc).__name__}"


class LoadClient:
    """Routers and engines as one load generator sees them; use ``async with``."""

    def __init__(
        self,
        routers: Sequence[str],
        *,
        pool: str = "",
        model: str | None = None,
        route_timeout_s: float = 5.0,
        request_timeout_s: float = 120.0,
        route_blocks: bool = False,
    ) -> None:
        if not routers:
            raise ValueError("give at least one router address")
        self.routers = list(routers)
        self.pool = pool
        self.model = model
        self.route_timeout_s = route_timeout_s
        self.request_timeout_s = request_timeout_s
        self.route_blocks = route_blocks
        self._channels: list[grpc.aio.Channel] = []
        self._stubs: list[Any] = []
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> LoadClient:
        self._channels = [grpc.aio.insecure_channel(r) for r in self.routers]
        self._stubs = [routing_pb2_grpc.RouterServiceStub(c) for c in self._channels]
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=None)
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=self.request_timeout_s),
            auto_decompress=False,
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        for channel in self._channels:
            await channel.close()
        self._channels = []
        self._stubs = []

    def body(self, request: SimRequest, index: int) -> dict[str, Any]:
        body: dict[str, Any] = {
            "prompt": f"{request.key}: request {index}",
            "max_tokens": request.output_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
            "cacheroute": {"blocks": list(request.blocks), "prompt_tokens": request.prompt_tokens},
        }
        if self.model:
            body["model"] = self.model
        return body

    async def run(self, request: SimRequest, outcome: Outcome) -> None:
        """Route and send one request, filling ``outcome``; never raises on request errors."""
        try:
            if await self._route(request, outcome):
                await self._send(request, outcome)
        except asyncio.CancelledError:
            if outcome.error is None and outcome.finished < 0:
                outcome.error = "timeout"
            raise

    async def _route(self, request: SimRequest, outcome: Outcome) -> bool:
        which = outcome.index % len(self._stubs)
        message = routing_pb2.RouteRequest(
            pool=self.pool, key=request.key, request_id=str(outcome.index)
        )
        if self.route_blocks:
            message.prefix_blocks.extend(request.blocks)
        outcome.started = time.monotonic()
        outcome.router = self.routers[which]
        try:
            decision = await self._stubs[which].Route(message, timeout=self.route_timeout_s)
        except grpc.aio.AioRpcError as exc:
            outcome.error = f"route:{exc.code().name}"
            return False
        outcome.routed = time.monotonic()
        outcome.routed_unix = time.time()
        outcome.node_id = decision.node_id
        outcome.address = decision.address
        outcome.reason = REASON_NAMES.get(decision.reason, str(decision.reason))
        outcome.generation = decision.generation
        return True

    async def _send(self, request: SimRequest, outcome: Outcome) -> None:
        assert self._session is not None, "use LoadClient in `async with`"
        url = f"http://{outcome.address}/v1/completions"
        data = json.dumps(self.body(request, outcome.index), separators=(",", ":"))
        try:
            async with self._session.post(url, data=data, headers=_JSON) as response:
                if response.status != 200:
                    outcome.error = f"engine:http-{response.status}"
                    await response.read()
                    return
                await read_stream(response, outcome)
        except TimeoutError:
            outcome.error = "timeout"
        except (aiohttp.ClientError, OSError) as exc:
            outcome.error = engine_error(exc)


async def read_stream(response: aiohttp.ClientResponse, outcome: Outcome) -> None:
    """Read an OpenAI SSE stream into ``outcome``: first-token time, usage, finish or error."""
    async for raw in response.content:
        if not raw.startswith(b"data: "):
            continue
        payload = raw[6:].strip()
        if payload == b"[DONE]":
            break
        chunk = json.loads(payload)
        if "error" in chunk:
            outcome.error = "engine:stream-error"
            return
        if outcome.first_token < 0:
            for choice in chunk.get("choices") or ():
                if choice.get("text") or (choice.get("delta") or {}).get("content"):
                    outcome.first_token = time.monotonic()
                    break
        usage = chunk.get("usage")
        if usage:
            outcome.prompt_tokens = int(usage.get("prompt_tokens", 0))
            outcome.output_tokens = int(usage.get("completion_tokens", 0))
            details = usage.get("prompt_tokens_details") or {}
            outcome.cached_tokens = int(details.get("cached_tokens") or 0)
    if outcome.first_token < 0:
        outcome.error = "engine:no-tokens"
        return
    outcome.finished = time.monotonic()
