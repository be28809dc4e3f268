"""HintSource on Redis pub/sub. Hints are only nudges: a reader that misses one (Redis away, a
reconnect) still converges because it also re-reads on a timer, as xDS clients do."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from cacheroute_state import schema
from cacheroute_state.interfaces import Hint, HintKind, HintSource, StoreUnavailableError
from cacheroute_state.redis_base import blob, text

# The per-pool channels; the pools channel is schema.POOLS_CHANNEL.
_POOL_KINDS = {kind.value: kind for kind in (HintKind.TABLE, HintKind.LOAD)}
_ALL_POOLS_PATTERN = "cr:{*}:hint:*"


def parse_channel(channel: str) -> tuple[HintKind, str] | None:
    """``cr:{pool}:hint:<kind>`` → (kind, pool); None for channels that are not hints."""
    if channel == schema.POOLS_CHANNEL:
        return HintKind.POOLS, ""
    if not channel.startswith("cr:{"):
        return None
    pool, sep, kind = channel[4:].partition("}:hint:")
    return (_POOL_KINDS[kind], pool) if sep and kind in _POOL_KINDS else None


class RedisHintSource(HintSource):
    def __init__(self, client: aioredis.Redis) -> None:
        self._redis = client

    async def subscribe(self, pools: Sequence[str] | None) -> AsyncIterator[Hint]:
        pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
        try:
            await pubsub.subscribe(schema.POOLS_CHANNEL)
            if pools is None:
                await pubsub.psubscribe(_ALL_POOLS_PATTERN)
            else:
                channels = [schema.table_channel(p) for p in pools]
                channels += [schema.load_channel(p) for p in pools]
                await pubsub.subscribe(*channels)
            # Subscribed: anything published from now on reaches us, so the reader should
            # re-read everything once to cover what it missed before.
            yield Hint(kind=HintKind.RESYNC, pool="", payload=b"")
            async for message in pubsub.listen():
                if message.get("type") not in ("message", "pmessage"):
                    continue
                parsed = parse_channel(text(message["channel"]))
                if parsed is not None:
                    yield Hint(kind=parsed[0], pool=parsed[1], payload=blob(message["data"]))
        except (RedisError, OSError) as exc:
            raise StoreUnavailableError(f"redis subscription lost: {exc}") from exc
        finally:
            with contextlib.suppress(RedisError, OSError):
                await pubsub.aclose()  # type: ignore[no-untyped-call, unused-ignore]
