"""Redis key schema. Every per-pool key is hash-tagged ``cr:{pool}:...`` so that one pool's keys
share a Redis Cluster slot and a Lua script may touch them together.

| key | type | holds |
|---|---|---|
| ``cr:{pool}:plan:<version>`` | string | serialized ``RoutingTable`` (immutable, written once) |
| ``cr:{pool}:meta:<version>`` | string | serialized ``PlanMetadata`` (stats, verdict) |
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
| ``cr:pools`` | set | pool names |
| ``cr:lease:<name>`` | string | lease holder id, with a TTL |

The receive time in ``reports`` is the control-plane instance's clock when the agent's latest
report arrived; liveness ("down after three report intervals") is judged against it.

Pub/sub channels (hints only; readers re-read the keys): ``cr:{pool}:hint:table`` (generation),
``cr:{pool}:hint:load`` (the serialized ``LoadSnapshot`` itself, to save a round trip),
``cr:hint:pools`` (a pool was added).
"""

from __future__ import annotations

import re

DEFAULT_POOL = "default"
POOL_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")
NODE_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
VERSION_PATTERN = re.compile(r"^p[0-9a-f]{16}$")

POOLS_KEY = "cr:pools"
POOLS_CHANNEL = "cr:hint:pools"


class InvalidNameError(ValueError):
    """A pool, node id or version that does not match its syntax."""


def validate_pool(pool: str) -> str:
    """Return the pool name ("" means the default pool) or raise naming the rule."""
    name = pool or DEFAULT_POOL
    if not POOL_PATTERN.match(name):
        raise InvalidNameError(f"pool {pool!r} does not match {POOL_PATTERN.pattern}")
    return name


def validate_node_id(node_id: str) -> str:
    if not NODE_ID_PATTERN.match(node_id):
        raise InvalidNameError(f"node id {node_id!r} does not match {NODE_ID_PATTERN.pattern}")
    return node_id


def validate_version(version: str) -> str:
    if not VERSION_PATTERN.match(version):
        raise InvalidNameError(f"version {version!r} is not a plan version (p + 16 hex digits)")
    return version


def pool_key(pool: str, *parts: str) -> str:
    return ":".join((f"cr:{{{pool}}}", *parts))


def plan_key(pool: str, version: str) -> str:
    return pool_key(pool, "plan", version)


def meta_key(pool: str, version: str) -> str:
    return pool_key(pool, "meta", version)


def table_channel(pool: str) -> str:
    return pool_key(pool, "hint", "table")


def load_channel(pool: str) -> str:
    return pool_key(pool, "hint", "load")


def lease_key(name: str) -> str:
    return f"cr:lease:{name}"
