"""Redis connection settings and the mapping of Redis failures to StoreUnavailableError."""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar
from urllib.parse import urlsplit, urlunsplit

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from cacheroute_state.interfaces import StoreUnavailableError

P = ParamSpec("P")
T = TypeVar("T")

# Short timeouts and few retries: callers keep serving from what they hold when Redis is away,
# and try again on their next timer tick, so a long blocking retry here would only add latency.
SOCKET_TIMEOUT_S = 2.0
CONNECT_TIMEOUT_S = 1.0


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for logs: a Redis URL may carry one)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{user}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def connect(url: str) -> aioredis.Redis:
    """An asyncio Redis client for ``url`` (redis://host:port/db) returning bytes."""
    return aioredis.Redis.from_url(
        url,
        socket_timeout=SOCKET_TIMEOUT_S,
        socket_connect_timeout=CONNECT_TIMEOUT_S,
        retry=Retry(ExponentialBackoff(cap=0.2, base=0.02), retries=2),
        health_check_interval=15,
        decode_responses=False,
    )


def unavailable_on_redis_error(
    method: Callable[P, Coroutine[Any, Any, T]],
) -> Callable[P, Coroutine[Any, Any, T]]:
    """Re-raise connection problems and timeouts as StoreUnavailableError."""

    @functools.wraps(method)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await method(*args, **kwargs)
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            raise StoreUnavailableError(f"redis unavailable: {exc}") from exc
        except RedisError as exc:
            raise StoreUnavailableError(f"redis error: {exc}") from exc

    return wrapper


def text(value: bytes | str) -> str:
    """A Redis reply as text (replies are bytes; the stubs also allow str)."""
    return value.decode() if isinstance(value, bytes) else value


def blob(value: bytes | str) -> bytes:
    """A Redis reply as bytes."""
    return value if isinstance(value, bytes) else value.encode()
