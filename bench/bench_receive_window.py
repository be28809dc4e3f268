"""One gRPC stream's upload speed over loopback under each receive-window setting (issue 34).

The router's ports keep a fixed receive window per stream instead of gRPC's bandwidth probe
(``servekit/grpc_hygiene.py``: the probe let gRPC core buffer unread picker body chunks). This
measures what a fixed window costs a single large upload: a client streams 1,000 messages of
62,000 bytes (Envoy's body chunk size) to a server that counts them, with the server built from
:func:`servekit.grpc_hygiene.grpc_options`. Each setting runs in a fresh process, alternating,
``--rounds`` times; each process times ``--reps`` uploads after one warm-up and prints MB/s.
Asserts nothing.

    .venv/bin/python bench/bench_receive_window.py [--rounds 2] [--reps 4]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc

from servekit.grpc_hygiene import FIXED_RECEIVE_WINDOW, ConnectionHygiene, grpc_options

CHUNK = b"x" * 62_000
MESSAGES = 1_000
SETTINGS = {
    "probe (gRPC default, the control plane)": 0,
    "fixed 64 KiB": 64 * 1024,
    f"fixed {FIXED_RECEIVE_WINDOW // 1024} KiB (the router's ports)": FIXED_RECEIVE_WINDOW,
}


async def measure(window: int, reps: int) -> list[float]:
    async def count(requests: AsyncIterator[bytes], _context: Any) -> bytes:
        total = 0
        async for chunk in requests:
            total += len(chunk)
        return total.to_bytes(8, "big")

    options = grpc_options(ConnectionHygiene(receive_window_bytes=window))
    server = grpc.aio.server(options=[*options, ("grpc.max_receive_message_length", 1 << 20)])
    handler: Any = grpc.stream_unary_rpc_method_handler(count)
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("b.B", {"Up": handler})])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    rates = []
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        upload: Any = channel.stream_unary("/b.B/Up")

        async def chunks() -> AsyncIterator[bytes]:
            for _ in range(MESSAGES):
                yield CHUNK

        for rep in range(reps + 1):
            started = time.perf_counter()
            await upload(chunks())
            if rep:  # the first is a warm-up
                rates.append(len(CHUNK) * MESSAGES / 1e6 / (time.perf_counter() - started))
    await server.stop(None)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--reps", type=int, default=4)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(asyncio.run(measure(args.child, args.reps))))
        return
    results: dict[str, list[float]] = {name: [] for name in SETTINGS}
    for _ in range(args.rounds):
        for name, window in SETTINGS.items():
            command = [sys.executable, __file__, "--child", str(window), "--reps", str(args.reps)]
            done = subprocess.run(command, capture_output=True, text=True, check=True)
            results[name] += json.loads(done.stdout)
    print(f"{'setting':<44} {'MB/s (each upload of 62 MB)':<40} median")
    for name, rates in results.items():
        shown = " ".join(f"{r:.0f}" for r in rates)
        print(f"{name:<44} {shown:<40} {sorted(rates)[len(rates) // 2]:.0f}")


if __name__ == "__main__":
    main()
