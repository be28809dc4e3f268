"""Redis connection settings and the mapping of Redis failures to StoreUnavailableError."""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar, cast
from urllib.parse import parse_qsl, unquote

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from cacheroute_state.interfaces import StoreUnavailableError
from cacheroute_state.urls import CLUSTER_SCHEME, SENTINEL_SCHEME

P = ParamSpec("P")
T = TypeVar("T")

# Short timeouts and few retries: callers keep serving from what they hold when Redis is away,
# and try again on their next timer tick, so a long blocking retry here would only add latency.
SOCKET_TIMEOUT_S = 2.0
CONNECT_TIMEOUT_S = 1.0


@dataclass(frozen=True)
class SentinelUrl:
    """``redis+sentinel://[[USER]:PASSWORD@]HOST:PORT[,HOST:PORT...]/SERVICE[/DB]``.

    The password (and user) are the Redis data nodes'; ``?sentinel_password=`` gives the
    sentinels' own, when they have one.
    """

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_password: str | None = None


def parse_sentinel_url(url: str) -> SentinelUrl:
    """Parse a ``redis+sentinel://`` URL; ValueError names what is wrong (never the password)."""
    rest = url[len(SENTINEL_SCHEME) :]
    credentials, at, rest = rest.rpartition("@")
    if not at:
        credentials = ""
    hosts, _, path_query = rest.partition("/")
    path, _, query = path_query.partition("?")
    user, _, password = credentials.partition(":")
    sentinels = []
    for item in filter(None, hosts.split(",")):
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"sentinel address {item!r}: expected HOST:PORT")
        sentinels.append((host.strip("[]"), int(port)))
    parts = [p for p in path.split("/") if p]
    if not sentinels or not parts or len(parts) > 2 or (len(parts) == 2 and not parts[1].isdigit()):
        raise ValueError(
            "expected redis+sentinel://[:PASSWORD@]HOST:PORT[,HOST:PORT...]/SERVICE[/DB]"
        )
    options = dict(parse_qsl(query))
    return SentinelUrl(
        sentinels=tuple(sentinels),
        service=unquote(parts[0]),
        db=int(parts[1]) if len(parts) == 2 else 0,
        username=unquote(user) or None,
        password=unquote(password) or None,
        sentinel_password=options.get("sentinel_password") or None,
    )


def connect(url: str) -> aioredis.Redis:
    """An asyncio Redis client returning bytes for ``redis://host:port/db`` (or ``rediss://``,
    ``unix://``), or for the current primary of a Sentinel-monitored service
    (``redis+sentinel://``: redis-py's Sentinel client finds the primary on every new connection,
    so after a failover the next command reaches the new one)."""
    common: dict[str, Any] = {
        "socket_timeout": SOCKET_TIMEOUT_S,
        "socket_connect_timeout": CONNECT_TIMEOUT_S,
        "retry": Retry(ExponentialBackoff(cap=0.2, base=0.02), retries=2),
        "health_check_interval": 15,
        "decode_responses": False,
    }
    if url.startswith(CLUSTER_SCHEME):
        return cast(aioredis.Redis, connect_cluster(url, common))
    if url.startswith(SENTINEL_SCHEME):
        parsed = parse_sentinel_url(url)
        sentinel_kwargs: dict[str, Any] = {
            "socket_timeout": SOCKET_TIMEOUT_S,
            "socket_connect_timeout": CONNECT_TIMEOUT_S,
        }
        if parsed.sentinel_password:
            sentinel_kwargs["password"] = parsed.sentinel_password
        sentinel = Sentinel(  # type: ignore[no-untyped-call, unused-ignore]
            list(parsed.sentinels), sentinel_kwargs=sentinel_kwargs
        )
        client: aioredis.Redis = sentinel.master_for(
            parsed.service,
            db=parsed.db,
            username=parsed.username,
            password=parsed.password,
            **common,
        )
        return client
    return aioredis.Redis.from_url(url, **common)


def connect_cluster(url: str, common: dict[str, Any]) -> RedisCluster:
    """``redis+cluster://[[USER]:PASSWORD@]HOST:PORT[,HOST:PORT...]``: redis-py's cluster client
    (the startup nodes only seed the slot map). Every per-pool key is hash-tagged ``cr:{pool}``,
    so each pool's scripts and pipelines stay in one slot; hints are cluster-wide PUBLISHes."""
    rest = url[len(CLUSTER_SCHEME) :]
    credentials, at, hosts = rest.rpartition("@")
    user, _, password = (credentials if at else "").partition(":")
    nodes = []
    for item in filter(None, hosts.split("/")[0].split(",")):
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"cluster node {item!r}: expected HOST:PORT")
        nodes.append(ClusterNode(host.strip("[]"), int(port)))
    if not nodes:
        raise ValueError("expected redis+cluster://[:PASSWORD@]HOST:PORT[,HOST:PORT...]")
    options = {k: v for k, v in common.items() if k != "health_check_interval"}
    return RedisCluster(
        startup_nodes=nodes,
        username=unquote(user) or None,
        password=unquote(password) or None,
        **options,
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
