"""HTTP front benchmark: direct to the engine vs a bare aiohttp pass-through vs the router's front.

    .venv/bin/python bench/bench_http_front.py [--rounds 3] [--duration 4] [--json OUT]

Processes: one simulated engine (``python -m simengine``, profile llama-3.1-8b, ``--speedup
1000`` so its simulated time is negligible and what is left is its own HTTP/Python cost), an
embedded redis-server, the router (``python -m dataplane --http-listen``, policy ``cacheroute``,
one load snapshot naming the engine), the bare pass-through (this file, ``bare``: an aiohttp app
that forwards each POST to the engine and relays the body with ``iter_any``, nothing else), and
one client process per measurement (this file, ``client``). The three targets are measured in the
same run, interleaved round by round (order rotating), and the samples of all rounds are pooled.

Each request is ``POST /v1/completions`` with ``stream: true``, ``max_tokens`` 16 and a
``prompt_cache_key`` (the front routes by it). TTFT = from sending the request to the first body
bytes (the engine's first SSE chunk); throughput = completed requests per second of a closed loop
of N concurrent streams. Reported: TTFT p50/p99 at 1 and 32 streams, the TTFT each proxy adds
over direct, and throughput, with the front's as a share of the bare pass-through's. On a shared
machine throughput swings with other processes' load, so the proxies' own CPU time per request
(user + system, from ``/proc``) is reported too: it does not depend on what else runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from cacheroute_state.embedded import EmbeddedRedis
from servekit.processes import free_port

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the http_* modules beside this script
from http_front_peers import bare, client
from http_processes import cpu_s, publish_one_engine, spawn, wait_http

ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"


def _measure(
    url: str, streams: int, duration_s: float, pids: tuple[int, ...] = ()
) -> dict[str, Any]:
    before = [cpu_s(pid) for pid in pids]
    out = subprocess.run(
        [sys.executable, __file__, "client", url, str(streams), str(duration_s)],
        cwd=ROOT,
        capture_output=True,
        check=True,
        timeout=duration_s + 60,
    )
    result: dict[str, Any] = json.loads(out.stdout)
    result["proxy_cpu_s"] = sum(cpu_s(pid) - b for pid, b in zip(pids, before, strict=True))
    return result


def orchestrate(args: argparse.Namespace) -> dict[str, Any]:
    engine_port, bare_port, front_port = free_port(), free_port(), free_port()
    engine = f"{HOST}:{engine_port}"
    procs: list[subprocess.Popen[bytes]] = []
    redis = EmbeddedRedis().start()
    try:
        procs.append(
            spawn(
                "-m",
                "simengine",
                "--listen",
                engine,
                "--profile",
                "llama-3.1-8b-bf16-h100",
                "--speedup",
                "1000",
                "--log-level",
                "warning",
            )
        )
        wait_http(f"http://{engine}/health")
        asyncio.run(publish_one_engine(redis.url, engine))
        procs.append(
            spawn(
                "-m",
                "dataplane",
                "--listen",
                f"{HOST}:0",
                "--redis-url",
                redis.url,
                "--http-listen",
                f"{HOST}:{front_port}",
                "--metrics-listen",
                "off",
                "--log-level",
                "warning",
            )
        )
        procs.append(spawn(__file__, "bare", str(bare_port), f"http://{engine}"))
        engine_pid, router_pid, bare_pid = (p.pid for p in procs)
        proxy_pids = {"direct": (), "bare": (bare_pid,), "front": (router_pid,)}
        del engine_pid
        wait_http(
            f"http://{HOST}:{front_port}/health",
            accept=lambda d: json.loads(d)["eligible_engines"].get("default") == 1,
        )
        targets = {
            "direct": f"http://{engine}/v1/completions",
            "bare": f"http://{HOST}:{bare_port}/v1/completions",
            "front": f"http://{HOST}:{front_port}/v1/completions",
        }
        for url in targets.values():  # warm-up: connections, caches, the router's memo
            _measure(url, 4, 0.5)
        pooled: dict[tuple[str, int], list[dict[str, Any]]] = {}
        names = list(targets)
        for r in range(args.rounds):
            order = names[r % 3 :] + names[: r % 3]
            for streams in (1, 32):
                for name in order:
                    result = _measure(targets[name], streams, args.duration, proxy_pids[name])
                    pooled.setdefault((name, streams), []).append(result)
                    print(
                        f"round {r + 1} {name:6s} x{streams:<2d}: {result['done']} done",
                        file=sys.stderr,
                    )
    finally:
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
        rows[f"{name}@{streams}"] = {
            "ttft_p50_ms": float(np.percentile(ttft, 50)),
            "ttft_p99_ms": float(np.percentile(ttft, 99)),
            "throughput_rps": sum(r["done"] for r in results) / sum(r["seconds"] for r in results),
            "errors": sum(r["errors"] for r in results),
            "proxy_cpu_us_per_request": 1e6
            * sum(r["proxy_cpu_s"] for r in results)
            / max(1, sum(r["done"] for r in results)),
            "samples": int(ttft.size),
        }
    added: dict[str, Any] = {}
    for streams in (1, 32):
        direct = rows[f"direct@{streams}"]
        for name in ("bare", "front"):
            row = rows[f"{name}@{streams}"]
            added[f"{name}@{streams}"] = {
                "added_p50_ms": row["ttft_p50_ms"] - direct["ttft_p50_ms"],
                "added_p99_ms": row["ttft_p99_ms"] - direct["ttft_p99_ms"],
            }
        share = (
            rows[f"front@{streams}"]["throughput_rps"] / rows[f"bare@{streams}"]["throughput_rps"]
        )
        added[f"front@{streams}"]["throughput_vs_bare"] = share
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
        client(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=4.0, help="seconds per measurement")
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args()
    result = orchestrate(args)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
