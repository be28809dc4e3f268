"""Reading the router's own Prometheus registry in tests (what a scrape would show)."""

from __future__ import annotations

from dataplane.server import RouterServer


def metric_sum(server: RouterServer, name: str, **labels: str) -> float:
    """Sum of every sample called ``name`` whose labels include ``labels``."""
    total = 0.0
    for family in server.metrics.registry.collect():
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def in_flight(server: RouterServer) -> dict[str, float]:
    """``cacheroute_router_in_flight`` per node (absent nodes: 0)."""
    out: dict[str, float] = {}
    for family in server.metrics.registry.collect():
        for sample in family.samples:
            if sample.name == "cacheroute_router_in_flight":
                out[sample.labels["node"]] = sample.value
    return out


def node_load(server: RouterServer) -> dict[str, float]:
    """``cacheroute_router_node_load`` of the default pool, per node."""
    out: dict[str, float] = {}
    for family in server.metrics.registry.collect():
        for sample in family.samples:
            if sample.name == "cacheroute_router_node_load" and sample.labels["pool"] == "default":
                out[sample.labels["node"]] = sample.value
    return out
