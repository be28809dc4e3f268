"""The plain references ``bench_core.py`` times the routing core against, written the obvious way.

Each is what a first implementation would do (sort every key, per-key Python objects), so a
figure says what the core's layout buys; the planner's reference is also checked for equal output.
"""

from __future__ import annotations

import heapq
import math
import struct

from cacheroute.v1 import table_pb2


def reference_plan(
    hashes: list[int], rates: list[float], num_nodes: int, q_cap: float, slots_per_node: int
) -> dict[int, list[int]]:
    """Algorithm 1 the obvious way: sort every key, admit, heapq LPT from the cold tail."""
    order = sorted(range(len(rates)), key=lambda i: (-rates[i], hashes[i]))
    capacity, used, admitted = num_nodes * slots_per_node, 0, []
    for i in order:
        k = min(num_nodes, max(1, math.ceil(rates[i] / q_cap)))
        if rates[i] <= 0 or used + k > capacity:
            break
        used += k
        admitted.append((i, k))
    tail = sum(rates) - sum(rates[i] for i, _ in admitted)
    loads = [tail / num_nodes] * num_nodes
    heap = [(load, r) for r, load in enumerate(loads)]
    heapq.heapify(heap)
    sets = {}
    for i, k in admitted:
        chosen = [heapq.heappop(heap)[1] for _ in range(k)]
        for r in chosen:
            loads[r] += rates[i] / k
            heapq.heappush(heap, (loads[r], r))
        sets[hashes[i]] = sorted(chosen)
    return sets


def reference_decode(data: bytes) -> dict[int, list[str]]:
    """Per-key Python objects: unpack every key and set, validate in Python, build a dict."""
    msg = table_pb2.RoutingTable()
    msg.ParseFromString(data)
    nodes = list(msg.node_ids)
    n = len(msg.key_hashes) // 8
    hashes = struct.unpack(f"<{n}Q", msg.key_hashes)
    offsets = struct.unpack(f"<{n + 1}I", msg.set_offsets)
    members = struct.unpack(f"<{len(msg.set_members) // 2}H", msg.set_members)
    table: dict[int, list[str]] = {}
    previous = -1
    for i, key in enumerate(hashes):
        chosen = members[offsets[i] : offsets[i + 1]]
        if key <= previous or not chosen or len(set(chosen)) != len(chosen):
            raise ValueError(f"bad row {i}")
        table[key] = [nodes[m] for m in chosen]
        previous = key
    return table
