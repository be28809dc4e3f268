"""The checked-in generated protocol code matches what the pinned generators produce."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from cacheroute.v1 import admin_pb2, agent_pb2, cluster_pb2, routing_pb2, table_pb2

ROOT = Path(__file__).resolve().parents[2]


def test_generated_code_has_not_drifted() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_proto.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_generated_code_imports_under_cacheroute_v1() -> None:
    assert routing_pb2.DESCRIPTOR.package == "cacheroute.v1"
    for module in (admin_pb2, agent_pb2, cluster_pb2, table_pb2):
        assert module.DESCRIPTOR.package == "cacheroute.v1"
