"""The local-cluster launcher and ``cachectl demo``: no process is left behind, whatever happens.

Real subprocesses throughout: a component that fails at start, a demo interrupted with Ctrl-C
(SIGINT) and one killed outright (SIGKILL: the children's parent-death signal cleans up), and a
short complete demo run whose JSON has both phases, the plan and its ACKs.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cachectl.localcluster.cluster import LocalCluster
from cachectl.localcluster.processes import ManagedProcess, ProcessExitedError, stop_all
from cachectl.localcluster.spec import ClusterError, ClusterSpec
from cachectl.main import main
from tests.support.timing import LagMeter, patiently

pytestmark = [pytest.mark.redis]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ")[-1].startswith("Z"))


def children_of(pid: int) -> list[int]:
    """Direct children of ``pid`` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().split(") ")[-1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


def wait_gone(pids: list[int], timeout: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = [p for p in pids if alive(p)]
        if not left:
            return []
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


async def test_a_component_that_fails_at_start_is_reported_and_nothing_is_left(
    tmp_path: Path,
) -> None:
    cluster = LocalCluster(ClusterSpec(engines=2, routers=1, profile="no-such-profile"), tmp_path)
    try:
        cluster.start()
        with pytest.raises(ProcessExitedError, match="engines-0 exited with status 2"):
            await patiently(cluster.wait_ready, 30, gives_up=ClusterError)
    finally:
        cluster.stop()
    assert cluster.pids()
    assert wait_gone(cluster.pids()) == []
    assert "invalid choice" in (tmp_path / "engines-0.log").read_text()
    cluster.stop()  # a second stop is harmless


def test_stop_all_kills_a_process_that_ignores_sigterm(tmp_path: Path, lag: LagMeter) -> None:
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    proc = ManagedProcess("stubborn", [sys.executable, "-c", code], tmp_path).start()
    time.sleep(0.3)
    started = time.monotonic()
    stop_all([proc], grace_s=0.5)
    lag.claim(time.monotonic() - started < 5, "stop_all returned within 5 s (grace 0.5 s)")
    assert proc.pid is not None and not alive(proc.pid)


def test_stop_all_also_kills_the_children_of_a_component(tmp_path: Path) -> None:
    code = (
        "import subprocess, sys, time; "
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        "print(p.pid, flush=True); time.sleep(60)"
    )
    proc = ManagedProcess("parent", [sys.executable, "-c", code], tmp_path).start()
    deadline = time.monotonic() + 10
    while not (tmp_path / "parent.log").read_text().strip() and time.monotonic() < deadline:
        time.sleep(0.05)
    grandchild = int((tmp_path / "parent.log").read_text().split()[0])
    assert alive(grandchild)
    stop_all([proc], grace_s=2)
    assert wait_gone([grandchild]) == []


@pytest.mark.parametrize(
    "argv",
    [
        ["demo", "--duration", "0"],
        ["demo", "--qps", "-1"],
        ["demo", "--engines", "0"],
        ["demo", "--workload", "nope"],
    ],
)
def test_bad_demo_flags_exit_2_before_starting_anything(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    before = set(children_of(os.getpid()))
    assert main(argv) == 2
    assert "cachectl: error:" in capsys.readouterr().err
    assert set(children_of(os.getpid())) == before


def start_demo(tmp_path: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable, "-m", "cachectl", "demo",
            "--engines", "2", "--qps", "4", "--keep-logs", str(tmp_path / "logs"),
            "--no-progress", *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def wait_for_phase_1(demo: subprocess.Popen[str], tmp_path: Path) -> list[int]:
    """Wait until the demo's cluster serves load; return the demo's child processes."""
    assert demo.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = demo.stdout.readline()
        if not line or line.startswith("phase 1/2"):
            break
    assert (tmp_path / "logs" / "agents.log").exists()
    time.sleep(1.0)
    kids = children_of(demo.pid)
    assert len(kids) >= 6  # redis, control plane, engines, two routers, agents
    return kids


@pytest.mark.e2e
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_interrupted_demo_stops_every_process_it_started(
    tmp_path: Path, sig: signal.Signals
) -> None:
    demo = start_demo(tmp_path, "--duration", "60")
    try:
        kids = wait_for_phase_1(demo, tmp_path)
        demo.send_signal(sig)
        _, err = demo.communicate(timeout=30)
        assert demo.returncode == 130
        assert "interrupted; stopping the cluster" in err
        assert wait_gone(kids) == []
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()


@pytest.mark.e2e
def test_a_killed_demo_takes_its_processes_with_it(tmp_path: Path) -> None:
    demo = start_demo(tmp_path, "--duration", "60")
    try:
        kids = wait_for_phase_1(demo, tmp_path)
        demo.kill()  # no cleanup code runs: the children's parent-death signal does it
        demo.wait(timeout=10)
        assert wait_gone(kids, timeout=15) == []
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
        if demo.stdout is not None:
            demo.stdout.close()
        if demo.stderr is not None:
            demo.stderr.close()


@pytest.mark.e2e
@pytest.mark.slow
def test_a_short_demo_prints_both_phases_the_plan_and_its_acks(tmp_path: Path) -> None:
    demo = start_demo(
        tmp_path, "--duration", "6", "--warmup", "2", "--json",
        "--option", "top_k=16", "--option", "context_tokens=512",
        "--profile", "llama-3.1-8b-bf16-h100",
    )  # fmt: skip
    out, err = demo.communicate(timeout=90)
    assert demo.returncode == 0, err
    doc = json.loads(out)
    flat, planned = doc["phases"]["flat"], doc["phases"]["cacheroute"]
    # phase 1 is Flat-LB only under the paper's dispatch (the default keeps keys on a ring home)
    assert doc["settings"]["router_policy"] == "cacheroute"
    assert set(flat["reasons"]) == {"no_table"}
    assert set(planned["reasons"]) <= {"warm", "tail", "fallback_unhealthy"}
    assert planned["reasons"].get("warm", 0) > 0
    assert flat["completed"] > 0 and planned["completed"] > 0
    assert flat["generations"] == [0] and planned["generations"] == [doc["plan"]["generation"]]
    assert doc["plan"]["acked_by"] == ["router-0", "router-1"]
    assert doc["plan"]["keys_admitted"] > 0
    assert doc["affinity"]["cacheroute"]["load_cov"] >= 0  # issue 31's numbers, per phase
    assert set(doc["improved"]) == {"hit_rate", "ttft_p99"}
    assert doc["timings"]["total_s"] < 60
    assert doc["logs"] == str(tmp_path / "logs")
    assert not children_of(demo.pid)


def test_the_demo_is_registered_in_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    text = capsys.readouterr().out
    for flag in ("--duration", "--json", "--keep-logs"):
        assert flag in text


def test_engine_groups_must_cover_every_engine() -> None:
    with pytest.raises(ValueError, match="must cover"):
        ClusterSpec(engines=3, engine_groups=((0,), (2,))).groups()


async def test_reset_caches_waits_until_engines_are_idle_then_empties_them(
    tmp_path: Path,
) -> None:
    spec = ClusterSpec(engines=1, routers=1, profile="llama-3.1-8b-bf16-h100")
    with LocalCluster(spec, tmp_path) as cluster:
        cluster.start()
        await patiently(cluster.wait_ready, 60, gives_up=ClusterError)
        await asyncio.wait_for(cluster.reset_caches(), 10)
        nodes = await cluster.nodes()
        assert [n.record.node_id for n in nodes] == ["sim-0"]
        assert nodes[0].record.address == cluster.engine_addresses["sim-0"]
    assert wait_gone(cluster.pids()) == []


def test_components_are_spawned_without_a_python_fork(tmp_path: Path) -> None:
    """The cause of a child dying of SIGABRT: ``Popen`` with a ``preexec_fn`` forks the launcher,
    and gRPC's fork handlers abort a child forked while gRPC threads run. A spawn without a
    Python-level fork runs no fork handlers at all (``os.register_at_fork`` would see one)."""
    forks: list[int] = []
    os.register_at_fork(before=lambda: forks.append(1))
    proc = ManagedProcess("quick", [sys.executable, "-c", "pass"], tmp_path).start()
    assert proc.wait(10)
    assert proc.process is not None and proc.process.returncode == 0
    assert forks == []


def test_a_guarded_child_dies_with_the_process_that_spawned_it(tmp_path: Path) -> None:
    """The parent-death signal survives the move from ``preexec_fn`` to the exec wrapper."""
    code = (
        "import subprocess, sys, time; from servekit.processes import guarded; "
        "p = subprocess.Popen(guarded([sys.executable, '-c', 'import time; time.sleep(60)'])); "
        "print(p.pid, flush=True); time.sleep(60)"
    )
    middle = ManagedProcess("middle", [sys.executable, "-c", code], tmp_path).start()
    try:
        deadline = time.monotonic() + 10
        while not (tmp_path / "middle.log").read_text().strip() and time.monotonic() < deadline:
            time.sleep(0.05)
        child = int((tmp_path / "middle.log").read_text().split()[0])
        assert alive(child)
        assert middle.process is not None
        middle.process.kill()  # no cleanup code runs in the middle process
        middle.wait(5)
        assert wait_gone([child]) == []
    finally:
        stop_all([middle], grace_s=1)
