"""agents.exposition: Prometheus text → samples by name, sums over label sets, pre-filtering."""

from __future__ import annotations

import math

import pytest

from agents import dialects
from agents.exposition import ExpositionError, parse, prefilter
from tests.support.agents import sample

TWO_ENGINES = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 4.0
vllm:num_requests_running{engine="1",model_name="m"} 3.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.4
vllm:kv_cache_usage_perc{engine="1",model_name="m"} NaN
"""


def test_sum_adds_every_label_set_of_a_name() -> None:
    expo = parse(TWO_ENGINES)
    assert expo.sum("vllm:num_requests_running") == 7.0
    assert expo.label_values("vllm:num_requests_running", "engine") == ["0", "1"]


def test_mean_and_sum_skip_nan_and_absent_names_are_none() -> None:
    expo = parse(TWO_ENGINES)
    assert expo.mean("vllm:kv_cache_usage_perc") == pytest.approx(0.4)
    assert expo.sum("vllm:num_requests_waiting") is None
    assert expo.mean("vllm:num_requests_waiting") is None


def test_counter_is_found_with_or_without_the_total_suffix() -> None:
    # An untyped bare name (llm-d-inference-sim before its fix) and a typed counter.
    expo = parse(
        "vllm:prefix_cache_hits 8\n"
        "# TYPE vllm:prefix_cache_queries counter\n"
        "vllm:prefix_cache_queries 10\n"
    )
    assert expo.counter("vllm:prefix_cache_hits") == 8.0
    assert expo.counter("vllm:prefix_cache_queries") == 10.0  # the parser adds _total


def test_prefilter_keeps_wanted_names_and_parses_to_the_same_values() -> None:
    text = sample("vllm_v1_a")
    kept = prefilter(text, dialects.wanted)
    assert "vllm:time_per_output_token_seconds_bucket" not in kept  # TTFT is read, TPOT not
    assert len(kept) < len(text) / 2
    full, filtered = parse(text), parse(text, wanted=dialects.wanted)
    for name in ("vllm:num_requests_running", "vllm:prefix_cache_hits_total"):
        assert filtered.sum(name) == full.sum(name)
    assert filtered.series("vllm:cache_config_info") == full.series("vllm:cache_config_info")


def test_openmetrics_content_type_uses_the_openmetrics_parser() -> None:
    text = (
        "# TYPE sglang:num_running_reqs gauge\n"
        'sglang:num_running_reqs{model_name="m"} 5.0\n'
        "# TYPE sglang:prompt_tokens counter\n"
        'sglang:prompt_tokens_total{model_name="m"} 12.0\n'
        "# EOF\n"
    )
    content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8"
    expo = parse(text, content_type, wanted=dialects.wanted)
    assert expo.sum("sglang:num_running_reqs") == 5.0
    assert expo.counter("sglang:prompt_tokens") == 12.0


def test_malformed_text_raises_exposition_error() -> None:
    with pytest.raises(ExpositionError, match="malformed"):
        parse('vllm:num_requests_running{engine="0" 4.0\n')


def test_values_drop_infinities() -> None:
    expo = parse('x 1\nx{a="b"} +Inf\n')
    assert expo.values("x") == [1.0]
    assert not any(math.isinf(v) for v in expo.values("x"))


def test_sums_skip_rank_duplicates_and_prefer_the_priority_total() -> None:
    text = (
        'g{dp_rank="0",tp_rank="0"} 4\ng{dp_rank="0",tp_rank="1"} 4\n'
        'g{dp_rank="1",tp_rank="0",pp_rank="0"} 3\ng{dp_rank="1",tp_rank="1",pp_rank="0"} 3\n'
        'p{priority=""} 5\np{priority="0"} 2\np{priority="1"} 3\n'
        'q{priority="0"} 2\nq{priority="1"} 3\n'
        'v{engine="0"} 1\nv{engine="1"} 2\n'
    )
    expo = parse(text)
    assert expo.sum("g") == 7.0  # one per DP rank, TP duplicates once
    assert expo.mean("g") == 3.5
    assert expo.sum("p") == 5.0  # the total series
    assert expo.sum("q") == 5.0  # no total: the per-priority series add up
    assert expo.sum("v") == 3.0  # vLLM's DP engines are distinct
