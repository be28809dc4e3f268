"""LoadView: snapshot loads plus the in-flight correction, late snapshots, health and drain."""

from __future__ import annotations

import numpy as np
import pytest

from dataplane.core.load_view import LoadView, NodeSet, bind_table
from dataplane.core.table import PlannerParams, RoutingTable, make_table

NODES = NodeSet(["a", "b", "c"], ["10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"])


def view(*, correction_horizon_s: float = 5.0, max_pending: int = 1_000_000) -> LoadView:
    return LoadView(NODES, correction_horizon_s=correction_horizon_s, max_pending=max_pending)


def table(node_ids: list[str]) -> RoutingTable:
    return make_table(
        pool="default",
        node_ids=node_ids,
        key_hashes=np.array([7, 9], dtype=np.uint64),
        set_offsets=np.array([0, 2, 3], dtype=np.uint32),
        set_members=np.array([0, 1, 1], dtype=np.uint16),
        params=PlannerParams(q_cap=1.0, slots_per_node=2),
        created_at_unix_ms=0,
    )


# -- NodeSet ----------------------------------------------------------------------------------


def test_nodeset_indexes_ids_in_order_and_keeps_addresses() -> None:
    assert NODES.index == {"a": 0, "b": 1, "c": 2}
    assert NODES.addresses[2] == "10.0.0.3:8000"
    assert len(NODES) == 3


def test_nodeset_addresses_default_to_the_ids() -> None:
    assert NodeSet(["x", "y"]).addresses == ("x", "y")


def test_nodeset_rejects_duplicate_ids_and_misaligned_addresses() -> None:
    with pytest.raises(ValueError, match="not unique"):
        NodeSet(["a", "a"])
    with pytest.raises(ValueError, match="1 addresses for 2 nodes"):
        NodeSet(["a", "b"], ["h:1"])


# -- in-flight correction ---------------------------------------------------------------------


def test_a_fresh_view_has_zero_load_and_every_node_eligible() -> None:
    v = view()
    assert v.loads == [0.0, 0.0, 0.0]
    assert v.eligible_nodes == (0, 1, 2)


def test_record_counts_a_decision_on_its_node_at_once() -> None:
    v = view()
    v.record(1, now=1.0)
    v.record(1, now=1.1)
    assert v.loads == [0.0, 2.0, 0.0]
    assert v.in_flight(1) == 2


def test_snapshot_keeps_decisions_made_after_it_was_observed() -> None:
    v = view()
    for t, node in ((1.0, 0), (2.0, 0), (3.0, 0), (3.5, 2)):
        v.record(node, now=t)
    v.apply_snapshot(2.5, [10.0, 4.0, 1.0])
    # decisions at 1.0 and 2.0 are in the snapshot; 3.0 (node a) and 3.5 (node c) are not yet
    assert v.loads == [11.0, 4.0, 2.0]
    assert [v.in_flight(n) for n in range(3)] == [1, 0, 1]


def test_snapshot_drops_decisions_made_exactly_when_it_was_observed() -> None:
    v = view()
    v.record(0, now=2.0)
    v.apply_snapshot(2.0, [5.0, 0.0, 0.0])
    assert v.loads == [5.0, 0.0, 0.0]
    assert v.in_flight(0) == 0


def test_decisions_after_a_snapshot_add_to_its_loads() -> None:
    v = view()
    v.apply_snapshot(1.0, [3.0, 2.0, 1.0])
    v.record(2, now=1.5)
    assert v.loads == [3.0, 2.0, 2.0]


def test_the_view_applies_whatever_snapshot_it_is_given_ordering_is_the_routers_job() -> None:
    # Wall-clock ordering here let one future-dated snapshot freeze the view (issue 9); the
    # router orders snapshots by (leader_term, seq). Decisions after observed_at still count.
    v = view()
    v.apply_snapshot(5.0, [1.0, 1.0, 1.0])
    v.record(0, now=6.0)
    v.apply_snapshot(4.0, [9.0, 9.0, 9.0], healthy=[False, True, True])
    assert v.loads == [10.0, 9.0, 9.0]
    assert v.snapshot_observed_at == 4.0
    assert v.healthy == [False, True, True]


