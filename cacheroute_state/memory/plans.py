"""PlanStore in memory: the same records, pointer rules and hints as :mod:`..redis_plans`."""

from __future__ import annotations

from google.protobuf.message import DecodeError

from cacheroute.v1 import cluster_pb2, table_pb2
from cacheroute_state import schema
from cacheroute_state.active_pointer import conflict_message, damaged
from cacheroute_state.interfaces import (
    ConflictError,
    CorruptRecordError,
    Hint,
    HintKind,
    PlanInUseError,
    PlanMismatchError,
    PlanNotFoundError,
    PlanStore,
)
from cacheroute_state.memory.state import MemoryState, first


def _int(raw: bytes | None) -> int:
    try:
        return int(raw or 0)
    except ValueError:
        return 0


class MemoryPlanStore(PlanStore):
    def __init__(self, state: MemoryState) -> None:
        self._s = state

    async def put_plan(
        self, table_bytes: bytes, meta: table_pb2.PlanMetadata
    ) -> tuple[table_pb2.PlanMetadata, bool]:
        s = self._s
        s.check()
        pool, version = meta.pool, meta.version
        plan_key = schema.plan_key(pool, version)
        created = plan_key not in s.strings
        stored = meta
        if created:
            s.strings[plan_key] = bytes(table_bytes)
            s.strings[schema.meta_key(pool, version)] = meta.SerializeToString()
            s.sorted[schema.pool_key(pool, "plans")][version] = meta.created_at_unix_ms
        else:
            existing = s.strings.get(schema.meta_key(pool, version))
            if existing is None:
                return meta, True  # as the Redis script: table without metadata reads as new
            stored = table_pb2.PlanMetadata.FromString(existing)
        await self.add_pool(pool)
        if stored.content_hash != meta.content_hash:
            raise PlanMismatchError(
                f"version {version} is stored with content {stored.content_hash[:16]}…, "
                f"not {meta.content_hash[:16]}…"
            )
        return stored, created

    async def get_table_bytes(self, pool: str, version: str) -> bytes | None:
        self._s.check()
        return self._s.strings.get(schema.plan_key(pool, version))

    async def put_delta(self, pool: str, base_version: str, version: str, data: bytes) -> None:
        self._s.check()
        self._s.hashes[schema.deltas_key(pool, version)][base_version] = bytes(data)

    async def get_delta_bytes(self, pool: str, base_version: str, version: str) -> bytes | None:
        self._s.check()
        return self._s.hashes.get(schema.deltas_key(pool, version), {}).get(base_version)

    async def get_metadata(self, pool: str, version: str) -> table_pb2.PlanMetadata | None:
        self._s.check()
        data = self._s.strings.get(schema.meta_key(pool, version))
        return None if data is None else table_pb2.PlanMetadata.FromString(data)

    async def update_metadata(self, meta: table_pb2.PlanMetadata) -> None:
        self._s.check()
        key = schema.meta_key(meta.pool, meta.version)
        if key not in self._s.strings:
            raise PlanNotFoundError(f"plan {meta.version} not found in pool {meta.pool}")
        self._s.strings[key] = meta.SerializeToString()

    async def list_plans(self, pool: str, limit: int) -> list[table_pb2.PlanMetadata]:
        self._s.check()
        scores = self._s.sorted.get(schema.pool_key(pool, "plans"), {})
        # ZREVRANGE order: score descending, equal scores by member descending.
        versions = first(sorted(scores, key=lambda v: (scores[v], v), reverse=True), limit)
        raw = (self._s.strings.get(schema.meta_key(pool, v)) for v in versions)
        return [table_pb2.PlanMetadata.FromString(d) for d in raw if d is not None]

    async def get_active(self, pool: str) -> cluster_pb2.ActivePointer | None:
        self._s.check()
        key = schema.pool_key(pool, "active")
        record = self._s.hashes.get(key, {})
        data = record.get("pb")
        if data is None:
            return None
        try:
            return cluster_pb2.ActivePointer.FromString(data)
        except DecodeError as exc:
            raise CorruptRecordError(key, _int(record.get("generation")), str(exc)[:60]) from None

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
        s = self._s
        s.check()
        key = schema.pool_key(pool, "active")
        record = s.hashes.get(key, {})
        observed = _int(record.get("generation"))  # as the Redis script: the fields, not the pb
        previous = record.get("version", b"").decode()
        if observed != expected_generation:
            try:
                current = await self.get_active(pool)
            except CorruptRecordError as exc:
                current = damaged(pool, exc)
            message = conflict_message(pool, expected_generation, current)
            raise ConflictError(message, current)
        if version and version not in s.sorted.get(schema.pool_key(pool, "plans"), {}):
            raise PlanNotFoundError(f"plan {version} not found in pool {pool}")
        now, generation = s.now_ms(), expected_generation + 1
        pointer = cluster_pb2.ActivePointer(
            pool=pool, version=version, generation=generation, updated_at_unix_ms=now,
            actor=actor, action=action,
        )  # fmt: skip
        s.hashes[key] = {
            "generation": str(generation).encode(),
            "version": version.encode(),
            "pb": pointer.SerializeToString(),
        }
        if previous and previous != version:
            kept = s.lists[schema.pool_key(pool, "previous")]
            kept.insert(0, previous)
            del kept[schema.PREVIOUS_KEPT :]
        event = cluster_pb2.AuditEvent(
            at_unix_ms=now, actor=actor, action=action, pool=pool, from_version=previous,
            to_version=version, generation=generation, detail=detail,
        )  # fmt: skip
        s.stream(schema.pool_key(pool, "audit"), schema.AUDIT_MAXLEN).append(
            event.SerializeToString(), now
        )
        s.publish(Hint(HintKind.TABLE, pool, str(generation).encode()))
        return pointer

    async def delete_plan(self, pool: str, version: str) -> bool:
        s = self._s
        s.check()
        pointer = await self.get_active(pool)
        active = pointer.version if pointer is not None else ""
        target = next(
            (v for v in s.lists.get(schema.pool_key(pool, "previous"), []) if v != active), None
        )
        if version in (active, target):
            raise PlanInUseError(
                f"plan {version} of pool {pool} is the active version or the rollback target"
            )
        listed = s.sorted.get(schema.pool_key(pool, "plans"), {})
        if version not in listed:
            return False
        del listed[version]
        s.strings.pop(schema.plan_key(pool, version), None)
        s.strings.pop(schema.meta_key(pool, version), None)
        s.hashes.pop(schema.deltas_key(pool, version), None)
        return True

    async def previous_versions(self, pool: str, limit: int = 10) -> list[str]:
        self._s.check()
        return first(self._s.lists.get(schema.pool_key(pool, "previous"), []), limit)

    async def append_audit(self, event: cluster_pb2.AuditEvent) -> None:
        s = self._s
        s.check()
        stream = s.stream(schema.pool_key(event.pool, "audit"), schema.AUDIT_MAXLEN)
        stream.append(event.SerializeToString(), s.now_ms())

    async def read_audit(self, pool: str, count: int) -> list[cluster_pb2.AuditEvent]:
        self._s.check()
        stream = self._s.streams.get(schema.pool_key(pool, "audit"))
        newest = stream.newest(count) if stream is not None else []
        return [cluster_pb2.AuditEvent.FromString(d) for d in newest]

    async def pools(self) -> list[str]:
        self._s.check()
        return sorted(self._s.pools)

    async def add_pool(self, pool: str) -> None:
        self._s.check()
        if pool not in self._s.pools:
            self._s.pools.add(pool)
            self._s.publish(Hint(HintKind.POOLS, "", pool.encode()))

    async def get_auto_mode(self, pool: str) -> cluster_pb2.AutoMode | None:
        self._s.check()
        raw = self._s.strings.get(schema.pool_key(pool, "auto"))
        return None if raw is None else cluster_pb2.AutoMode.FromString(raw)

    async def put_auto_mode(self, record: cluster_pb2.AutoMode) -> None:
        self._s.check()
        self._s.strings[schema.pool_key(record.pool, "auto")] = record.SerializeToString()

    async def get_guard(self, pool: str) -> cluster_pb2.GuardState | None:
        self._s.check()
        raw = self._s.strings.get(schema.pool_key(pool, "guard"))
        return None if raw is None else cluster_pb2.GuardState.FromString(raw)

    async def put_guard(self, state: cluster_pb2.GuardState) -> None:
        self._s.check()
        self._s.strings[schema.pool_key(state.pool, "guard")] = state.SerializeToString()
