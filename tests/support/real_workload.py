"""The real-engine benchmark's workload and client: tenants with long shared prefixes, Zipf
popularity, Poisson arrivals, and what each answer says about the engine's prefix cache.

Each tenant's prompt is its prefix (``prefix_chars`` random letters, ≈ 1 token a character with
the byte-level test model) then a short question. A run's ``salt`` opens every prefix, so each
run starts cold without restarting the engines, while the tenant's routing key
(``x-cacheroute-key: tenant-<i>``) stays the same across runs and a plan built once keeps
applying. Requests are ``/v1/completions``, streamed with ``stream_options.include_usage``:
TTFT is measured at the client (send → first streamed chunk), the cached share from the final
usage chunk's ``prompt_tokens_details.cached_tokens`` over ``prompt_tokens``. The schedule is
fixed before a run; the lag between a request's scheduled and actual send time is recorded, so a
client starved of CPU shows up instead of silently lowering the offered load.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import string
import time
from collections.abc import Sequence
from dataclasses import dataclass

import aiohttp
import numpy as np

KEY_HEADER = "x-cacheroute-key"


@dataclass(frozen=True)
class Workload:
    tenants: int = 16
    prefix_chars: int = 1000
    question_chars: int = 40
    zipf_s: float = 1.0
    rate_per_s: float = 2.0
    requests: int = 40
    max_tokens: int = 8


@dataclass(frozen=True)
class Request:
    at_s: float
    tenant: int
    prompt: str


def schedule(workload: Workload, salt: str, seed: int) -> list[Request]:
    """The run's requests: Zipf tenants, Poisson arrivals, prompts opened by ``salt``."""
    rng = random.Random(seed)
    weights = [1.0 / (i + 1) ** workload.zipf_s for i in range(workload.tenants)]
    prefixes = [
        _text(random.Random(f"{salt}/{t}"), workload.prefix_chars) for t in range(workload.tenants)
    ]
    found, at = [], 0.0
    for _ in range(workload.requests):
        at += rng.expovariate(workload.rate_per_s)
        tenant = rng.choices(range(workload.tenants), weights)[0]
        question = _text(rng, workload.question_chars)
        found.append(Request(at, tenant, f"{salt} {prefixes[tenant]}\nQ: {question}\nA:"))
    return found


def _text(rng: random.Random, chars: int) -> str:
    return "".join(rng.choice(string.ascii_lowercase + "     ") for _ in range(chars))


@dataclass(frozen=True)
class Answer:
    tenant: int
    ok: bool
    prompt_tokens: int = 0
    cached_tokens: int = 0
    ttft_s: float = 0.0
    lag_s: float = 0.0
    node: str = ""
    error: str = ""


async def send_all(
    requests: Sequence[Request], targets: Sequence[str], workload: Workload, timeout_s: float
) -> list[Answer]:
    """Send on schedule to ``targets`` (one router's front, or engines round-robin)."""
    rotation = itertools.cycle(targets)
    limits = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=limits) as session:
        start = time.monotonic()
        tasks = []
        for request in requests:
            delay = start + request.at_s - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            lag = time.monotonic() - start - request.at_s
            coro = _one(session, next(rotation), request, workload, lag, timeout_s)
            tasks.append(asyncio.create_task(coro))
        return list(await asyncio.gather(*tasks))


async def _one(
    session: aiohttp.ClientSession,
    base: str,
    request: Request,
    workload: Workload,
    lag: float,
    timeout_s: float,
) -> Answer:
    body = {
        "model": "tiny", "prompt": request.prompt, "max_tokens": workload.max_tokens,
        "temperature": 0, "stream": True, "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }  # fmt: skip
    headers = {KEY_HEADER: f"tenant-{request.tenant}"}
    sent = time.monotonic()
    first = 0.0
    usage: dict[str, object] = {}
    try:
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        async with session.post(
            f"{base}/v1/completions", json=body, headers=headers, timeout=timeout
        ) as reply:
            node = reply.headers.get("x-cacheroute-node", base)
            if reply.status != 200:
                error = f"HTTP {reply.status}: {(await reply.text())[:300]}"
                return Answer(request.tenant, False, lag_s=lag, error=error)
            async for raw in reply.content:
                line = raw.strip()
                if not line.startswith(b"data:") or line == b"data: [DONE]":
                    continue
                if not first:
                    first = time.monotonic()
                chunk = json.loads(line[5:])
                if chunk.get("usage"):
                    usage = chunk["usage"]
    except (aiohttp.ClientError, TimeoutError) as exc:
        return Answer(request.tenant, False, lag_s=lag, error=repr(exc))
    details = usage.get("prompt_tokens_details") or {}
    cached = int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0
    prompt = int(usage.get("prompt_tokens") or 0)  # type: ignore[call-overload]
    return Answer(request.tenant, bool(prompt), prompt, cached, first - sent, lag, node)


@dataclass(frozen=True)
class RunSummary:
    """One arm's run: the primary metric, latency, and what could have skewed it."""

    arm: str
    repeat: int
    requests: int
    failed: int
    prompt_tokens: int
    cached_tokens: int
    engine_cached: float  # the engines' own counters over the run, summed
    engine_processed: float
    ttft_p50_s: float
    ttft_p99_s: float
    lag_p99_s: float
    load_before: float
    load_after: float
    nodes_used: int

    @property
    def cached_share(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def engine_share(self) -> float:
        total = self.engine_cached + self.engine_processed
        return self.engine_cached / total if total else 0.0


def summarise(
    arm: str,
    repeat: int,
    answers: Sequence[Answer],
    engine_delta: tuple[float, float],
    loads: tuple[float, float],
) -> RunSummary:
    good = [a for a in answers if a.ok]
    ttfts = np.array([a.ttft_s for a in good]) if good else np.zeros(1)
    lags = np.array([a.lag_s for a in answers]) if answers else np.zeros(1)
    return RunSummary(
        arm=arm,
        repeat=repeat,
        requests=len(answers),
        failed=len(answers) - len(good),
        prompt_tokens=sum(a.prompt_tokens for a in good),
        cached_tokens=sum(a.cached_tokens for a in good),
        engine_cached=engine_delta[0],
        engine_processed=engine_delta[1],
        ttft_p50_s=float(np.percentile(ttfts, 50)),
        ttft_p99_s=float(np.percentile(ttfts, 99)),
        lag_p99_s=float(np.percentile(lags, 99)),
        load_before=loads[0],
        load_after=loads[1],
        nodes_used=len({a.node for a in good}),
    )
