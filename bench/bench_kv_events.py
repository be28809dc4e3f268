"""Memory of the agents' KV-event subscriber under a steady event stream (issue 31).

    .venv/bin/python bench/bench_kv_events.py [--seconds 600] [--rate 1000] [--no-write]

A publisher in this process speaks vLLM's wire (ZMQ PUB ``[topic, seq, msgpack EventBatch]`` and
a ROUTER replay socket buffering 10,000 batches), encoded here with plain msgpack (not the
simulated engine's encoder), at ``--rate`` events a second in batches every 10 ms. Its events
model an engine's LRU prefix cache of ``--cache-blocks`` blocks (40,071: the 70B engine of
CALIBRATION.md): each event stores 4 new blocks, and once the cache is full the oldest blocks go
in ``BlockRemoved`` events, so about half the events remove. One batch in 500 is withheld from the
live socket (a gap the subscriber must replay) and one frame in 1,000 is garbage.

The subscriber (:class:`agents.kv_subscriber.KvEventSubscriber`, ``--max-blocks`` its bound) runs
in a child process that prints its resident set size every second; the baseline is the child's
RSS after start-up, before the first event, measured in the same run. With ``--flood`` the
publisher only stores (an engine the agent cannot follow, or a hostile one): the block set must
stop at ``--max-blocks`` and memory with it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

import msgspec
import zmq
import zmq.asyncio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from core_report import machine

from agents.kv_subscriber import KvEventSubscriber, SubscriberConfig, run_forever

DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
BEGIN, END = "<!-- bench_kv_events:begin -->", "<!-- bench_kv_events:end -->"
BATCH_EVERY_S = 0.01
BLOCKS_PER_EVENT = 4


def rss_kib() -> int:
    fields = Path("/proc/self/status").read_text().split("VmRSS:")[1].split()
    return int(fields[0])


async def child(endpoint: str, replay: str, max_blocks: int) -> None:
    """The subscriber under test: one JSON line a second on stdout."""
    sub = KvEventSubscriber(SubscriberConfig(endpoint, replay, max_blocks=max_blocks))
    print(json.dumps({"ready": True, "rss_kib": rss_kib()}), flush=True)
    task = asyncio.create_task(run_forever(sub))
    while not task.done():
        await asyncio.sleep(1.0)
        counts = sub.residency.counts()
        line = {
            "rss_kib": rss_kib(), "resident": counts.resident, "batches": sub.batches,
            "gaps": sub.gaps, "unrecovered": sub.gaps_unrecovered, "replayed": sub.replayed,
            "dropped": sum(sub.dropped.values()), "overflow": counts.overflow,
            "removed": counts.removed, "stored": counts.stored,
        }  # fmt: skip
        print(json.dumps(line), flush=True)


class Publisher:
    def __init__(self, cache_blocks: int, flood: bool) -> None:
        ctx = zmq.asyncio.Context.instance()
        self.pub = ctx.socket(zmq.PUB)
        self.pub.bind("tcp://127.0.0.1:*")
        self.router = ctx.socket(zmq.ROUTER)
        self.router.bind("tcp://127.0.0.1:*")
        self.buffer: deque[tuple[int, bytes]] = deque(maxlen=10_000)
        self.cache: deque[int] = deque()
        self.cache_blocks, self.flood = cache_blocks, flood
        self.next_block, self.seq, self.events = 1, 0, 0

    def endpoint(self, sock: zmq.asyncio.Socket) -> str:
        value = sock.getsockopt(zmq.LAST_ENDPOINT)
        assert isinstance(value, bytes)
        return value.decode()

    def make_events(self, n: int) -> list[list[object]]:
        events: list[list[object]] = []
        while len(events) < n:
            over = len(self.cache) - self.cache_blocks
            if over > 0 and not self.flood:
                gone = [self.cache.popleft() for _ in range(min(over, BLOCKS_PER_EVENT))]
                events.append(["BlockRemoved", gone, None])
                continue
            new = list(range(self.next_block, self.next_block + BLOCKS_PER_EVENT))
            self.next_block += BLOCKS_PER_EVENT
            if not self.flood:
                self.cache.extend(new)
            events.append(["BlockStored", new, new[0] - 1, [], 16, None, None])
        self.events += n
        return events

    async def send(self, n: int) -> None:
        payload = msgspec.msgpack.encode([time.time(), self.make_events(n)])
        seq = self.seq
        self.seq += 1
        self.buffer.append((seq, payload))
        if seq % 1000 == 999:
            await self.pub.send_multipart([b"", seq.to_bytes(8, "big"), b"\xc1garbage"])
        elif seq % 500 != 250:  # withheld: the subscriber sees a gap and replays it
            await self.pub.send_multipart([b"", seq.to_bytes(8, "big"), payload])

    async def serve_replay(self) -> None:
        while True:
            client, _, start = await self.router.recv_multipart()
            first = int.from_bytes(start, "big")
            for seq, payload in list(self.buffer):
                if seq >= first:
                    await self.router.send_multipart([client, b"", seq.to_bytes(8, "big"), payload])
            await self.router.send_multipart(
                [client, b"", (-1).to_bytes(8, "big", signed=True), b""]
            )


async def run(seconds: float, rate: int, cache_blocks: int, max_blocks: int, flood: bool) -> dict:
    pub = Publisher(cache_blocks, flood)
    replay_task = asyncio.create_task(pub.serve_replay())
    proc = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--child", pub.endpoint(pub.pub), pub.endpoint(pub.router),
        str(max_blocks), stdout=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    lines: list[dict] = []
    baseline = json.loads(await proc.stdout.readline())["rss_kib"]  # the first line
    await asyncio.sleep(0.5)  # the SUB socket joins

    async def read() -> None:
        assert proc.stdout is not None
        async for raw in proc.stdout:
            if raw.startswith(b"{"):  # the subscriber's own log lines go to stdout too
                lines.append(json.loads(raw))  # noqa: PERF401 - read as they come

    reader = asyncio.create_task(read())
    started = time.monotonic()
    sent_events = 0
    while (now := time.monotonic()) - started < seconds:
        due = int((now - started) * rate)
        if due > sent_events:
            await pub.send(due - sent_events)
            sent_events = due
        await asyncio.sleep(BATCH_EVERY_S)
    elapsed = time.monotonic() - started
    await asyncio.sleep(2.0)  # the last batches arrive and one more line is printed
    proc.terminate()
    await proc.wait()
    reader.cancel()
    replay_task.cancel()
    rss = [line["rss_kib"] for line in lines]
    half = rss[len(rss) // 2 :]
    return {
        "seconds": elapsed, "events": sent_events, "rate": sent_events / elapsed,
        "batches": pub.seq, "baseline_kib": baseline, "max_kib": max(rss), "end_kib": rss[-1],
        "second_half_min_kib": min(half), "second_half_max_kib": max(half), "last": lines[-1],
        "flood": flood, "max_blocks": max_blocks, "cache_blocks": cache_blocks,
    }  # fmt: skip


def render(command: str, results: list[dict]) -> str:
    info = machine()
    rows = []
    for r in results:
        last = r["last"]
        mode = "stores only (flood)" if r["flood"] else f"LRU cache of {r['cache_blocks']:,} blocks"
        rows.append(
            f"| {mode} | {r['seconds']:.0f} s, {r['rate']:,.0f} events/s, {r['batches']:,} "
            f"batches | {r['baseline_kib'] / 1024:.1f} | {r['max_kib'] / 1024:.1f} | "
            f"{r['second_half_min_kib'] / 1024:.1f}-{r['second_half_max_kib'] / 1024:.1f} | "
            f"{last['resident']:,} (bound {r['max_blocks']:,}; {last['overflow']:,} over) | "
            f"{last['gaps']} / {last['unrecovered']} / {last['replayed']} | {last['dropped']} |"
        )
    return (
        "\n".join(
            [
                BEGIN,
                "## KV-event subscriber memory (`bench/bench_kv_events.py`, issue 31)",
                "",
                f"Command: `{command}`  ",
                f"Machine: {info['cpu']}, {info['cores']} cores, Python {info['python']}, "
                f"{info['date']}; load average at the end {info['load']}",
                "",
                "The agents' subscriber in a child process against a publisher of vLLM's "
                "wire (encoded in the bench), one batch every 10 ms; 1 batch in 500 withheld "
                "from the live socket (replayed), 1 frame in 1,000 garbage. RSS of the child in "
                "MiB; the baseline is its RSS after start-up, before the first event, in the "
                "same run.",
                "",
                "| publisher | run | baseline RSS | max RSS | RSS over the second half | resident "
                "blocks at the end | gaps / unrecovered / replayed batches | frames dropped |",
                "|---|---|---|---|---|---|---|---|",
                *rows,
                "",
                "Bounded means the second half of the run stays flat: the block set follows the "
                "engine's cache (or stops at its bound) and nothing else grows with the events.",
                END,
            ]
        )
        + "\n"
    )


def update_doc(section: str) -> None:
    text = DOC.read_text()
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + section + "\n" + rest.split(END, 1)[1].lstrip("\n")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    DOC.write_text(text)


def main() -> int:
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        asyncio.run(child(sys.argv[2], sys.argv[3], int(sys.argv[4])))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--rate", type=int, default=1000, help="events a second")
    parser.add_argument("--cache-blocks", type=int, default=40_071)
    parser.add_argument("--max-blocks", type=int, default=1 << 20)
    parser.add_argument("--flood-max-blocks", type=int, default=100_000)
    parser.add_argument("--no-flood", action="store_true", help="only the LRU publisher")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    results = [asyncio.run(run(args.seconds, args.rate, args.cache_blocks, args.max_blocks, False))]
    if not args.no_flood:
        flood = run(args.seconds, args.rate, args.cache_blocks, args.flood_max_blocks, True)
        results.append(asyncio.run(flood))
    for r in results:
        print(json.dumps(r))
    if not args.no_write:
        command = "python bench/bench_kv_events.py " + " ".join(sys.argv[1:])
        update_doc(render(command.strip(), results))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
