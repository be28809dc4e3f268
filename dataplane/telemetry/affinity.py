"""Delivered affinity, measured where peers measure it: at the front, per answer (issue 31).

The numbers the field compares routers by (the SGLang model-gateway multi-router study):

* **follow-ups on the turn-1 node**: of the requests whose routing key this router has answered
  before (a conversation's or session's later turns), the share served by the node that served
  the key's first answer here. ``cacheroute_router_followups_total{door,pool,node}``, ``node`` =
  ``first`` or ``other``;
* **follow-up cached fraction**: cached prompt tokens ÷ prompt tokens over those follow-ups, from
  the engines' own ``usage.prompt_tokens_details.cached_tokens`` and ``usage.prompt_tokens``:
  ``cacheroute_router_followup_cached_tokens_total`` ÷ ``..._followup_prompt_tokens_total``
  (answers without usage are counted as follow-ups but add no tokens);
* **fleet load CoV**: standard deviation ÷ mean of the eligible nodes' loads (per unit of
  weight) in each applied load snapshot, ``cacheroute_router_fleet_load_cov{pool}``.

Turn 1 is per router: with several routers a key's first answer on *this* router may be a later
turn elsewhere. The first-node map is bounded (:data:`MAX_KEYS`, least recently seen dropped), so
a key not seen for long counts as new again. Predicted cached tokens (what the plan expected a
key to find) are not measured here: the plan knows keys, not prompts.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge

from dataplane.core.dispersion import load_cov

MAX_KEYS = 100_000
_PROMPT = re.compile(rb'"prompt_tokens"\s*:\s*(\d+)')
_CACHED = re.compile(rb'"cached_tokens"\s*:\s*(\d+)')


def usage_tokens(tail: bytes) -> tuple[int | None, int | None]:
    """(prompt tokens, cached tokens) of an answer's usage, the last mention of each."""
    prompt = _PROMPT.findall(tail)
    cached = _CACHED.findall(tail)
    return (int(prompt[-1]) if prompt else None, int(cached[-1]) if cached else None)


class DeliveredAffinity:
    """The counters and gauge of the module docstring, and the bounded first-node map."""

    def __init__(self, registry: CollectorRegistry, max_keys: int = MAX_KEYS) -> None:
        self._first: OrderedDict[tuple[str, int], str] = OrderedDict()
        self._max_keys = max_keys
        labels = ["door", "pool"]
        self.followups = Counter(
            "cacheroute_router_followups",
            "Answers to a key this router answered before, by whether the key's first node served.",
            [*labels, "node"],
            registry=registry,
        )
        self.prompt_tokens = Counter(
            "cacheroute_router_followup_prompt_tokens",
            "Prompt tokens of follow-up answers (usage.prompt_tokens).",
            labels,
            registry=registry,
        )
        self.cached_tokens = Counter(
            "cacheroute_router_followup_cached_tokens",
            "Cached prompt tokens of follow-up answers (usage.prompt_tokens_details).",
            labels,
            registry=registry,
        )
        self.fleet_cov = Gauge(
            "cacheroute_router_fleet_load_cov",
            "Std/mean of the eligible nodes' loads per weight in the last applied snapshot.",
            ["pool"],
            registry=registry,
        )

    def answered(self, door: str, pool: str, key_hash: int, node: str, tail: bytes) -> None:
        """One completed answer of ``key_hash`` from ``node`` (``tail``: the body's end)."""
        first = self._first
        seen = first.get((pool, key_hash))
        if seen is None:
            first[(pool, key_hash)] = node
            if len(first) > self._max_keys:
                first.popitem(last=False)
            return
        first.move_to_end((pool, key_hash))
        self.followups.labels(door, pool, "first" if seen == node else "other").inc()
        prompt, cached = usage_tokens(tail)
        if prompt is not None and cached is not None:
            self.prompt_tokens.labels(door, pool).inc(prompt)
            self.cached_tokens.labels(door, pool).inc(min(cached, prompt))

    def loads(self, pool: str, loads: Sequence[float]) -> None:
        self.fleet_cov.labels(pool).set(load_cov(loads))
