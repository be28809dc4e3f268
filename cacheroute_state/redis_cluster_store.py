"""ClusterStore, TelemetryStore and LeaseStore on Redis."""

from __future__ import annotations

import struct
from collections.abc import Sequence

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from cacheroute.v1 import agent_pb2, cluster_pb2
from cacheroute_state import schema
from cacheroute_state.interfaces import ClusterStore, LeaseStore, ReportRecord, TelemetryStore
from cacheroute_state.redis_base import blob, text, unavailable_on_redis_error

TRAFFIC_MAXLEN = schema.TRAFFIC_MAXLEN
TRACE_MAXLEN = schema.TRACE_MAXLEN

_RENEW_LEASE = """
local holder = redis.call('GET', KEYS[1])
if not holder then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"""

# KEYS: reports, report_streams. ARGV: node id, record bytes, stream id, claim ("1"/"0").
_PUT_REPORT = """
if ARGV[4] ~= '1' and redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[3] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
return 1
"""

# KEYS: reports, report_streams. ARGV: node id, the record's packed receive time (its first bytes).
_EXPIRE_REPORT = """
local stored = redis.call('HGET', KEYS[1], ARGV[1])
if not stored or string.sub(stored, 1, string.len(ARGV[2])) ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return 1
"""

_RECEIVED_AT = struct.Struct("<q")


def _encode_report(record: ReportRecord) -> bytes:
    return _RECEIVED_AT.pack(record.received_at_unix_ms) + record.report.SerializeToString()


def _decode_report(data: bytes, stream_id: str) -> ReportRecord:
    (received_at,) = _RECEIVED_AT.unpack_from(data)
    report = agent_pb2.NodeReport.FromString(data[_RECEIVED_AT.size :])
    return ReportRecord(report=report, received_at_unix_ms=received_at, stream_id=stream_id)


_RELEASE_LEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class RedisClusterStore(ClusterStore):
    def __init__(self, client: aioredis.Redis) -> None:
        self._redis = client
        self._put_report = client.register_script(_PUT_REPORT)
        self._expire_report = client.register_script(_EXPIRE_REPORT)

    @unavailable_on_redis_error
    async def put_node(self, record: cluster_pb2.NodeRecord) -> None:
        key = schema.pool_key(record.pool, "nodes")
        await self._redis.hset(key, record.node_id, record.SerializeToString())

    @unavailable_on_redis_error
    async def remove_node(self, pool: str, node_id: str) -> bool:
        removed = await self._redis.hdel(schema.pool_key(pool, "nodes"), node_id)
        return bool(removed)

    @unavailable_on_redis_error
    async def get_nodes(self, pool: str) -> list[cluster_pb2.NodeRecord]:
        raw = await self._redis.hgetall(schema.pool_key(pool, "nodes"))
        records = [cluster_pb2.NodeRecord.FromString(blob(v)) for v in raw.values()]
        return sorted(records, key=lambda r: r.node_id)

    @unavailable_on_redis_error
    async def get_node(self, pool: str, node_id: str) -> cluster_pb2.NodeRecord | None:
        data = await self._redis.hget(schema.pool_key(pool, "nodes"), node_id)
        return None if data is None else cluster_pb2.NodeRecord.FromString(blob(data))

    @unavailable_on_redis_error
    async def put_report(self, pool: str, record: ReportRecord, *, claim: bool) -> bool:
        keys = [schema.pool_key(pool, "reports"), schema.pool_key(pool, "report_streams")]
        args: list[bytes | str | int] = [
            record.report.node_id,
            _encode_report(record),
            record.stream_id,
            "1" if claim else "0",
        ]
        return bool(await self._put_report(keys=keys, args=args))

    @unavailable_on_redis_error
    async def get_report(self, pool: str, node_id: str) -> ReportRecord | None:
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hget(schema.pool_key(pool, "reports"), node_id)
            pipe.hget(schema.pool_key(pool, "report_streams"), node_id)
            data, stream = await pipe.execute()
        if data is None:
            return None
        return _decode_report(blob(data), text(stream) if stream is not None else "")

    @unavailable_on_redis_error
    async def get_reports(self, pool: str) -> dict[str, ReportRecord]:
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hgetall(schema.pool_key(pool, "reports"))
            pipe.hgetall(schema.pool_key(pool, "report_streams"))
            reports, streams = await pipe.execute()
        owners = {text(k): text(v) for k, v in streams.items()}
        records: dict[str, ReportRecord] = {}
        for key, value in reports.items():
            node_id = text(key)
            records[node_id] = _decode_report(blob(value), owners.get(node_id, ""))
        return records

    @unavailable_on_redis_error
    async def remove_report(self, pool: str, node_id: str) -> None:
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hdel(schema.pool_key(pool, "reports"), node_id)
            pipe.hdel(schema.pool_key(pool, "report_streams"), node_id)
            await pipe.execute()

    @unavailable_on_redis_error
    async def expire_report(self, pool: str, node_id: str, received_at_unix_ms: int) -> bool:
        keys = [schema.pool_key(pool, "reports"), schema.pool_key(pool, "report_streams")]
        args: list[bytes | str] = [node_id, _RECEIVED_AT.pack(received_at_unix_ms)]
        return bool(await self._expire_report(keys=keys, args=args))

    @unavailable_on_redis_error
    async def publish_load(self, snapshot: cluster_pb2.LoadSnapshot) -> None:
        data = snapshot.SerializeToString()
        if isinstance(self._redis, RedisCluster):  # a cluster pipeline refuses PUBLISH
            await self._redis.set(schema.pool_key(snapshot.pool, "load"), data)
            await self._redis.publish(schema.load_channel(snapshot.pool), data)
            return
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.set(schema.pool_key(snapshot.pool, "load"), data)
            pipe.publish(schema.load_channel(snapshot.pool), data)
            await pipe.execute()

    @unavailable_on_redis_error
    async def get_load(self, pool: str) -> cluster_pb2.LoadSnapshot | None:
        data = await self._redis.get(schema.pool_key(pool, "load"))
        return None if data is None else cluster_pb2.LoadSnapshot.FromString(blob(data))

    @unavailable_on_redis_error
    async def put_ack(self, ack: cluster_pb2.RouterAck) -> None:
        key = schema.pool_key(ack.pool, "acks")
        await self._redis.hset(key, ack.router_id, ack.SerializeToString())

    @unavailable_on_redis_error
    async def get_acks(self, pool: str) -> list[cluster_pb2.RouterAck]:
        raw = await self._redis.hgetall(schema.pool_key(pool, "acks"))
        acks = [cluster_pb2.RouterAck.FromString(blob(v)) for v in raw.values()]
        return sorted(acks, key=lambda a: a.router_id)


