"""The contract suite's ``stores``: every test here runs against the in-memory twin and against a
real redis-server, so the two implementations cannot drift apart."""

from __future__ import annotations

import pytest

from cacheroute_state import Stores, memory


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
def state_url(request: pytest.FixtureRequest) -> str:
    """``memory://...`` or the session's (emptied) real Redis."""
    if request.param == "redis":
        url: str = request.getfixturevalue("redis_url")
        return url
    url = request.getfixturevalue("memory_url")
    assert url.startswith(memory.SCHEME)
    return url


@pytest.fixture
def stores(state_stores: Stores) -> Stores:
    return state_stores
