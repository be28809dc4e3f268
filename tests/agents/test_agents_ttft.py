"""The TTFT histogram: read off each dialect's page, summed over replicas, sent in NodeReport."""

from __future__ import annotations

import pytest

from agents import dialects
from agents.dialects import decode
from agents.exposition import parse
from agents.histograms import read_histogram
from tests.support.agents import sample


def read(name: str) -> dialects.EngineSample:
    return decode(parse(sample(name), wanted=dialects.wanted))


@pytest.mark.parametrize("name", ["sim_a", "sglang_colon_a", "sglang_underscore_a"])
def test_single_replica_pages_give_their_ttft_histogram(name: str) -> None:
    ttft = read(name).ttft
    assert ttft is not None
    assert ttft.count == 8.0 and ttft.sum == pytest.approx(1.711)
    assert list(ttft.upper_bounds) == sorted(ttft.upper_bounds)
    assert ttft.counts[-1] <= ttft.count
    assert all(a <= b for a, b in zip(ttft.counts, ttft.counts[1:], strict=False))


def test_vllm_replicas_are_summed_per_bucket_bound() -> None:
    page = parse(sample("vllm_v1_a"), wanted=dialects.wanted)
    ttft = read_histogram(page, "vllm:time_to_first_token_seconds")
    assert ttft is not None
    engines = {s.labels["engine"] for s in page.series("vllm:time_to_first_token_seconds_count")}
    per_engine = page.values("vllm:time_to_first_token_seconds_count")
    assert len(engines) == len(per_engine) >= 2
    assert ttft.count == sum(per_engine)
    at_40ms = ttft.counts[ttft.upper_bounds.index(0.04)]
    assert at_40ms == len(engines)  # one observation <= 40 ms on each engine


def test_llamacpp_reports_no_ttft() -> None:
    assert read("llamacpp").ttft is None


def test_a_page_without_the_histogram_has_none() -> None:
    page = parse("vllm:num_requests_running 1\n")
    assert read_histogram(page, "vllm:time_to_first_token_seconds") is None


def test_non_monotonic_buckets_from_a_torn_scrape_are_clamped() -> None:
    page = parse(
        'x_bucket{le="0.1"} 5\nx_bucket{le="0.2"} 4\nx_bucket{le="+Inf"} 6\nx_count 6\nx_sum 1\n'
    )
    got = read_histogram(page, "x")
    assert got is not None and got.counts == (5.0, 5.0) and got.count == 6.0