def test_below_the_panic_threshold_every_undrained_node_is_eligible() -> None:
    v = LoadView(NODES, panic_threshold=0.5)
    v.set_states(healthy=[False, False, True], draining=[False, False, False])
    assert v.panic and v.eligible_nodes == (0, 1, 2) and v.healthy == [True, True, True]
    assert v.reported_healthy == [False, False, True]
    v.set_states(healthy=[False, True, True])  # 2 of 3 healthy: at or above half
    assert not v.panic and v.eligible_nodes == (1, 2)
    v.set_states(healthy=[False, False, False], draining=[True, False, False])
    assert v.panic and v.eligible_nodes == (1, 2)  # drained nodes stay out, even in panic


def test_without_a_panic_threshold_an_all_unhealthy_view_has_no_eligible_node() -> None:
    v = view()
    v.set_states(healthy=[False, False, False])
    assert not v.panic and v.eligible_nodes == ()


def test_forgotten_loads_leave_only_the_in_flight_counts() -> None:
    v = view()
    v.apply_snapshot(1.0, [7.0, 3.0, 5.0])
    v.record(1, now=2.0)
    v.forget_loads([0, 1])
    assert v.loads == [0.0, 1.0, 5.0]
    v.forget_loads()
    assert v.loads == [0.0, 1.0, 0.0]


def test_snapshot_with_the_wrong_number_of_loads_is_refused() -> None:
    with pytest.raises(ValueError, match="2 loads for 3 nodes"):
        view().apply_snapshot(1.0, [1.0, 2.0])


def test_corrections_expire_after_the_horizon_when_the_next_decision_is_recorded() -> None:
    v = view(correction_horizon_s=5.0)
    v.record(0, now=0.0)
    v.record(0, now=1.0)
    v.record(1, now=5.5)  # the decision at 0.0 is now past the horizon
    assert v.loads == [1.0, 1.0, 0.0]
    v.record(2, now=7.0)  # and the one at 1.0
    assert v.loads == [0.0, 1.0, 1.0]
    assert v.in_flight(0) == 0


def test_corrections_within_the_horizon_keep_counting_without_snapshots() -> None:
    v = view(correction_horizon_s=5.0)
    for i in range(10):
        v.record(i % 3, now=i * 0.4)
    assert sum(v.loads) == 10.0


def test_max_pending_bounds_the_correction() -> None:
    v = view(max_pending=3)
    for i in range(5):
        v.record(0, now=float(i) * 0.01)
    assert v.loads[0] == 3.0
    assert v.in_flight(0) == 3


# -- health, drain and eligibility ------------------------------------------------------------


def test_unhealthy_and_draining_nodes_are_not_eligible() -> None:
    v = view()
    v.set_states(healthy=[True, False, True], draining=[False, False, True])
    assert v.eligible_nodes == (0,)
    assert [v.is_eligible(n) for n in range(3)] == [True, False, False]


def test_a_departed_member_index_is_never_eligible() -> None:
    assert not view().is_eligible(-1)


def test_set_states_keeps_the_state_it_is_not_given() -> None:
    v = view()
    v.set_states(draining=[False, True, False])
    v.set_states(healthy=[False, True, True])
    assert v.draining == [False, True, False]
    assert v.eligible_nodes == (2,)


def test_snapshot_can_carry_health_and_drain_state() -> None:
    v = view()
    v.apply_snapshot(
        1.0, [0.0, 0.0, 0.0], healthy=[True, True, False], draining=[True, False, False]
    )
    assert v.eligible_nodes == (1,)


def test_recovering_node_becomes_eligible_again() -> None:
    v = view()
    v.set_states(healthy=[False, True, True])
    v.set_states(healthy=[True, True, True])
    assert v.eligible_nodes == (0, 1, 2)


# -- the table, bound to membership -----------------------------------------------------------


def test_bound_table_maps_destinations_into_the_nodeset_order() -> None:
    bound = bind_table(table(["c", "a"]), NODES)
    assert bound.to_node == (2, 0)
    assert bound.destinations(7) == [2, 0]
    assert bound.destinations(9) == [0]
    assert bound.destinations(8) is None


def test_a_table_destination_that_left_the_membership_maps_to_minus_one() -> None:
    bound = bind_table(table(["a", "gone"]), NODES)
    assert bound.destinations(7) == [0, -1]


def test_view_binds_and_swaps_its_table() -> None:
    v = LoadView(NODES, table=table(["a", "b"]))
    assert v.table is not None
    assert v.table.destinations(7) == [0, 1]
    v.set_table(None)
    assert v.table is None
