"""One request straight to any OpenAI-compatible server: the router's front, an engine, vLLM.

No ``Route`` call and no simulated-engine extension: each workload request becomes a streamed
``POST {url}/v1/completions`` whose prompt *text* carries the request's prefix structure, so a
real engine's prefix cache sees exactly the sharing the workload has. Every chained block id
renders as 64 bytes of text, 16 three-letter words (4 bits of the id each), about 16 tokens with
a real tokenizer; equal leading block ids give equal leading text. The simulated engine hashes
64-byte chunks of a text prompt (``simengine.protocol``), so its blocks line up with the
workload's too. ``max_tokens`` is the request's output length; the routing key goes as
``prompt_cache_key`` (OpenAI's field, which the router's front routes by).

TTFT is measured to the first streamed chunk with text; the hit rate comes from
``usage.prompt_tokens_details.cached_tokens`` (``stream_options.include_usage``), where the
server reports it (vLLM and the simulated engine do; 0 otherwise). The router's decision, when
the server is the router's front, is read from the ``x-cacheroute-*`` response headers.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from typing import Any

import aiohttp

from cachectl.loadgen.client import engine_error, read_stream
from cachectl.loadgen.results import Outcome
from sim.types import SimRequest

_WORDS = tuple(
    " " + w
    for w in (
        "the", "and", "for", "are", "but", "not", "you", "all",
        "any", "can", "her", "was", "one", "our", "out", "day",
    )
)  # fmt: skip
_JSON = {"Content-Type": "application/json"}


def block_text(block: int) -> str:
    """64 bytes of text for one chained block id (module docstring)."""
    return "".join(_WORDS[(block >> shift) & 0xF] for shift in range(0, 64, 4))


def prompt_text(blocks: Sequence[int]) -> str:
    return "".join(block_text(b) for b in blocks)


class OpenAILoadClient:
    """Sends each request to ``{url}/v1/completions`` (several URLs: round-robin by request).

    Use ``async with``.
    """

    def __init__(
        self,
        url: str | Sequence[str],
        *,
        model: str | None = None,
        api_key: str | None = None,
        pool: str = "",
        request_timeout_s: float = 120.0,
    ) -> None:
        urls = [url] if isinstance(url, str) else list(url)
        if not urls:
            raise ValueError("give at least one URL")
        self.urls = [u.rstrip("/").removesuffix("/v1") for u in urls]
        self.url = self.urls[0]
        self.model = model
        self.headers = dict(_JSON)
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        if pool:
            self.headers["x-cacheroute-pool"] = pool
        self.request_timeout_s = request_timeout_s
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> OpenAILoadClient:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=None),
            timeout=aiohttp.ClientTimeout(total=self.request_timeout_s),
        )
        if self.model is None:
            self.model = await self._first_model()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _first_model(self) -> str:
        """The server's first model (``/v1/models``), as clients that send none would pick."""
        assert self._session is not None
        async with self._session.get(f"{self.url}/v1/models", headers=self.headers) as reply:
            reply.raise_for_status()
            data = (await reply.json(content_type=None)).get("data") or []
        if not data:
            raise RuntimeError(f"{self.url}/v1/models lists no model; pass --model")
        return str(data[0]["id"])

    def body(self, request: SimRequest) -> dict[str, Any]:
        return {
            "model": self.model,
            "prompt": prompt_text(request.blocks),
            "max_tokens": request.output_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
            "prompt_cache_key": request.key,
        }

    async def run(self, request: SimRequest, outcome: Outcome) -> None:
        """Send one request, filling ``outcome``; never raises on request errors."""
        assert self._session is not None, "use OpenAILoadClient in `async with`"
        data = json.dumps(self.body(request), separators=(",", ":"))
        url = self.urls[outcome.index % len(self.urls)]
        outcome.started = outcome.routed = time.monotonic()
        outcome.routed_unix = time.time()
        outcome.router = url
        try:
            async with self._session.post(
                f"{url}/v1/completions", data=data, headers=self.headers
            ) as response:
                headers = response.headers
                outcome.node_id = headers.get("x-cacheroute-node", url)
                outcome.address = outcome.node_id
                outcome.reason = headers.get("x-cacheroute-reason", "")
                outcome.generation = int(headers.get("x-cacheroute-generation") or 0)
                if response.status != 200:
                    outcome.error = f"engine:http-{response.status}"
                    await response.read()
                    return
                await read_stream(response, outcome)
        except asyncio.CancelledError:
            if outcome.error is None and outcome.finished < 0:
                outcome.error = "timeout"
            raise
        except TimeoutError:
            outcome.error = "timeout"
        except (aiohttp.ClientError, OSError) as exc:
            outcome.error = engine_error(exc)
