"""A real Endpoint Picker context for the stream handler's tests: a router with four nodes, holds,
passive health and served metrics on their own registry, and helpers to drive and read it.

Shared by the tests of keying, of the destination choice and of holds and health.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

from dataplane.core.keys import hash_key
from dataplane.core.outliers import OutlierConfig
from dataplane.core.router import Router
from dataplane.core.table import RoutingTable
from dataplane.extproc.context import ExtProcConfig, PickerContext
from dataplane.extproc.stream import PickerStream
from dataplane.health.passive_health import PassiveHealth
from dataplane.requests.holds import Holds
from dataplane.telemetry.served_metrics import ServedMetrics
from tests.support.router import load_snapshot, warm_keys

NODES = [f"node-{i}" for i in range(4)]
ADDRESSES = {n: f"10.0.0.{i + 1}:8000" for i, n in enumerate(NODES)}


def picker(
    loads: list[float] | None = None, table: RoutingTable | None = None, **config: Any
) -> PickerContext:
    router = Router(outliers=OutlierConfig(consecutive_failures=1, max_ejected_share=1.0))
    snapshot = load_snapshot(
        dict(zip(NODES, loads or [0.0] * 4, strict=True)), seq=1, addresses=ADDRESSES
    )
    router.apply_load(snapshot)
    if table is not None:
        router.install_table("default", table, 1)
    registry = CollectorRegistry()
    return PickerContext(
        router,
        Holds(router),
        PassiveHealth(router, registry),
        ServedMetrics(registry),
        ExtProcConfig(**config),
        registry,
    )


def run(ctx: PickerContext, *messages: Any) -> tuple[PickerStream, list[Any]]:
    stream = PickerStream(ctx, "gateway")
    answers: list[Any] = []
    for message in messages:
        answers += stream.on_message(message)
    return stream, answers


def members(table: RoutingTable, key: str) -> list[str]:
    ids = table.destination_ids(hash_key(key))
    assert ids is not None
    return [ADDRESSES[n] for n in ids]


def sample(ctx: PickerContext, name: str, labels: dict[str, str]) -> float:
    return float(ctx.registry.get_sample_value(name, labels) or 0.0)


def key_sources(ctx: PickerContext, source: str) -> float:
    labels = {"door": "extproc", "source": source}
    return sample(ctx, "cacheroute_router_key_source_total", labels)


def narrow(plan: RoutingTable) -> str:
    """A warm key with at most two destinations (so some endpoints are outside its set)."""
    return next(k for k in warm_keys(plan) if len(members(plan, k)) <= 2)
