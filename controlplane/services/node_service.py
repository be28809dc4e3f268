"""NodeService: thin adapters from the node RPCs to :mod:`controlplane.cluster.nodes`."""

from __future__ import annotations

from typing import Any

import grpc

from cacheroute.v1 import admin_pb2, admin_pb2_grpc, cluster_pb2
from cacheroute_state import Stores
from controlplane.cluster.nodes import (
    Liveness,
    add_static_node,
    list_statuses,
    remove_node,
    set_draining,
)
from controlplane.metrics import ControlPlaneMetrics
from controlplane.services.rpc import actor_of, rpc
from servekit.clock import Clock, wall_ms

Context = grpc.aio.ServicerContext[Any, Any]


class NodeServicer(admin_pb2_grpc.NodeServiceServicer):
    def __init__(
        self,
        stores: Stores,
        metrics: ControlPlaneMetrics,
        liveness: Liveness,
        clock: Clock = wall_ms,
    ) -> None:
        self._clock = clock
        self._stores = stores
        self._metrics = metrics
        self._liveness = liveness

    @rpc
    async def AddNode(  # noqa: N802
        self, request: admin_pb2.AddNodeRequest, context: Context
    ) -> cluster_pb2.NodeRecord:
        return await add_static_node(
            self._stores,
            pool=request.pool,
            node_id=request.node_id,
            address=request.address,
            weight=request.weight,
            actor=actor_of(request.actor, context),
            now_ms=self._clock(),
            liveness=self._liveness,
            replace=request.replace,
        )

    @rpc
    async def RemoveNode(  # noqa: N802
        self, request: admin_pb2.RemoveNodeRequest, context: Context
    ) -> admin_pb2.RemoveNodeResponse:
        removed = await remove_node(
            self._stores,
            pool=request.pool,
            node_id=request.node_id,
            actor=actor_of(request.actor, context),
            now_ms=self._clock(),
            liveness=self._liveness,
        )
        return admin_pb2.RemoveNodeResponse(removed=removed)

    @rpc
    async def ListNodes(  # noqa: N802
        self, request: admin_pb2.ListNodesRequest, context: Context
    ) -> admin_pb2.ListNodesResponse:
        statuses = await list_statuses(
            self._stores, request.pool, self._clock(), self._liveness, as_routed=True
        )
        return admin_pb2.ListNodesResponse(nodes=statuses)

    @rpc
    async def SetDraining(  # noqa: N802
        self, request: admin_pb2.SetDrainingRequest, context: Context
    ) -> admin_pb2.NodeStatus:
        return await set_draining(
            self._stores,
            pool=request.pool,
            node_id=request.node_id,
            draining=request.draining,
            actor=actor_of(request.actor, context),
            now_ms=self._clock(),
            liveness=self._liveness,
        )
