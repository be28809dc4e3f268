"""The simulator's prefix KV cache, A/B: this tree's cache against a file's ``PrefixCache``.

This tree's is the C build (``sim._prefix_cache``) by default, or its Python reference with
``--tree python``. Replays the low-sharing shadow gate of
``tests/controlplane/lifecycle/test_shadow_replay.py``
(``gate("lowshare", 24, SECONDS)``: most of the cache pinned, so eviction is the hot path) once
per round with each class patched into the simulator, alternating, each run in a fresh process
(runs in one process slow each other down), and prints the CPU seconds
(``time.process_time``: the machine is shared) and a digest of the gate's report, which must be
the same for both. Asserts nothing.

    git show REV:sim/kvcache.py > /tmp/kvcache_base.py
    .venv/bin/python bench/bench_kvcache_ab.py /tmp/kvcache_base.py [--seconds 120] [--rounds 2]
    .venv/bin/python bench/bench_kvcache_ab.py sim/kvcache.py --tree c     # reference vs C
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import sim.cache_impl
import sim.kvcache

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the test's own gate, from the repository's tests/
from tests.controlplane.lifecycle.test_shadow_replay import gate  # noqa: E402


def cache_class(path: Path) -> type[sim.cache_impl.BlockCache]:
    spec = importlib.util.spec_from_file_location("kvcache_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    found: type[sim.cache_impl.BlockCache] = module.PrefixCache
    return found


def tree_class(name: str) -> type[sim.cache_impl.BlockCache]:
    if name == "python":
        return sim.kvcache.PrefixCache
    native = sim.cache_impl.native_class()
    if native is None:
        raise SystemExit("the C cache is not built: .venv/bin/python scripts/build_sim_native.py")
    return native


def timed_gate(cache: type[sim.cache_impl.BlockCache], seconds: float) -> tuple[float, str]:
    """CPU seconds and report digest of the lowshare gate with ``cache`` in the simulator."""
    sim.cache_impl.cache_class = lambda: cache  # where the simulator's nodes get their class
    started = time.process_time()
    document = gate("lowshare", 24.0, seconds)
    spent = time.process_time() - started
    text = json.dumps(document, sort_keys=True, default=str)
    return spent, hashlib.sha256(text.encode()).hexdigest()[:12]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", type=Path, help="a kvcache.py to compare this tree's against")
    parser.add_argument("--seconds", type=float, default=120.0, help="replayed seconds (120)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tree", choices=("c", "python"), default="c",
                        help="this tree's C build (default) or its Python reference")  # fmt: skip
    parser.add_argument("--one", choices=("base", "tree"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:  # a child: one run, one line
        cache = cache_class(args.base) if args.one == "base" else tree_class(args.tree)
        spent, digest = timed_gate(cache, args.seconds)
        print(f"{spent:.2f} {digest}")
        return 0
    print(f"{'round':>5}  {'cache':<5}  {'CPU s':>7}  digest")
    for round_ in range(1, args.rounds + 1):
        for name in ("base", "tree"):
            command = [sys.executable, __file__, str(args.base), "--seconds", str(args.seconds),
                       "--tree", args.tree, "--one", name]  # fmt: skip
            line = subprocess.run(command, check=True, capture_output=True, text=True).stdout
            cpu, digest = line.split()
            print(f"{round_:>5}  {name:<5}  {float(cpu):7.2f}  {digest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
