"""Talking to engines: node address → base URL, one attempt, and streaming the answer back.

**Address → base URL.** A node's address (from its agent's report or ``cachectl nodes add``) is
the engine's HTTP address. ``HOST:PORT`` means ``http://HOST:PORT``; an address that starts with
``http://`` or ``https://`` is used as given (a path prefix in it is kept, a trailing ``/``
dropped). The OpenAI paths are appended: ``/v1/chat/completions``, ``/v1/completions``,
``/v1/models``. So ``engine-3.svc:8000`` and ``https://gpu7.example:443/serve`` both work.

**An attempt** sends the client's body unchanged (with its ``Content-Type``, ``Accept``,
``Authorization``, the W3C trace context ``traceparent``/``tracestate``, ``X-Request-Id`` (vLLM's
request id) and ``X-data-parallel-rank`` (vLLM's data-parallel rank pin), all unchanged) and
waits for the engine's status line and headers, bounded by the first-byte timeout (which also
bounds any later silence of the engine mid-answer).
Connection errors, that timeout and a 5xx status are :class:`AttemptFailedError`
(the caller may retry: nothing has reached the client yet). Anything else is the answer: its
status and body go to the client as they arrive (``iter_any``: each read of the socket is written
at once, no buffering), so a 4xx from the engine passes through unchanged.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

FORWARD_REQUEST_HEADERS = (
    "Content-Type",
    "Accept",
    "Authorization",
    "traceparent",
    "tracestate",
    "X-Request-Id",
    "X-data-parallel-rank",
)
FORWARD_RESPONSE_HEADERS = ("Content-Type", "Cache-Control", "Content-Encoding", "X-Request-Id")


def base_url(address: str) -> str:
    """The engine's base URL for a node address (module docstring)."""
    if address.startswith(("http://", "https://")):
        return address.rstrip("/")
    return f"http://{address}"


class AttemptFailedError(Exception):
    """The engine gave no usable answer before the first byte; ``cause`` labels the metric."""

    def __init__(self, cause: str, detail: str, response: aiohttp.ClientResponse | None = None):
        super().__init__(detail)
        self.cause = cause
        self.detail = detail
        self.response = response  # a 5xx answer, kept to pass through if no retry is possible


class Upstream:
    """One connection pool to every engine (keep-alive, no limit), opened with the server."""

    def __init__(self, *, connect_timeout_s: float, first_byte_timeout_s: float) -> None:
        self.connect_timeout_s = connect_timeout_s
        self.first_byte_timeout_s = first_byte_timeout_s
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=300),
            # sock_read bounds the wait for the status line (the first-byte timeout) and any
            # later silence of an engine mid-answer (then a mid-stream failure, not a retry);
            # cheaper than an asyncio.timeout around every attempt.
            timeout=aiohttp.ClientTimeout(
                total=None,
                sock_connect=self.connect_timeout_s,
                sock_read=self.first_byte_timeout_s,
            ),
            auto_decompress=False,  # bytes pass through exactly as the engine sent them
            skip_auto_headers=("User-Agent", "Accept-Encoding"),
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        assert self._session is not None, "Upstream.start() first"
        return self._session

    async def attempt(
        self,
        url: str,
        body: bytes,
        headers: Mapping[str, str],
        first_byte_s: float | None = None,
    ) -> aiohttp.ClientResponse:
        """POST ``body`` to ``url``; the response once its headers came (or AttemptFailedError).
        ``first_byte_s``: a shorter wait for the headers (:mod:`.first_byte`)."""
        forward = CIMultiDict((h, headers[h]) for h in FORWARD_REQUEST_HEADERS if h in headers)
        wait = first_byte_s if first_byte_s is not None else self.first_byte_timeout_s
        try:
            async with asyncio.timeout(first_byte_s):  # None: sock_read alone bounds it
                response = await self.session.post(url, data=body, headers=forward)
        except TimeoutError:  # no headers in time (or aiohttp's ServerTimeoutError: sock_read)
            detail = f"no answer within {wait:g} s"
            raise AttemptFailedError("timeout", detail) from None
        except aiohttp.ClientConnectorError as exc:
            raise AttemptFailedError("connect", f"cannot connect: {exc.os_error}") from None
        except (aiohttp.ClientError, OSError) as exc:
            raise AttemptFailedError("connect", f"{type(exc).__name__}: {exc}") from None
        if response.status >= 500:
            raise AttemptFailedError("5xx", f"engine answered {response.status}", response)
        return response

    async def get_json(self, url: str, timeout_s: float) -> object:
        """GET a small JSON document (``/v1/models``), bounded by ``timeout_s``."""
        async with asyncio.timeout(timeout_s):
            async with self.session.get(url) as response:
                response.raise_for_status()
                return await response.json(content_type=None)


async def relay(
    request: web.Request,
    upstream: aiohttp.ClientResponse,
    headers: Mapping[str, str],
    on_chunk: Callable[[bytes], None] | None = None,
) -> tuple[web.StreamResponse, BaseException | None]:
    """Stream the engine's answer to the client chunk by chunk (each also to ``on_chunk``).

    Returns the response and the engine-side error that broke it mid-way, if any: the client
    then gets an SSE error event (a stream) or a cut connection (anything else), since a
    response whose status already went out cannot turn into an error any more. A client that
    went away raises (``ConnectionError``), or cancels the handler.
    """
    response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
    for name in FORWARD_RESPONSE_HEADERS:
        value = upstream.headers.get(name)
        if value is not None:
            response.headers[name] = value
    response.headers.update(headers)
    if upstream.content_length is not None:
        response.content_length = upstream.content_length
    await response.prepare(request)
    chunks = upstream.content.iter_any().__aiter__()
    while True:
        try:
            chunk = await chunks.__anext__()
        except StopAsyncIteration:
            break
        except (aiohttp.ClientError, OSError) as exc:
            await _broken(request, response, headers, exc)
            return response, exc
        if on_chunk is not None:
            on_chunk(chunk)
        await response.write(chunk)
    await response.write_eof()
    return response, None


async def _broken(
    request: web.Request,
    response: web.StreamResponse,
    headers: Mapping[str, str],
    exc: BaseException,
) -> None:
    if response.headers.get("Content-Type", "").startswith("text/event-stream"):
        node = headers.get("x-cacheroute-node", "?")
        error = {
            "error": {
                "message": f"engine {node} failed mid-stream: {type(exc).__name__}",
                "type": "server_error",
                "param": None,
                "code": "engine_mid_stream",
            }
        }
        await response.write(b"data: " + json.dumps(error).encode() + b"\n\n")
        await response.write_eof()
    elif request.transport is not None:
        request.transport.close()  # the client sees a truncated body, not a complete one
