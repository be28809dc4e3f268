"""The soak's HTTP front traffic: real OpenAI chat completions through the router's front.

Issue 23's acceptance reads the soak as "Route + HTTP front"; this module is the HTTP half. It
drives the front with the real ``openai`` client (the same client the front's acceptance tests
use), half streamed and half not, over a few business keys in the front's key header, and counts
every non-2xx answer, transport error, timeout or empty answer as a failure.
"""

from __future__ import annotations

import asyncio
import time

import openai
from openai.types.chat import ChatCompletionMessageParam

KEY_HEADER = "x-cacheroute-key"  # dataplane.openai_api.request_keys.KEY_HEADER
BUSINESS_KEYS = ("acme", "globex", "initech", "umbrella", "hooli")
CALLERS = 4
TIMEOUT_S = 30.0

Sample = tuple[float, float, bool]


def client(url: str) -> openai.AsyncOpenAI:
    """No retries: a retried failure would hide exactly what the soak counts."""
    return openai.AsyncOpenAI(
        base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=TIMEOUT_S
    )


async def served_model(url: str, deadline: float) -> str:
    """The engines' model, asked through the front; retried until one chat answer comes back
    (the front learns the nodes from a load snapshot: until then 503 is a start-up wait)."""
    api = client(url)
    try:
        while True:
            try:
                model = (await api.models.list()).data[0].id
                await chat(api, model, BUSINESS_KEYS[0], stream=False)
                return model
            except (openai.APIError, IndexError, ValueError):
                if time.monotonic() > deadline:
                    raise
            await asyncio.sleep(0.2)
    finally:
        await api.close()


async def chat(api: openai.AsyncOpenAI, model: str, key: str, *, stream: bool) -> None:
    """One chat completion; raises ValueError when a 2xx answer carries no text."""
    messages: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": f"soak request for {key}: say something"}
    ]
    headers = {KEY_HEADER: key}
    if stream:
        chunks = await api.chat.completions.create(
            model=model, messages=messages, max_tokens=8, stream=True, extra_headers=headers
        )
        texts = [c.choices[0].delta.content async for c in chunks if c.choices]
        if not any(texts):
            raise ValueError("stream without text")
    else:
        answer = await api.chat.completions.create(
            model=model, messages=messages, max_tokens=8, extra_headers=headers
        )
        if not answer.choices or not answer.choices[0].message.content:
            raise ValueError("answer without text")


def describe(exc: Exception) -> str:
    """A failure's kind for the report: the HTTP status, else the exception's type."""
    if isinstance(exc, openai.APIStatusError):
        return f"HTTP {exc.status_code}: {exc.message}"
    return f"{type(exc).__name__}: {exc}"


async def http_load(
    url: str, model: str, rate: float, until: float, samples: list[Sample], errors: list[str]
) -> None:
    """Chat completions at ``rate`` per second from :data:`CALLERS` callers on one client,
    alternating streamed and not; the first 20 failures' descriptions go to ``errors``."""
    if rate <= 0:
        return
    interval = CALLERS / rate
    api = client(url)

    async def caller(n: int) -> None:
        next_at = time.monotonic() + n * interval / CALLERS
        i = n
        while next_at < until:
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            started = time.perf_counter()
            ok = True
            key = BUSINESS_KEYS[i % len(BUSINESS_KEYS)]
            try:
                await chat(api, model, key, stream=i % 2 == 0)
            except (openai.APIError, ValueError) as exc:
                ok = False
                if len(errors) < 20:
                    errors.append(describe(exc))
            samples.append((time.time(), time.perf_counter() - started, ok))
            next_at += interval
            i += CALLERS

    try:
        await asyncio.gather(*(caller(n) for n in range(CALLERS)))
    finally:
        await api.close()
