"""Shared inputs of the cachectl tests against a real control plane: stores, plan files, nodes."""

from __future__ import annotations

from pathlib import Path

import pytest

from cacheroute_state import Stores
from dataplane.core.table_codec import encode_table
from tests.support.cli import Cli
from tests.support.factories import small_plan

__all__ = ["add_plan_nodes", "stores", "write_plan"]


@pytest.fixture
def stores(state_stores: Stores) -> Stores:
    """This module's logic runs on the in-memory state twin; ``@on_redis`` tests on real Redis."""
    return state_stores


def write_plan(tmp_path: Path, seed: int) -> tuple[Path, str]:
    table = small_plan(seed=seed)
    path = tmp_path / f"plan-{seed}.pb"
    path.write_bytes(encode_table(table))
    return path, table.version


async def add_plan_nodes(cli: Cli, count: int = 4) -> None:
    """node-0..: the destinations of ``small_plan``, so its rollouts pass the destination gate."""
    for i in range(count):
        await cli.ok("nodes", "add", f"node-{i}", "--address", f"127.0.0.1:{9000 + i}")
