"""Starting and watching the processes of the HTTP benchmarks: spawn, wait for HTTP, CPU time,
and the one load snapshot that names the engine.

Shared by ``bench_http_front.py`` and ``bench_extproc.py``, which start the same engine, Redis and
router and measure them the same way.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from cacheroute.v1 import cluster_pb2
from cacheroute_state import open_stores
from servekit.processes import die_with_parent

ROOT = Path(__file__).resolve().parents[1]


def spawn(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, *args],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=die_with_parent(),  # noqa: PLW1509 - only sets the parent-death signal
    )


def wait_http(url: str, timeout_s: float = 60.0, accept: Any = None) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=1) as reply:
                data = reply.read()
                if accept is None or accept(data):
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"{url} not ready within {timeout_s} s")
        time.sleep(0.1)


def cpu_s(pid: int) -> float:
    """User + system CPU seconds a process has used (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def publish_one_engine(redis_url: str, engine: str) -> None:
    stores = open_stores(redis_url)
    try:
        await stores.cluster.publish_load(
            cluster_pb2.LoadSnapshot(
                pool="default",
                seq=1,
                observed_at_unix_ms=int(time.time() * 1000),
                nodes=[cluster_pb2.NodeLoad(node_id="engine-0", address=engine, healthy=True)],
            )
        )
    finally:
        await stores.close()
