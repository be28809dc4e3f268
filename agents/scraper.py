"""Scrape one engine's ``/metrics`` and keep the last good values with their scrape time.

A failed scrape (refused, timed out, HTTP error, unparseable, no engine metrics) never produces
numbers: the state turns unhealthy and stale, keeps the last good sample and its ``scraped_at``,
and the rates of that report are empty. The control plane treats a stale node as down, not idle.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp

from agents import dialects, exposition
from agents.agent_metrics import NodeMetrics
from agents.counter_rates import NO_RATES, IntervalRates, RateTracker
from agents.dialects import EngineSample, UnrecognisedMetricsError
from agents.exposition import ExpositionError

# Ask for the classic text format: with an OpenMetrics Accept header, newer prometheus_client
# servers may escape names (``sglang:x`` → ``sglang_x``), which would change the dialect.
ACCEPT = "text/plain;version=0.0.4;q=1.0,*/*;q=0.1"
MAX_ERROR_CHARS = 200


@dataclass(frozen=True)
class ScrapeState:
    """What a report says about the engine after the latest scrape attempt."""

    healthy: bool = False
    stale: bool = True
    error: str = ""
    # The last good sample and its wall-clock time (ms since the epoch); None/0 before the first.
    sample: EngineSample | None = None
    scraped_at_unix_ms: int = 0
    rates: IntervalRates = field(default_factory=IntervalRates)


class ScrapeError(Exception):
    """One failed scrape; ``result`` is its label in ``cacheroute_agent_scrapes_total``."""

    def __init__(self, result: str, message: str) -> None:
        super().__init__(message)
        self.result = result


class Scraper:
    """Scrapes one engine; not safe for concurrent :meth:`scrape` calls (one agent loop each)."""

    def __init__(
        self,
        url: str,
        session: aiohttp.ClientSession,
        *,
        timeout_s: float,
        dialect: str = "auto",
        metrics: NodeMetrics,
        wall_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if dialect not in dialects.CHOICES:
            raise ValueError(f"dialect must be one of {dialects.CHOICES}, got {dialect!r}")
        self.url = url
        self._session = session
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._dialect = dialect
        self._metrics = metrics
        self._wall_ms = wall_ms
        self._monotonic = monotonic
        self._rates = RateTracker()
        self.state = ScrapeState()

    async def scrape(self) -> ScrapeState:
        started = self._monotonic()
        try:
            sample = await self._fetch_and_decode()
        except ScrapeError as exc:
            self._metrics.scraped(exc.result, self._monotonic() - started)
            self.state = ScrapeState(
                healthy=False,
                stale=True,
                error=str(exc)[:MAX_ERROR_CHARS],
                sample=self.state.sample,
                scraped_at_unix_ms=self.state.scraped_at_unix_ms,
                rates=NO_RATES,
            )
        else:
            done = self._monotonic()
            self._metrics.scraped("ok", done - started)
            rates = self._rates.update(sample, done)
            if rates.reset:
                self._metrics.resets.inc()
            self.state = ScrapeState(
                healthy=True,
                stale=False,
                sample=sample,
                scraped_at_unix_ms=self._wall_ms(),
                rates=rates,
            )
        self._metrics.healthy.set(1 if self.state.healthy else 0)
        return self.state

    async def _fetch_and_decode(self) -> EngineSample:
        text, content_type = await self._fetch()
        try:
            expo = exposition.parse(text, content_type, wanted=dialects.wanted)
        except ExpositionError as exc:
            raise ScrapeError("malformed", str(exc)) from exc
        try:
            return dialects.decode(expo, self._dialect)
        except UnrecognisedMetricsError as exc:
            raise ScrapeError("unrecognised", str(exc)) from exc

    async def _fetch(self) -> tuple[str, str]:
        try:
            async with self._session.get(
                self.url, timeout=self._timeout, headers={"Accept": ACCEPT}
            ) as response:
                if response.status != 200:
                    raise ScrapeError("http_error", f"GET {self.url}: HTTP {response.status}")
                text = await response.text(errors="replace")
                return text, response.headers.get("Content-Type", "")
        except TimeoutError as exc:
            raise ScrapeError("timeout", f"GET {self.url}: timed out") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise ScrapeError(
                "unreachable", f"GET {self.url}: {exc or type(exc).__name__}"
            ) from exc
