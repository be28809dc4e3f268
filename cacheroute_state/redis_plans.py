"""PlanStore on Redis: immutable versions, a CAS-moved active pointer, audit stream, hints."""

from __future__ import annotations

import redis.asyncio as aioredis
from google.protobuf.message import DecodeError
from redis.exceptions import ResponseError

from cacheroute.v1 import cluster_pb2, table_pb2
from cacheroute_state import schema
from cacheroute_state.active_pointer import conflict_message, damaged
from cacheroute_state.interfaces import (
    ConflictError,
    CorruptRecordError,
    PlanInUseError,
    PlanMismatchError,
    PlanNotFoundError,
    PlanStore,
)
from cacheroute_state.redis_base import blob, text, unavailable_on_redis_error
from servekit.clock import Clock, wall_ms

AUDIT_MAXLEN = schema.AUDIT_MAXLEN
PREVIOUS_KEPT = schema.PREVIOUS_KEPT

# KEYS: plan, meta, plans-zset. ARGV: table bytes, meta bytes, created_at ms, version.
# Returns nil when stored, else the already stored metadata.
_PUT_PLAN = """
if redis.call('EXISTS', KEYS[1]) == 1 then return redis.call('GET', KEYS[2]) end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[2])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[4])
return false
"""

# KEYS: active, plans-zset, previous, audit. ARGV: version, expected generation, pointer bytes,
# audit bytes, hint channel, new generation. Returns {status, generation, previous version}:
# {1, new} moved | {0, current} conflict | {-1, current} unknown version. The version replaced is
# read here, in the same atomic step, and stored beside the audit event ('from'). An empty
# version (no table: planned routing disabled) needs no stored plan and is never pushed onto the
# previous-versions list. A damaged record (not a hash, or a generation that is not a number)
# counts as generation 0 of nothing, so a move that expects 0 overwrites it.
_MOVE_ACTIVE = f"""
local kind = redis.call('TYPE', KEYS[1]).ok
local current, previous = 0, ''
if kind == 'hash' then
  current = tonumber(redis.call('HGET', KEYS[1], 'generation') or '0') or 0
  previous = redis.call('HGET', KEYS[1], 'version') or ''
end
if current ~= tonumber(ARGV[2]) then return {{0, current, previous}} end
if ARGV[1] ~= '' and not redis.call('ZSCORE', KEYS[2], ARGV[1]) then
  return {{-1, current, previous}}
end
if kind ~= 'hash' and kind ~= 'none' then redis.call('DEL', KEYS[1]) end
redis.call('HSET', KEYS[1], 'generation', ARGV[6], 'version', ARGV[1], 'pb', ARGV[3])
if previous ~= '' and previous ~= ARGV[1] then
  redis.call('LPUSH', KEYS[3], previous)
  redis.call('LTRIM', KEYS[3], 0, {PREVIOUS_KEPT - 1})
end
redis.call('XADD', KEYS[4], 'MAXLEN', '~', '{AUDIT_MAXLEN}', '*', 'e', ARGV[4], 'from', previous)
redis.call('PUBLISH', ARGV[5], ARGV[6])
return {{1, tonumber(ARGV[6]), previous}}
"""


def _int(raw: bytes | str | None) -> int:
    try:
        return int(raw or 0)
    except ValueError:
        return 0


# KEYS: plan, meta, plans-zset, active, previous, deltas. ARGV: version. Returns 1 deleted, 0 not
# stored, -1 in use (the active version, or the newest previous version other than it).
_DELETE_PLAN = """
local active = redis.call('HGET', KEYS[4], 'version') or ''
if ARGV[1] == active then return -1 end
for _, v in ipairs(redis.call('LRANGE', KEYS[5], 0, -1)) do
  if v ~= active then
    if v == ARGV[1] then return -1 end
    break
  end
end
if redis.call('ZREM', KEYS[3], ARGV[1]) == 0 then return 0 end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[6])
return 1
"""


