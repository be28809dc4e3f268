"""The real ``openai`` clients a test opens, closed when the test ends.

An ``AsyncOpenAI`` keeps an httpx connection pool. One a test drops without ``close()`` leaves its
sockets to the garbage collector, which warns (``ResourceWarning``) in whichever test happens to be
running then: about a hundred lines of noise at the end of every ``make test``, where a real leak
would hide. :func:`openai_client` makes one and remembers it; the ``close_openai_clients`` fixture
(autouse in the directories whose tests call it) closes them all at teardown.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import openai
import pytest

_open: list[openai.AsyncOpenAI] = []


def openai_client(base_url: str, **options: object) -> openai.AsyncOpenAI:
    """``openai.AsyncOpenAI(base_url=..., api_key="unused", max_retries=0, **options)``, closed
    when the test ends."""
    settings: dict[str, object] = {"api_key": "unused", "max_retries": 0, **options}
    client = openai.AsyncOpenAI(base_url=base_url, **settings)  # type: ignore[arg-type]
    _open.append(client)
    return client


async def close_all() -> None:
    while _open:
        await _open.pop().close()


@pytest.fixture(autouse=True)
async def close_openai_clients() -> AsyncIterator[None]:
    """Close every client :func:`openai_client` made during the test."""
    yield
    await close_all()