class RedisTelemetryStore(TelemetryStore):
    def __init__(self, client: aioredis.Redis) -> None:
        self._redis = client

    @unavailable_on_redis_error
    async def add_traffic(self, report: cluster_pb2.TrafficReport) -> None:
        await self._redis.xadd(
            schema.pool_key(report.pool, "traffic"),
            {"r": report.SerializeToString()},
            maxlen=TRAFFIC_MAXLEN,
            approximate=True,
        )

    @unavailable_on_redis_error
    async def read_traffic(
        self, pool: str, after_id: str, count: int = 1000
    ) -> tuple[str, list[cluster_pb2.TrafficReport]]:
        key = schema.pool_key(pool, "traffic")
        entries = await self._redis.xrange(key, min=f"({after_id}", count=count) or []
        reports = [
            cluster_pb2.TrafficReport.FromString(blob(fields[b"r"]))
            for _, fields in entries
            if fields is not None
        ]
        last = text(entries[-1][0]) if entries and entries[-1][0] is not None else after_id
        return last, reports

    @unavailable_on_redis_error
    async def add_samples(self, samples: Sequence[cluster_pb2.SampledRequest]) -> None:
        if not samples:
            return
        async with self._redis.pipeline(transaction=False) as pipe:
            for sample in samples:
                pipe.xadd(
                    schema.pool_key(sample.pool, "trace"),
                    {"s": sample.SerializeToString()},
                    maxlen=TRACE_MAXLEN,
                    approximate=True,
                )
            await pipe.execute()

    @unavailable_on_redis_error
    async def read_samples(self, pool: str, count: int) -> list[cluster_pb2.SampledRequest]:
        entries = await self._redis.xrevrange(schema.pool_key(pool, "trace"), count=count) or []
        return [
            cluster_pb2.SampledRequest.FromString(blob(fields[b"s"]))
            for _, fields in reversed(entries)
            if fields is not None
        ]

    @unavailable_on_redis_error
    async def save_rates(self, pool: str, data: bytes) -> None:
        await self._redis.set(schema.pool_key(pool, "rates"), data)

    @unavailable_on_redis_error
    async def load_rates(self, pool: str) -> bytes | None:
        data = await self._redis.get(schema.pool_key(pool, "rates"))
        return None if data is None else blob(data)

    @unavailable_on_redis_error
    async def add_fleet_window(self, window: cluster_pb2.FleetWindow, keep: int) -> None:
        key = schema.pool_key(window.pool, "fleet_windows")
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.rpush(key, window.SerializeToString())
            pipe.ltrim(key, -max(1, keep), -1)
            await pipe.execute()

    @unavailable_on_redis_error
    async def read_fleet_windows(self, pool: str) -> list[cluster_pb2.FleetWindow]:
        raw = await self._redis.lrange(schema.pool_key(pool, "fleet_windows"), 0, -1)
        return [cluster_pb2.FleetWindow.FromString(blob(v)) for v in raw]

    @unavailable_on_redis_error
    async def put_fleet_profile(self, profile: cluster_pb2.FleetProfile) -> None:
        await self._redis.set(
            schema.pool_key(profile.pool, "fleet_profile"), profile.SerializeToString()
        )

    @unavailable_on_redis_error
    async def get_fleet_profile(self, pool: str) -> cluster_pb2.FleetProfile | None:
        data = await self._redis.get(schema.pool_key(pool, "fleet_profile"))
        return None if data is None else cluster_pb2.FleetProfile.FromString(blob(data))


class RedisLeaseStore(LeaseStore):
    def __init__(self, client: aioredis.Redis) -> None:
        self._redis = client
        self._renew = client.register_script(_RENEW_LEASE)
        self._release = client.register_script(_RELEASE_LEASE)

    @unavailable_on_redis_error
    async def acquire_or_renew(self, name: str, holder: str, ttl_ms: int) -> bool:
        return bool(await self._renew(keys=[schema.lease_key(name)], args=[holder, ttl_ms]))

    @unavailable_on_redis_error
    async def release(self, name: str, holder: str) -> None:
        await self._release(keys=[schema.lease_key(name)], args=[holder])

    @unavailable_on_redis_error
    async def holder(self, name: str) -> str | None:
        data = await self._redis.get(schema.lease_key(name))
        return None if data is None else text(data)
