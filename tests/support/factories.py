"""Small builders for tests: plans, their metadata, and a plan stored in a state store."""

from __future__ import annotations

import numpy as np

from cacheroute.v1 import table_pb2
from cacheroute_state import Stores
from controlplane.core.planner import PlanInput, build_plan
from dataplane.core.keys import hash_key
from dataplane.core.table import RoutingTable
from dataplane.core.table_codec import encode_table, params_to_proto, stats_to_proto


def small_plan(
    pool: str = "default",
    *,
    nodes: int = 4,
    keys: int = 20,
    seed: int = 0,
    q_cap: float = 5.0,
    slots_per_node: int = 4,
) -> RoutingTable:
    """A real plan over keys "key-0".."key-{keys-1}" with random rates (seeded)."""
    names = [f"key-{i}" for i in range(keys)]
    rates = np.random.default_rng(seed).pareto(1.5, keys) + 0.1
    return build_plan(
        PlanInput(
            key_hashes=np.array([hash_key(n) for n in names], dtype=np.uint64),
            rates=rates,
            node_ids=[f"node-{i}" for i in range(nodes)],
            q_cap=q_cap,
            slots_per_node=slots_per_node,
            pool=pool,
            key_labels={hash_key(n): n for n in names},
        ),
        created_at_unix_ms=1_700_000_000_000,
    )


def metadata_for(table: RoutingTable, *, created_by: str = "test") -> table_pb2.PlanMetadata:
    return table_pb2.PlanMetadata(
        pool=table.pool,
        version=table.version,
        content_hash=table.content_hash,
        created_at_unix_ms=table.created_at_unix_ms,
        created_by=created_by,
        source="import",
        params=params_to_proto(table.params),
        stats=stats_to_proto(table.stats),
        table_bytes=len(encode_table(table)),
    )


async def store_plan(stores: Stores, plan: RoutingTable | int = 0, pool: str = "default") -> str:
    """Store ``plan``, or ``small_plan(pool, seed=plan)`` given a seed; returns its version."""
    table = small_plan(pool, seed=plan) if isinstance(plan, int) else plan
    await stores.plans.put_plan(encode_table(table), metadata_for(table))
    return table.version
