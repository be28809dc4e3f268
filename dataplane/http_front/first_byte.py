"""A first-byte timeout that follows each engine's observed time to first byte, bounded.

A hung engine held its requests for the full ``--http-first-byte-timeout`` (120 s) before the
front gave up and retried. Now each (engine, streaming or not) keeps its last
:data:`WINDOW` times from sending the request to the answer's headers (for a stream that is the
TTFT; for a non-streamed answer the whole generation, hence the separate keys), and a new attempt
waits at most ``FACTOR x`` the slowest of them, never less than ``floor_s`` and never more than
``cap_s`` (the configured timeout). Until :data:`MIN_SAMPLES` answers were seen the cap applies.
"""

from __future__ import annotations

from collections import deque

WINDOW = 32
MIN_SAMPLES = 8
FACTOR = 4.0
MAX_ENGINES = 4096


class FirstByteTimeouts:
    def __init__(self, floor_s: float, cap_s: float) -> None:
        self.floor_s = min(floor_s, cap_s)
        self.cap_s = cap_s
        self._seen: dict[tuple[str, bool], deque[float]] = {}

    def timeout_for(self, node_id: str, stream: bool) -> float:
        seen = self._seen.get((node_id, stream))
        if seen is None or len(seen) < MIN_SAMPLES:
            return self.cap_s
        return max(self.floor_s, min(self.cap_s, FACTOR * max(seen)))

    def observe(self, node_id: str, stream: bool, seconds: float) -> None:
        key = (node_id, stream)
        seen = self._seen.get(key)
        if seen is None:
            if len(self._seen) >= MAX_ENGINES:
                self._seen.clear()
            seen = self._seen[key] = deque(maxlen=WINDOW)
        seen.append(seconds)
