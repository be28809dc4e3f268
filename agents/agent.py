"""One agent = one engine: every interval, scrape the engine and offer a NodeReport.

The interval starts at ``--interval`` and follows the control plane's directives. A scrape in
flight when the agent stops is abandoned; the last report (``leaving = true``) is then sent by
the reporter before the agent's task ends.

With ``drain_timeout_s`` (a pod being deleted), stopping first *drains*: reports say
``draining`` so routers stop choosing the node, and the agent goes on scraping until the control
plane has confirmed the drain and a later scrape finds the engine idle (nothing running or
waiting) or gone, or the timeout passes; only then does it leave. A node that is merely down
would still count toward the routers' panic threshold; a drained one does not.

With ``kv_events`` the agent also subscribes to the engine's KV-cache events
(:mod:`agents.kv_subscriber`) and adds what they say to every report (``residency``).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import aiohttp
import grpc
import structlog

from agents import dialects
from agents.agent_metrics import AgentMetrics
from agents.dialing import Backoff
from agents.kv_subscriber import KvEventSubscriber, SubscriberConfig, run_forever
from agents.reporter import Reporter
from agents.residency_report import ResidencyReporter
from agents.scraper import Scraper, ScrapeState
from cacheroute.v1 import agent_pb2
from servekit.waiting import wait_event

log = structlog.get_logger("agents.agent")

_FIXED_DIALECT = {
    "vllm_v1": dialects.VLLM_V1,
    "vllm_v0": dialects.VLLM_V0,
    "sim": dialects.SIMULATED,
    "llamacpp": dialects.LLAMACPP,
}


@dataclass(frozen=True)
class AgentConfig:
    node_id: str
    address: str  # host:port of the engine's serving endpoint, handed to callers
    metrics_url: str
    pool: str = "default"
    dialect: str = "auto"
    weight: float = 1.0
    interval_s: float = 0.25
    scrape_timeout_s: float = 1.0
    drain_timeout_s: float = 0.0  # on stop: drain this long at most before leaving (0: don't)
    kv_events: str | None = None  # the engine's KV-event PUB endpoint (None: no subscriber)
    kv_replay: str | None = None  # its replay ROUTER endpoint


class Agent:
    def __init__(
        self,
        config: AgentConfig,
        *,
        session: aiohttp.ClientSession,
        controlplane: str | Sequence[str],
        metrics: AgentMetrics,
        credentials: grpc.ChannelCredentials | None = None,
        backoff: Backoff | None = None,
        token: str | None = None,
    ) -> None:
        self.config = config
        self._node_metrics = metrics.for_node(config.node_id)
        self.scraper = Scraper(
            config.metrics_url,
            session,
            timeout_s=config.scrape_timeout_s,
            dialect=config.dialect,
            metrics=self._node_metrics,
        )
        self.reporter = Reporter(
            controlplane,
            metrics=self._node_metrics,
            credentials=credentials,
            backoff=backoff,
            token=token,
        )
        self.residency: ResidencyReporter | None = None
        if config.kv_events:
            subscriber = KvEventSubscriber(SubscriberConfig(config.kv_events, config.kv_replay))
            self.residency = ResidencyReporter(subscriber, self._node_metrics)
        self._stop = asyncio.Event()
        self.draining = False  # stopping: reports say draining until the engine is idle
        self._log = log.bind(node_id=config.node_id, engine=config.metrics_url)

    @property
    def interval_s(self) -> float:
        adopted = self.reporter.interval_ms
        return adopted / 1000 if adopted else self.config.interval_s

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        """Scrape and report until :meth:`stop`; then send leaving and close the stream."""
        self.reporter.start()
        self._log.info("agent_started", controlplane=",".join(self.reporter.targets))
        loop = asyncio.get_running_loop()
        events = None
        if self.residency is not None:
            events = loop.create_task(run_forever(self.residency.subscriber), name="kv-events")
        try:
            while not self._stop.is_set():
                tick = loop.time()
                previous = self.scraper.state
                state = await self._scrape_unless_stopped()
                if state is None:
                    break
                self._log_transition(previous, state)
                self.reporter.offer(self.build_report(state))
                await wait_event(self._stop, tick + self.interval_s - loop.time())
            if self.config.drain_timeout_s > 0 and self.reporter.ever_sent:
                await self._drain()
        finally:
            if events is not None:
                events.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await events
            await self.reporter.close(self.build_report(self.scraper.state))
            self._log.info("agent_stopped", leaving_sent=self.reporter.leaving_sent)

    async def _drain(self) -> None:
        """Report ``draining`` until the drain is confirmed and the engine idle, or timed out."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.drain_timeout_s
        self.draining = True
        self._log.info("agent_draining", timeout_s=self.config.drain_timeout_s)
        self.reporter.offer(self.build_report(self.scraper.state))
        idle = False
        while loop.time() < deadline:
            confirmed = self.reporter.draining  # before the scrape: routers saw it by then
            state = await self.scraper.scrape()
            self.reporter.offer(self.build_report(state))
            idle = not state.healthy or (
                state.sample is not None and state.sample.running + state.sample.waiting == 0
            )
            if confirmed and idle:
                break
            await asyncio.sleep(max(0.0, min(self.interval_s, deadline - loop.time())))
        self._log.info(
            "agent_drained" if idle else "agent_drain_timed_out",
            confirmed=self.reporter.draining,
        )

    async def _scrape_unless_stopped(self) -> ScrapeState | None:
        scrape = asyncio.create_task(self.scraper.scrape())
        stopped = asyncio.create_task(self._stop.wait())
        await asyncio.wait({scrape, stopped}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if scrape.done():
            return scrape.result()
        scrape.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await scrape
        return None

    def build_report(self, state: ScrapeState) -> agent_pb2.NodeReport:
        """The report for ``state``; seq and sent_at are stamped by the reporter."""
        cfg = self.config
        interval_ms = round(self.interval_s * 1000)
        report = agent_pb2.NodeReport(
            node_id=cfg.node_id,
            pool=cfg.pool,
            address=cfg.address,
            dialect=_FIXED_DIALECT.get(cfg.dialect, dialects.UNSPECIFIED),
            scraped_at_unix_ms=state.scraped_at_unix_ms,
            healthy=state.healthy,
            stale=state.stale,
            error=state.error,
            weight=cfg.weight,
            report_interval_ms=interval_ms,
            draining=self.draining,
            prompt_tokens_per_s=state.rates.prompt_tokens_per_s,
            generation_tokens_per_s=state.rates.generation_tokens_per_s,
        )
        report.engine_kind = dialects.KIND.get(report.dialect, agent_pb2.ENGINE_KIND_UNSPECIFIED)
        sample = state.sample
        if sample is not None:
            report.engine_kind = sample.kind
            report.dialect = sample.dialect
            report.model = sample.model
            report.running = sample.running
            report.waiting = sample.waiting
            report.kv_usage = sample.kv_usage
            report.kv_capacity_tokens = sample.kv_capacity_tokens
            report.block_size = sample.block_size
            if sample.ttft is not None:
                report.ttft.CopyFrom(
                    agent_pb2.LatencyHistogram(
                        upper_bounds=sample.ttft.upper_bounds,
                        counts=sample.ttft.counts,
                        count=sample.ttft.count,
                        sum=sample.ttft.sum,
                    )
                )
        if state.rates.prefix_hit_rate is not None:
            report.prefix_hit_rate = state.rates.prefix_hit_rate
        residency = self.residency
        section = residency.section(self.reporter.watch) if residency is not None else None
        if section is not None:
            report.residency.CopyFrom(section)
        self._node_metrics.interval.set(interval_ms / 1000)
        self._node_metrics.staleness.set(_age_s(state.scraped_at_unix_ms))
        return report

    def _log_transition(self, previous: ScrapeState, state: ScrapeState) -> None:
        if not state.healthy and (previous.healthy or not previous.error):
            self._log.warning("engine_unhealthy", error=state.error)
        elif not previous.healthy and state.healthy:
            self._log.info("engine_healthy", dialect=_dialect_name(state))
        elif previous.sample and state.sample and previous.sample.dialect != state.sample.dialect:
            self._log.warning("engine_dialect_changed", dialect=_dialect_name(state))


def _dialect_name(state: ScrapeState) -> str:
    if state.sample is None:
        return "unknown"
    return agent_pb2.MetricDialect.Name(state.sample.dialect)


def _age_s(scraped_at_unix_ms: int) -> float:
    if scraped_at_unix_ms <= 0:
        return math.inf
    return max(0.0, time.time() - scraped_at_unix_ms / 1000)
