"""Names on the wire: pools, node ids and plan versions, and their syntax.

Pure (no Redis, no gRPC), so routers, agents and the control plane validate the same way.
"""

from __future__ import annotations

import re

DEFAULT_POOL = "default"
POOL_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")
NODE_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
VERSION_PATTERN = re.compile(r"^p[0-9a-f]{16}$")
QUOTE_LIMIT = 40


def clip(value: str, limit: int = QUOTE_LIMIT) -> str:
    """``repr`` of at most ``limit`` characters of ``value`` (with its full length when cut), so
    an error message never echoes a megabyte of hostile input."""
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}... ({len(value.encode('utf-8', 'replace'))} bytes)"


class InvalidNameError(ValueError):
    """A pool, node id or version that does not match its syntax."""


def validate_pool(pool: str) -> str:
    """Return the pool name ("" means the default pool) or raise naming the rule."""
    name = pool or DEFAULT_POOL
    if not POOL_PATTERN.match(name):
        raise InvalidNameError(f"pool {clip(pool)} does not match {POOL_PATTERN.pattern}")
    return name


def validate_node_id(node_id: str) -> str:
    if not NODE_ID_PATTERN.match(node_id):
        raise InvalidNameError(f"node id {clip(node_id)} does not match {NODE_ID_PATTERN.pattern}")
    return node_id


def validate_version(version: str) -> str:
    if not VERSION_PATTERN.match(version):
        raise InvalidNameError(f"version {clip(version)} is not a plan version (p + 16 hex digits)")
    return version
