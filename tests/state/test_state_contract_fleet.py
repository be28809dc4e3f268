"""The state contract of the fleet-profile records: Flat-LB windows and the fitted profile (twin
and real Redis)."""

from __future__ import annotations

from cacheroute.v1 import cluster_pb2
from cacheroute_state import Stores


def window(pool: str, end_ms: int) -> cluster_pb2.FleetWindow:
    return cluster_pb2.FleetWindow(
        pool=pool, start_unix_ms=end_ms - 60_000, end_unix_ms=end_ms, qps=20.0,
        ttft_p50_s=0.1, ttft_p99_s=0.4, samples=1200, nodes=2,
    )  # fmt: skip


async def test_fleet_windows_keep_the_newest_n_oldest_first_per_pool(stores: Stores) -> None:
    assert await stores.telemetry.read_fleet_windows("a") == []
    for end in range(1, 6):
        await stores.telemetry.add_fleet_window(window("a", end * 60_000), keep=3)
    await stores.telemetry.add_fleet_window(window("b", 60_000), keep=3)
    kept = await stores.telemetry.read_fleet_windows("a")
    assert [w.end_unix_ms for w in kept] == [180_000, 240_000, 300_000]
    assert kept[-1] == window("a", 300_000)
    assert [w.pool for w in await stores.telemetry.read_fleet_windows("b")] == ["b"]


async def test_a_smaller_keep_trims_what_is_already_stored(stores: Stores) -> None:
    for end in range(1, 5):
        await stores.telemetry.add_fleet_window(window("a", end * 60_000), keep=10)
    await stores.telemetry.add_fleet_window(window("a", 300_000), keep=2)
    kept = await stores.telemetry.read_fleet_windows("a")
    assert [w.end_unix_ms for w in kept] == [240_000, 300_000]


async def test_fleet_profile_is_absent_until_fitted_and_then_replaced_per_pool(
    stores: Stores,
) -> None:
    assert await stores.telemetry.get_fleet_profile("a") is None
    first = cluster_pb2.FleetProfile(
        pool="a", name="fitted:a@1", base="llama-70b-tp4", factor=1.5, offset_ms=30.0,
        rms_relative_error=0.05, windows=4, fitted_at_unix_ms=1,
    )  # fmt: skip
    await stores.telemetry.put_fleet_profile(first)
    assert await stores.telemetry.get_fleet_profile("a") == first
    assert await stores.telemetry.get_fleet_profile("b") is None
    second = cluster_pb2.FleetProfile(pool="a", name="fitted:a@2", factor=0.8)
    await stores.telemetry.put_fleet_profile(second)
    assert await stores.telemetry.get_fleet_profile("a") == second
