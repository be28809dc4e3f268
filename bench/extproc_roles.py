"""The two subprocess roles of ``bench_extproc.py``: the load-generating client and the bare picker.

Each runs in its own process (``bench_extproc.py client ...`` / ``bare ...``) so its CPU is
measured apart from the orchestrator's; they share nothing with the orchestration but the
request body and host.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp

HOST = "127.0.0.1"
BODY = {"prompt": "benchmark prompt for the picker", "max_tokens": 16, "stream": True}


def bare(port: int, engine: str) -> None:
    """The baseline picker: gather the body, answer a constant pick, echo, acknowledge the rest."""
    import grpc  # noqa: PLC0415 - only this subprocess needs it
    from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_grpc  # noqa: PLC0415

    from dataplane.extproc import wire  # noqa: PLC0415

    class Bare(ext_grpc.ExternalProcessorServicer):  # type: ignore[misc]
        async def Process(self, requests: Any, context: Any) -> Any:  # noqa: N802
            body = b""
            async for message in requests:
                kind = message.WhichOneof("request")
                if kind == "request_body":
                    body += message.request_body.body
                    if message.request_body.end_of_stream:
                        yield wire.pick_response((engine,))
                        for answer in wire.body_echo(body, True):
                            yield answer
                elif kind == "response_headers":
                    yield wire.response_headers_done()
                elif kind == "response_trailers":
                    yield wire.trailers_done(response=True)
                elif kind == "request_trailers":
                    yield wire.trailers_done()

    async def main() -> None:
        server = grpc.aio.server()
        ext_grpc.add_ExternalProcessorServicer_to_server(Bare(), server)
        server.add_insecure_port(f"{HOST}:{port}")
        await server.start()
        await server.wait_for_termination()

    asyncio.run(main())


def client(url: str, mode: str, engine: str, streams: int, duration_s: float) -> None:
    """Closed loop of ``streams`` workers; prints TTFTs and counts as JSON."""

    async def main() -> dict[str, Any]:
        ttfts: list[float] = []
        done = 0
        errors = 0
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

            async def worker(w: int) -> None:
                nonlocal done, errors
                end = time.perf_counter() + duration_s
                i = 0
                while time.perf_counter() < end:
                    key = f"key-{w}-{i % 8}"
                    i += 1
                    headers = {"Content-Type": "application/json"}
                    body: dict[str, Any] = dict(BODY)
                    if mode == "fixed":
                        headers["x-gateway-destination-endpoint"] = engine
                    elif mode in ("epp-header", "epp-headers-only", "epp-native-headers-only"):
                        headers["x-cacheroute-key"] = key
                    else:
                        body["prompt_cache_key"] = key
                    started = time.perf_counter()
                    try:
                        async with session.post(
                            url, data=json.dumps(body), headers=headers
                        ) as response:
                            first = True
                            async for _chunk in response.content.iter_any():
                                if first:
                                    ttfts.append(time.perf_counter() - started)
                                    first = False
                            if response.status == 200:
                                done += 1
                            else:
                                errors += 1
                    except aiohttp.ClientError:
                        errors += 1

            await asyncio.gather(*(worker(w) for w in range(streams)))
        return {"ttft": ttfts, "done": done, "errors": errors, "seconds": duration_s}

    print(json.dumps(asyncio.run(main())))
