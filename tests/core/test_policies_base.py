"""The shared dispatch helpers: power-of-two choices and the least-loaded tie rule.

Power-of-two choices is statistical, so its tests are too: over a fixed set of seeds, each node
must be *sampled* with probability 2/n (the lightest node wins exactly when it is sampled) and the
two samples must be distinct (the heaviest node is then never chosen). The tolerances are ~5
standard deviations of the binomial estimate, so the fixed seeds pass with a wide margin while the
biased samplers the mutation run produced (docs/mutation.md) miss by far more.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from dataplane.core.load_view import LoadView, NodeSet, NoEligibleNodeError
from dataplane.core.policies.base import (
    Decision,
    Policy,
    Reason,
    Request,
    least_loaded,
    power_of_two,
)

TRIALS = 4000
SEEDS = (1, 2, 3, 4)


def make_view(loads: Sequence[float], healthy: Sequence[bool] | None = None) -> LoadView:
    view = LoadView(NodeSet([f"n{i}" for i in range(len(loads))]))
    view.apply_snapshot(0.0, loads, healthy=healthy)
    return view


def choice_frequency(loads: Sequence[float], node: int) -> float:
    """Share of ``TRIALS`` draws per seed (over all ``SEEDS``) in which p2c picked ``node``."""
    view = make_view(loads)
    hits = 0
    for seed in SEEDS:
        rng = random.Random(seed)
        hits += sum(power_of_two(view, rng) == node for _ in range(TRIALS))
    return hits / (TRIALS * len(SEEDS))


@pytest.mark.parametrize("size", [2, 3, 5, 8])
def test_power_of_two_samples_every_node_with_probability_two_over_n(size: int) -> None:
    # The lightest node (all others tied above it) is chosen iff it is one of the two samples.
    # Binomial sd of the estimate over 16,000 draws is <= 0.004; the tolerance is 0.02.
    expected = 2 / size
    for node in range(size):
        loads = [1.0] * size
        loads[node] = 0.0
        assert choice_frequency(loads, node) == pytest.approx(expected, abs=0.02), node


@pytest.mark.parametrize("size", [2, 3, 5, 8])
def test_power_of_two_samples_two_distinct_nodes_so_the_heaviest_never_wins(size: int) -> None:
    for node in range(size):
        loads = [0.0] * size
        loads[node] = 1.0
        assert choice_frequency(loads, node) == 0.0, node


def test_power_of_two_spreads_by_rank_like_distinct_uniform_pairs() -> None:
    # loads 0 < 1 < 2 < 3: node i wins when the other sample is heavier, P = (n-1-i) / C(n, 2).
    loads = [0.0, 1.0, 2.0, 3.0]
    for node, expected in enumerate([3 / 6, 2 / 6, 1 / 6, 0.0]):
        assert choice_frequency(loads, node) == pytest.approx(expected, abs=0.02), node


def test_power_of_two_draws_only_among_eligible_nodes() -> None:
    view = make_view([5.0, 0.0, 9.0, 0.0, 7.0], healthy=[True, False, True, False, True])
    rng = random.Random(9)
    chosen = [power_of_two(view, rng) for _ in range(2000)]
    assert set(chosen) == {0, 4}  # the idle unhealthy nodes never, the heaviest (2) never
    assert chosen.count(0) / len(chosen) == pytest.approx(2 / 3, abs=0.05)


def test_power_of_two_with_one_eligible_node_returns_it_without_drawing() -> None:
    view = make_view([3.0, 0.0], healthy=[True, False])
    rng = random.Random(5)
    state = rng.getstate()
    assert power_of_two(view, rng) == 0
    assert rng.getstate() == state


def test_power_of_two_and_least_loaded_raise_with_nothing_to_choose() -> None:
    with pytest.raises(NoEligibleNodeError, match=r"^no healthy, undrained node$"):
        power_of_two(make_view([0.0], healthy=[False]), random.Random(0))
    with pytest.raises(NoEligibleNodeError, match=r"^no candidate node$"):
        least_loaded(make_view([0.0]), [])


# -- least_loaded: the documented tie rule ----------------------------------------------------

CANDIDATES = [4, 1, 3, 0, 2]  # node indices, deliberately not sorted


@pytest.mark.parametrize(
    ("tie_break", "expected"),
    # loads: nodes 1 and 0 (positions 1 and 3) share the minimum; rotation from tie_break % 5
    [(0, 1), (1, 1), (2, 0), (3, 0), (4, 1), (5, 1), (7, 0), (2**64 - 1, 1)],
)
def test_least_loaded_ties_go_to_the_first_in_rotation_order_from_tie_break(
    tie_break: int, expected: int
) -> None:
    view = make_view([2.0, 2.0, 5.0, 9.0, 7.0])
    assert least_loaded(view, CANDIDATES, tie_break) == expected


def test_least_loaded_with_equal_loads_returns_the_candidate_at_tie_break_mod_k() -> None:
    view = make_view([3.0] * 5)
    for tie_break in range(12):
        assert least_loaded(view, CANDIDATES, tie_break) == CANDIDATES[tie_break % 5]


def test_least_loaded_without_a_tie_break_starts_at_the_first_candidate() -> None:
    view = make_view([3.0] * 5)
    assert least_loaded(view, CANDIDATES) == CANDIDATES[0]


def test_a_policy_without_a_seed_draws_as_with_seed_zero() -> None:
    view = make_view([0.0] * 6)
    default, zero = Policy(), Policy(seed=0)
    assert [power_of_two(view, default.rng) for _ in range(50)] == [
        power_of_two(view, zero.rng) for _ in range(50)
    ]


def test_least_loaded_picks_a_strictly_lighter_candidate_whatever_the_tie_break() -> None:
    view = make_view([4.0, 6.0, 5.0, 1.5, 3.0])
    for tie_break in range(10):
        assert least_loaded(view, CANDIDATES, tie_break) == 3
    assert least_loaded(view, [1, 2], 0) == 2  # a later, lighter candidate replaces the start


def test_route_calls_observe_only_for_policies_that_override_it() -> None:
    seen: list[int] = []

    class Stateless(Policy):
        name = "stateless-test"

        def choose(self, request: Request, view: LoadView) -> Decision:
            return Decision(0, Reason.P2C)

    class Learning(Stateless):
        name = "learning-test"

        def observe(self, request: Request, decision: Decision, view: LoadView) -> None:
            seen.append(decision.node)

    view = LoadView(NodeSet(["a", "b"]))
    assert not Stateless.observes
    assert Learning.observes
    Stateless().route(Request(1), view, 0.0)
    Learning().route(Request(1), view, 0.0)
    assert seen == [0]
    assert view.in_flight(0) == 2  # both decisions recorded
