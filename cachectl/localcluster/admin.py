"""The admin calls a running local cluster answers: plans, rollouts, ACKs, node status, caches.

A mixin of :class:`cachectl.localcluster.cluster.LocalCluster`, apart from how the cluster is
started and stopped: these speak to the control plane's admin API and the engines over the
network, once :meth:`LocalCluster.wait_ready` has learnt their addresses.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import grpc

from cachectl.localcluster.spec import ClusterError, ClusterSpec
from cacheroute.v1 import admin_pb2, admin_pb2_grpc, cluster_pb2


class ClusterAdmin:
    """Admin RPCs against the cluster's control plane and engines (module docstring)."""

    spec: ClusterSpec
    controlplane_address: str
    router_ids: list[str]
    engine_addresses: dict[str, str]

    async def _admin(self, service: str, method: str, request: Any, timeout: float = 10.0) -> Any:
        """One admin RPC; a refusal becomes :class:`ClusterError` with the server's message."""
        async with grpc.aio.insecure_channel(self.controlplane_address) as channel:
            stub: Any = (
                admin_pb2_grpc.PlanServiceStub(channel)
                if service == "plans"
                else admin_pb2_grpc.NodeServiceStub(channel)
            )
            try:
                return await getattr(stub, method)(request, timeout=timeout)
            except grpc.aio.AioRpcError as exc:
                raise ClusterError(f"{method}: {exc.code().name}: {exc.details()}") from None

    async def nodes(self) -> list[admin_pb2.NodeStatus]:
        answer = await self._admin(
            "nodes", "ListNodes", admin_pb2.ListNodesRequest(pool=self.spec.pool)
        )
        return list(answer.nodes)

    async def status(self) -> admin_pb2.PoolStatus | None:
        answer = await self._admin(
            "plans", "GetStatus", admin_pb2.GetStatusRequest(pool=self.spec.pool)
        )
        for pool in answer.pools:
            if pool.pool == self.spec.pool:
                return pool  # type: ignore[no-any-return]
        return None

    async def build_plan(self, note: str, actor: str = "cachectl-demo") -> admin_pb2.PlanSummary:
        """Build a plan from the routers' reported rates (``cachectl plan build``, live)."""
        request = admin_pb2.BuildPlanRequest(pool=self.spec.pool, actor=actor, note=note)
        return await self._admin("plans", "BuildPlan", request)  # type: ignore[no-any-return]

    async def rollout(
        self,
        version: str,
        actor: str = "cachectl-demo",
        *,
        skip_gates: tuple[str, ...] = (),
        reason: str = "local demo",
    ) -> cluster_pb2.ActivePointer:
        """``plan rollout``; ``skip_gates`` go past those gates by name (audited with reason)."""
        request = admin_pb2.RolloutRequest(
            pool=self.spec.pool, version=version, actor=actor, reason=reason, skip_gates=skip_gates
        )
        return await self._admin("plans", "Rollout", request)  # type: ignore[no-any-return]

    async def wait_acks(
        self, generation: int, timeout_s: float = 15.0
    ) -> list[cluster_pb2.RouterAck]:
        """Wait until every router ACKed ``generation``; raises ClusterError on NACK or timeout."""
        deadline = time.monotonic() + timeout_s
        while True:
            pool = await self.status()
            acks = {a.router_id: a for a in (pool.routers if pool is not None else [])}
            mine = [acks[r] for r in self.router_ids if r in acks]
            for ack in mine:
                if ack.generation == generation and not ack.accepted:
                    raise ClusterError(
                        f"{ack.router_id} rejected generation {generation}: {ack.reason}"
                    )
            done = [a for a in mine if a.accepted and a.serving_generation >= generation]
            if len(done) == len(self.router_ids):
                return done
            if time.monotonic() > deadline:
                missing = sorted(set(self.router_ids) - {a.router_id for a in done})
                raise ClusterError(
                    f"routers {', '.join(missing)} did not ACK generation {generation}"
                )
            await asyncio.sleep(0.1)

    async def reset_caches(self, timeout_s: float = 30.0) -> None:
        """Empty every engine's prefix cache (each engine waits until it is idle)."""
        deadline = time.monotonic() + timeout_s
        async with aiohttp.ClientSession() as session:
            pending = dict(self.engine_addresses)
            while pending:
                for node, address in list(pending.items()):
                    try:
                        async with session.post(f"http://{address}/reset_prefix_cache") as reply:
                            if reply.status == 200:
                                del pending[node]
                    except (aiohttp.ClientError, OSError) as exc:
                        raise ClusterError(f"engine {node} at {address}: {exc}") from exc
                if pending:
                    if time.monotonic() > deadline:
                        raise ClusterError(f"engines {', '.join(sorted(pending))} stayed busy")
                    await asyncio.sleep(0.2)
