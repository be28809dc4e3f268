"""What every ext_proc stream of one router shares: options, the router's parts, the metrics."""

from __future__ import annotations

import random
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge

from dataplane.core.router import Router
from dataplane.extproc.body_budget import BodyBudget
from dataplane.health.health_feedback import HealthFeedback
from dataplane.health.passive_health import PassiveHealth
from dataplane.openai_api.request_keys import DEFAULT_KEY_HEADERS, KeyRules
from dataplane.requests.holds import Holds
from dataplane.telemetry.label_cache import LabelCache
from dataplane.telemetry.served_metrics import ServedMetrics


@dataclass(frozen=True)
class ExtProcConfig:
    """Options of the Endpoint Picker (``python -m dataplane --help``: the ``--extproc-*``)."""

    listen: str = "127.0.0.1:9002"
    health_listen: str | None = None  # the gRPC health server (GIE convention: port 9003)
    pool: str = ""  # requests without an x-cacheroute-pool header ("": default)
    max_body_bytes: int = 16 * 1024 * 1024
    max_buffered_bytes: int = 64 * 1024 * 1024  # every stream's waiting bodies together
    body_timeout_s: float = 60.0  # from the request headers to the body's end (then 408)
    allow_unauthenticated: bool = False  # serve callers the auth file does not name
    fallbacks: int = 2  # endpoints after the decision, for the gateway's retries
    key_headers: tuple[str, ...] = DEFAULT_KEY_HEADERS
    key_from_user: bool = False
    seed: int = 0
    grace_s: float = 5.0
    native: str | None = None  # the native ext_proc transport's binary (None: grpc.aio in Python)


class ExtProcMetrics:
    """``cacheroute_router_extproc_*``: decisions, immediate answers, fallbacks, open streams."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.decisions = Counter(
            "cacheroute_router_extproc_decisions",
            "Endpoint Picker decisions by the stage they were made at: headers (a key header), "
            "body (the key or prompt in the body) or bodiless (no body, no key).",
            ["stage"],
            registry=registry,
        )
        self.immediate_responses = Counter(
            "cacheroute_router_extproc_immediate_responses",
            "Requests the gateway answered itself on the picker's word (400, 404, 413, 503).",
            ["status"],
            registry=registry,
        )
        self.fallbacks = Counter(
            "cacheroute_router_extproc_fallbacks",
            "Requests served by a fallback entry of the pick (the gateway retried down the list).",
            registry=registry,
        )
        self.streams = Gauge(
            "cacheroute_router_extproc_open_streams",
            "ext_proc streams open now (one per HTTP request in the gateway).",
            registry=registry,
        )
        self.bad_fields = Counter(
            "cacheroute_router_extproc_ignored_fields",
            "Fields of ext_proc messages ignored as malformed or out of order: a :status that is "
            "not a number in 100-599, request headers after the decision.",
            ["field"],
            registry=registry,
        )
        self._children = LabelCache()

    def decided(self, stage: str) -> None:
        self._children(self.decisions, stage).inc()

    def immediate(self, status: int) -> None:
        self.immediate_responses.labels(str(status)).inc()

    def fallback(self) -> None:
        self.fallbacks.inc()

    def ignored(self, field: str) -> None:
        self.bad_fields.labels(field).inc()


class PickerContext:
    """The router's decision path (router, holds, passive health) plus the picker's own state.

    Outcomes reach passive health only through ``feedback`` (the rule and per-caller share that
    ``Release`` outcomes follow); without one (a test), a feedback that names no caller but the
    one each stream is given, at the default share.
    """

    def __init__(
        self,
        router: Router,
        holds: Holds,
        health: PassiveHealth,
        served: ServedMetrics,
        config: ExtProcConfig,
        registry: CollectorRegistry,
        feedback: HealthFeedback | None = None,
    ) -> None:
        self.router = router
        self.holds = holds
        self.health = health
        self.served = served
        self.config = config
        self.registry = registry
        self.metrics = ExtProcMetrics(registry)
        self.feedback = feedback or HealthFeedback(router, health, lambda _c: "", registry)
        self.budget = BodyBudget(config.max_buffered_bytes, registry)
        self.rules = KeyRules(
            key_from_user=config.key_from_user,
            key_headers=config.key_headers,
            conversations=router.uses_sessions,
        )
        self.rng = random.Random(config.seed)
