"""Redis key schema. Every per-pool key is hash-tagged ``cr:{pool}:...`` so that one pool's keys
share a Redis Cluster slot and a Lua script may touch them together.

| key | type | holds |
|---|---|---|
| ``cr:{pool}:plan:<version>`` | string | serialized ``RoutingTable`` (immutable, written once) |
| ``cr:{pool}:meta:<version>`` | string | serialized ``PlanMetadata`` (stats, verdict) |
| ``cr:{pool}:deltas:<version>`` | hash | base version → serialized ``TableDelta`` to ``version`` |
| ``cr:{pool}:plans`` | zset | version → created_at (ms) |
| ``cr:{pool}:active`` | hash | ``generation`` (int), ``pb`` (serialized ``ActivePointer``) |
| ``cr:{pool}:previous`` | list | versions that were active before, newest first (≤ 100) |
| ``cr:{pool}:audit`` | stream | field ``e`` = serialized ``AuditEvent`` (≈ 10,000 kept) |
| ``cr:{pool}:acks`` | hash | router id → serialized ``RouterAck`` |
| ``cr:{pool}:nodes`` | hash | node id → serialized ``NodeRecord`` |
| ``cr:{pool}:reports`` | hash | node id → receive time (int64 LE ms) + serialized ``NodeReport`` |
| ``cr:{pool}:report_streams`` | hash | node id → id of the agent stream that owns the node |
| ``cr:{pool}:load`` | string | latest serialized ``LoadSnapshot`` |
| ``cr:{pool}:traffic`` | stream | field ``r`` = serialized ``TrafficReport`` (≈ 10,000 kept) |
| ``cr:{pool}:trace`` | stream | field ``s`` = serialized ``SampledRequest`` (≈ 100,000 kept) |
| ``cr:{pool}:rates`` | string | the rate estimator's last state (control plane restarts) |
| ``cr:{pool}:fleet_windows`` | list | serialized ``FleetWindow``, oldest first (the last N kept) |
| ``cr:{pool}:fleet_profile`` | string | serialized ``FleetProfile`` (fitted from those windows) |
| ``cr:{pool}:auto`` | string | serialized ``AutoMode`` (automatic mode on/off, last decision) |
| ``cr:{pool}:guard`` | string | serialized ``GuardState`` (the live guard's watch and verdict) |
| ``cr:pools`` | set | pool names |
| ``cr:lease:<name>`` | string | lease holder id, with a TTL |

Names in keys follow the rules of :mod:`dataplane.core.names`, checked by the callers before a
key is built (the schema only formats). The receive time in ``reports`` is the control-plane
instance's clock when the agent's latest report arrived; liveness ("down after three report
intervals") is judged against it.

Pub/sub channels (hints only; readers re-read the keys): ``cr:{pool}:hint:table`` (generation),
``cr:{pool}:hint:load`` (the serialized ``LoadSnapshot`` itself, to save a round trip),
``cr:hint:pools`` (a pool was added).
"""

from __future__ import annotations

POOLS_KEY = "cr:pools"

# How much of each log is kept (Redis trims its streams approximately, "≈").
AUDIT_MAXLEN = 10_000
PREVIOUS_KEPT = 100
TRAFFIC_MAXLEN = 10_000
TRACE_MAXLEN = 100_000
POOLS_CHANNEL = "cr:hint:pools"


def pool_key(pool: str, *parts: str) -> str:
    return ":".join((f"cr:{{{pool}}}", *parts))


def plan_key(pool: str, version: str) -> str:
    return pool_key(pool, "plan", version)


def meta_key(pool: str, version: str) -> str:
    return pool_key(pool, "meta", version)


def deltas_key(pool: str, version: str) -> str:
    return pool_key(pool, "deltas", version)


def table_channel(pool: str) -> str:
    return pool_key(pool, "hint", "table")


def load_channel(pool: str) -> str:
    return pool_key(pool, "hint", "load")


def lease_key(name: str) -> str:
    return f"cr:lease:{name}"
