"""agents.dialects: detection of every engine generation and its mapping to one EngineSample."""

from __future__ import annotations

import json

import pytest

from agents import dialects
from agents.dialects import UnrecognisedMetricsError, decode, detect
from agents.exposition import parse
from cacheroute.v1 import agent_pb2
from tests.support.agents import DIALECT_SAMPLES, EXPECTED, SAMPLES, sample


def read(name: str, choice: str = "auto") -> dialects.EngineSample:
    return decode(parse(sample(name), wanted=dialects.wanted), choice)


@pytest.mark.parametrize("name", DIALECT_SAMPLES)
def test_every_dialect_sample_reads_as_the_same_engine_state(name: str) -> None:
    got = read(f"{name}_a")
    assert (got.dialect, got.kind) == EXPECTED[name]
    assert got.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert (got.running, got.waiting) == (7.0, 3.0)
    assert got.kv_usage == pytest.approx(0.42)
    assert (got.kv_capacity_tokens, got.block_size) == (131_072, 16)


@pytest.mark.parametrize("name", [n for n in DIALECT_SAMPLES if n != "vllm_v0"])
def test_dialects_with_prefix_counters_read_them_in_tokens(name: str) -> None:
    got = read(f"{name}_b")
    assert (got.prefix_hits, got.prefix_queries) == (803_000.0, 1_204_000.0)
    assert (got.prompt_tokens, got.generation_tokens) == (1_204_000.0, 351_000.0)


def test_vllm_v0_has_only_the_hit_rate_gauge() -> None:
    got = read("vllm_v0_a")
    assert got.prefix_hits is None and got.prefix_queries is None
    assert got.hit_rate_gauge == 0.75


def test_vllm_v1_prefers_new_names_over_their_deprecated_twins() -> None:
    text = (
        'vllm:num_requests_running{engine="0"} 1\nvllm:num_requests_waiting{engine="0"} 0\n'
        'vllm:kv_cache_usage_perc{engine="0"} 0.5\nvllm:gpu_cache_usage_perc{engine="0"} 0.9\n'
        "vllm:prefix_cache_hits_total 10\nvllm:prefix_cache_queries_total 20\n"
        "vllm:gpu_prefix_cache_hits_total 1\nvllm:gpu_prefix_cache_queries_total 2\n"
    )
    got = decode(parse(text))
    assert got.dialect == agent_pb2.METRIC_DIALECT_VLLM_V1
    assert (got.kv_usage, got.prefix_hits, got.prefix_queries) == (0.5, 10.0, 20.0)


def test_a_forced_dialect_is_reported_and_reads_the_other_generation_names() -> None:
    got = read("vllm_deprecated_a", "vllm_v1")
    assert got.dialect == agent_pb2.METRIC_DIALECT_VLLM_V1
    assert got.kv_usage == pytest.approx(0.42)
    assert got.prefix_queries == 1_200_000.0


def test_forced_sglang_reads_the_prefix_off_the_page() -> None:
    assert read("sglang_underscore_a", "sglang").dialect == dialects.SGLANG_UNDERSCORE
    assert read("sglang_colon_a", "sglang").dialect == dialects.SGLANG_COLON


def test_the_sim_marker_is_detected_by_its_prefix_before_vllm_names() -> None:
    text = sample("vllm_v1_a") + "cacheroute_sim_engine_up 1\n"
    assert detect(parse(text)) == dialects.SIMULATED
    assert dialects.SIM_MARKER.startswith(dialects.SIM_MARKER_PREFIX)


def test_forced_sim_reads_a_vllm_v1_page() -> None:
    got = read("vllm_v1_a", "sim")
    assert (got.dialect, got.kind) == (dialects.SIMULATED, agent_pb2.ENGINE_KIND_SIMULATED)
    assert got.running == 7.0


def test_a_page_without_engine_metrics_is_unrecognised() -> None:
    # vLLM answers /metrics with process metrics only while the engine still loads.
    with pytest.raises(UnrecognisedMetricsError, match="no vLLM, SGLang"):
        detect(parse("process_start_time_seconds 1.7e9\nprocess_open_fds 45\n"))


def test_a_missing_required_metric_is_named() -> None:
    text = "vllm:num_requests_running 1\nvllm:kv_cache_usage_perc 0.1\n"
    with pytest.raises(UnrecognisedMetricsError, match="vllm:num_requests_waiting"):
        decode(parse(text))


