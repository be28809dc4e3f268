"""A node's state in one word, from its status record: what tables, metrics and gates show.

Pure (protobuf only), so ``cachectl`` and the gates read it without the registry's state layer.
"""

from __future__ import annotations

from cacheroute.v1 import admin_pb2


def state_of(status: admin_pb2.NodeStatus) -> str:
    """One word for metrics and tables: down, draining, healthy or unhealthy."""
    if status.down:
        return "down"
    if status.load.draining:  # the registry's drain or the agent's own (cluster/nodes.py)
        return "draining"
    return "healthy" if status.load.healthy else "unhealthy"
