"""Helper of the load-generator tests: a load snapshot of given engine addresses."""

from __future__ import annotations

import time

from cacheroute.v1 import cluster_pb2


def snapshot(addresses: dict[str, str], seq: int = 1) -> cluster_pb2.LoadSnapshot:
    return cluster_pb2.LoadSnapshot(
        pool="default",
        seq=seq,
        observed_at_unix_ms=int(time.time() * 1000),
        nodes=[
            cluster_pb2.NodeLoad(node_id=node, address=address, load=0.0, healthy=True)
            for node, address in addresses.items()
        ],
    )
