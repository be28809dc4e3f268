"""Helpers of the PlanService tests: import a small plan, pass its shadow gate, expect a refusal.

Shared by the tests of the plan catalog, of pointer moves and of their activation gates.
"""

from __future__ import annotations

import grpc
import pytest

from cacheroute.v1 import admin_pb2, table_pb2
from cacheroute_state import Stores
from dataplane.core.table_codec import table_to_proto
from tests.support.controlplane import Clients
from tests.support.factories import small_plan


async def refused(call: object, code: grpc.StatusCode) -> str:
    """Await an RPC that must fail with ``code``; returns its message."""
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call  # type: ignore[misc]
    assert raised.value.code() == code, raised.value.details()
    details = raised.value.details() or ""
    assert details
    return details


async def pass_shadow(stores: Stores, version: str, pool: str = "default") -> None:
    """Record a passing shadow verdict on ``version`` (what ``plan shadow`` writes)."""
    meta = await stores.plans.get_metadata(pool, version)
    assert meta is not None
    meta.verdict.CopyFrom(
        table_pb2.ShadowVerdict(
            outcome=table_pb2.ShadowVerdict.Outcome.OUTCOME_PASS,
            summary="test",
            decided_at_unix_ms=1,
        )
    )
    await stores.plans.update_metadata(meta)


async def import_small(
    c: Clients, seed: int, *, pool: str = "default", actor: str = "alice"
) -> str:
    table = table_to_proto(small_plan(pool, seed=seed))
    summary = await c.plans.ImportPlan(admin_pb2.ImportPlanRequest(table=table, actor=actor))
    return summary.metadata.version