class RedisPlanStore(PlanStore):
    def __init__(self, client: aioredis.Redis, clock: Clock = wall_ms) -> None:
        self._redis = client
        self._clock = clock
        self._put_plan = client.register_script(_PUT_PLAN)
        self._move_active = client.register_script(_MOVE_ACTIVE)
        self._delete_plan = client.register_script(_DELETE_PLAN)

    @unavailable_on_redis_error
    async def put_plan(
        self, table_bytes: bytes, meta: table_pb2.PlanMetadata
    ) -> tuple[table_pb2.PlanMetadata, bool]:
        pool, version = meta.pool, meta.version
        keys = [schema.plan_key(pool, version), schema.meta_key(pool, version)]
        keys.append(schema.pool_key(pool, "plans"))
        args: list[bytes | str | int] = [
            table_bytes,
            meta.SerializeToString(),
            meta.created_at_unix_ms,
            version,
        ]
        existing = await self._put_plan(keys=keys, args=args)
        await self.add_pool(pool)
        if existing is None:
            return meta, True
        stored = table_pb2.PlanMetadata.FromString(blob(existing))
        if stored.content_hash != meta.content_hash:
            raise PlanMismatchError(
                f"version {version} is stored with content {stored.content_hash[:16]}…, "
                f"not {meta.content_hash[:16]}…"
            )
        return stored, False

    @unavailable_on_redis_error
    async def get_table_bytes(self, pool: str, version: str) -> bytes | None:
        data = await self._redis.get(schema.plan_key(pool, version))
        return None if data is None else blob(data)

    @unavailable_on_redis_error
    async def put_delta(self, pool: str, base_version: str, version: str, data: bytes) -> None:
        await self._redis.hset(schema.deltas_key(pool, version), base_version, data)

    @unavailable_on_redis_error
    async def get_delta_bytes(self, pool: str, base_version: str, version: str) -> bytes | None:
        data = await self._redis.hget(schema.deltas_key(pool, version), base_version)
        return None if data is None else blob(data)

    @unavailable_on_redis_error
    async def get_metadata(self, pool: str, version: str) -> table_pb2.PlanMetadata | None:
        data = await self._redis.get(schema.meta_key(pool, version))
        return None if data is None else table_pb2.PlanMetadata.FromString(blob(data))

    @unavailable_on_redis_error
    async def update_metadata(self, meta: table_pb2.PlanMetadata) -> None:
        key = schema.meta_key(meta.pool, meta.version)
        if not await self._redis.set(key, meta.SerializeToString(), xx=True):
            raise PlanNotFoundError(f"plan {meta.version} not found in pool {meta.pool}")

    @unavailable_on_redis_error
    async def list_plans(self, pool: str, limit: int) -> list[table_pb2.PlanMetadata]:
        versions: list[bytes] = await self._redis.zrevrange(  # type: ignore[assignment]
            schema.pool_key(pool, "plans"), 0, limit - 1
        )
        if not versions:
            return []
        raw = await self._redis.mget([schema.meta_key(pool, text(v)) for v in versions])
        return [table_pb2.PlanMetadata.FromString(blob(d)) for d in raw if d is not None]

    @unavailable_on_redis_error
    async def get_active(self, pool: str) -> cluster_pb2.ActivePointer | None:
        key = schema.pool_key(pool, "active")
        try:
            data = await self._redis.hget(key, "pb")
        except ResponseError as exc:  # WRONGTYPE: the key holds something else
            raise CorruptRecordError(key, 0, str(exc)[:60]) from None
        if data is None:
            return None
        try:
            return cluster_pb2.ActivePointer.FromString(blob(data))
        except DecodeError as exc:
            generation = await self._redis.hget(key, "generation")
            raise CorruptRecordError(key, _int(generation), str(exc)[:60]) from None

    @unavailable_on_redis_error
    async def move_active(
        self,
        pool: str,
        version: str,
        *,
        expected_generation: int,
        actor: str,
        action: str,
        detail: str = "",
    ) -> cluster_pb2.ActivePointer:
        now = self._clock()
        generation = expected_generation + 1
        pointer = cluster_pb2.ActivePointer(
            pool=pool,
            version=version,
            generation=generation,
            updated_at_unix_ms=now,
            actor=actor,
            action=action,
        )
        event = cluster_pb2.AuditEvent(  # from_version: added by the script (module comment)
            at_unix_ms=now,
            actor=actor,
            action=action,
            pool=pool,
            to_version=version,
            generation=generation,
            detail=detail,
        )
        keys = [schema.pool_key(pool, part) for part in ("active", "plans", "previous", "audit")]
        args: list[bytes | str | int] = [
            version,
            expected_generation,
            pointer.SerializeToString(),
            event.SerializeToString(),
            schema.table_channel(pool),
            generation,
        ]
        status, _observed, _previous = await self._move_active(keys=keys, args=args)
        if status == 1:
            return pointer
        if status == 0:
            try:
                latest = await self.get_active(pool)
            except CorruptRecordError as exc:
                latest = damaged(pool, exc)
            message = conflict_message(pool, expected_generation, latest)
            raise ConflictError(message, latest)
        raise PlanNotFoundError(f"plan {version} not found in pool {pool}")

    @unavailable_on_redis_error
    async def delete_plan(self, pool: str, version: str) -> bool:
        keys = [schema.plan_key(pool, version), schema.meta_key(pool, version)]
        keys += [schema.pool_key(pool, part) for part in ("plans", "active", "previous")]
        keys.append(schema.deltas_key(pool, version))
        status = await self._delete_plan(keys=keys, args=[version])
        if status == -1:
            raise PlanInUseError(
                f"plan {version} of pool {pool} is the active version or the rollback target"
            )
        return bool(status == 1)

    @unavailable_on_redis_error
    async def previous_versions(self, pool: str, limit: int = 10) -> list[str]:
        raw = await self._redis.lrange(schema.pool_key(pool, "previous"), 0, limit - 1)
        return [text(v) for v in raw]

    @unavailable_on_redis_error
    async def append_audit(self, event: cluster_pb2.AuditEvent) -> None:
        await self._redis.xadd(
            schema.pool_key(event.pool, "audit"),
            {"e": event.SerializeToString()},
            maxlen=AUDIT_MAXLEN,
            approximate=True,
        )

    @unavailable_on_redis_error
    async def read_audit(self, pool: str, count: int) -> list[cluster_pb2.AuditEvent]:
        entries = await self._redis.xrevrange(schema.pool_key(pool, "audit"), count=count) or []
        events = []
        for _, fields in reversed(entries):
            if fields is None:
                continue
            event = cluster_pb2.AuditEvent.FromString(blob(fields[b"e"]))
            if b"from" in fields:  # a pointer move: the version it replaced (_MOVE_ACTIVE)
                event.from_version = text(fields[b"from"])
            events.append(event)
        return events

    @unavailable_on_redis_error
    async def pools(self) -> list[str]:
        return sorted(text(p) for p in await self._redis.smembers(schema.POOLS_KEY))

    @unavailable_on_redis_error
    async def add_pool(self, pool: str) -> None:
        if await self._redis.sadd(schema.POOLS_KEY, pool):
            await self._redis.publish(schema.POOLS_CHANNEL, pool)

    @unavailable_on_redis_error
    async def get_auto_mode(self, pool: str) -> cluster_pb2.AutoMode | None:
        raw = await self._redis.get(schema.pool_key(pool, "auto"))
        return None if raw is None else cluster_pb2.AutoMode.FromString(blob(raw))

    @unavailable_on_redis_error
    async def put_auto_mode(self, record: cluster_pb2.AutoMode) -> None:
        await self._redis.set(schema.pool_key(record.pool, "auto"), record.SerializeToString())

    @unavailable_on_redis_error
    async def get_guard(self, pool: str) -> cluster_pb2.GuardState | None:
        raw = await self._redis.get(schema.pool_key(pool, "guard"))
        return None if raw is None else cluster_pb2.GuardState.FromString(blob(raw))

    @unavailable_on_redis_error
    async def put_guard(self, state: cluster_pb2.GuardState) -> None:
        await self._redis.set(schema.pool_key(state.pool, "guard"), state.SerializeToString())