def test_vllm_capacity_is_zero_before_the_engine_sized_its_cache() -> None:
    text = (
        "vllm:num_requests_running 0\nvllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 0\n"
        'vllm:cache_config_info{block_size="16",num_gpu_blocks="None"} 1.0\n'
    )
    got = decode(parse(text))
    assert (got.kv_capacity_tokens, got.block_size) == (0, 16)


def test_vllm_capacity_prefers_the_kv_cache_size_tokens_label() -> None:
    text = (
        "vllm:num_requests_running 0\nvllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 0\n"
        'vllm:cache_config_info{block_size="16",kv_cache_size_tokens="123433",'
        'num_gpu_blocks="14835"} 1.0\n'
    )
    assert decode(parse(text)).kv_capacity_tokens == 123_433


def test_kv_usage_is_clamped_to_a_fraction() -> None:
    text = "sglang:num_running_reqs 1\nsglang:num_queue_reqs 0\nsglang:token_usage 1.3\n"
    assert decode(parse(text)).kv_usage == 1.0


def test_an_unknown_dialect_choice_is_rejected() -> None:
    with pytest.raises(ValueError, match="dialect must be one of"):
        decode(parse(sample("vllm_v1_a")), "tgi")


@pytest.mark.parametrize("name", ["sglang_priority", "sglang_all_schedulers"])
def test_sglang_label_sets_read_as_one_engine_not_a_sum_of_every_series(name: str) -> None:
    # Priority scheduling adds a total (priority="") beside per-priority series; metrics for all
    # schedulers repeat each DP group's numbers once per TP rank. Summing everything read 2x/TPx.
    got = read(name)
    assert got.dialect == dialects.SGLANG_COLON
    assert (got.running, got.waiting) == (7.0, 3.0)
    assert got.kv_usage == pytest.approx(0.42)
    assert (got.kv_capacity_tokens, got.block_size) == (131_072, 16)
    assert (got.prefix_hits, got.prefix_queries) == (800_000.0, 1_200_000.0)


def test_llamacpp_is_detected_and_read_in_tokens() -> None:
    # The page was captured from the real binary after requests whose answers said, in total,
    # this many prompt and cached tokens (scripts/capture_llamacpp_metrics.py).
    truth = json.loads((SAMPLES / "llamacpp.json").read_text())
    assert 0 < truth["cached"] < truth["prompt"]
    for choice in ("auto", "llamacpp"):
        got = read("llamacpp", choice)
        assert got.dialect == agent_pb2.METRIC_DIALECT_LLAMACPP
        assert got.kind == agent_pb2.ENGINE_KIND_LLAMACPP
        assert (got.running, got.waiting) == (0.0, 0.0)  # idle when captured
        # hits / queries = cached / (cached + processed): the engine's prompt_tokens_total
        # counts processed tokens only; cached / processed read a 50% hit as 100%.
        assert (got.prefix_hits, got.prefix_queries) == (truth["cached"], truth["prompt"])
        assert got.prompt_tokens == truth["prompt"]
        assert got.generation_tokens is not None and got.generation_tokens > 0
        assert got.kv_usage == 0.0 and got.kv_capacity_tokens == 0  # not exported


def test_llamacpp_hits_are_cached_over_cached_plus_processed() -> None:
    page = (
        "llamacpp:requests_processing 0\nllamacpp:requests_deferred 0\n"
        "llamacpp:prompt_tokens_total 300\nllamacpp:prompt_tokens_cached_total 100\n"
    )
    got = decode(parse(page, wanted=dialects.wanted), "llamacpp")
    assert (got.prefix_hits, got.prefix_queries, got.prompt_tokens) == (100.0, 400.0, 400.0)
    without_cache = decode(parse(page.rsplit("llamacpp:prompt_tokens_cached", 1)[0]), "llamacpp")
    assert without_cache.prefix_hits is None and without_cache.prefix_queries is None
    assert without_cache.prompt_tokens == 300.0


def test_a_llamacpp_page_without_its_load_gauges_names_the_missing_one() -> None:
    page = "llamacpp:requests_processing 1\n"
    with pytest.raises(UnrecognisedMetricsError, match="requests_deferred"):
        decode(parse(page, wanted=dialects.wanted), "llamacpp")
