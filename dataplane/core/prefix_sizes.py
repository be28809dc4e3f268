"""Per-key reusable-prefix sizes from sampled requests, for byte-aware admission.

A key's reusable prefix is what its requests share at the front (a system prompt, a document):
what a warm cache keeps for it. The router estimates it from the chained prefix-block hashes it
already sees (``RouteRequest.prefix_blocks`` or the blocks of ``prompt_prefix``): every
:data:`SAMPLE_EVERY`-th counted request of a pool is compared with the key's previous sampled
request, and the number of leading blocks they share is added to the key's window sum. Blocks
the policy already computed, or the caller sent, cost nothing to read; a request that only has a
prompt (the HTTP front's) must be hashed (~60 µs for 4 KiB), so only every
:data:`PROMPT_EVERY`-th due sample of those is taken (about 0.25 µs a request, amortised).

Chained hashes make the comparison cheap: block i's hash covers blocks 0..i, so two requests
share their first n blocks exactly when their n-th hashes are equal. A request is kept as a
*signature*, its hashes at the positions of :data:`LADDER` (every block up to 16, then eight
steps per octave up to ``MAX_PREFIX_BLOCKS``: 65 positions, 520 bytes in an ``array``), and
the shared length is the last ladder position where both agree: a lower bound of the true one,
exact up to 16 blocks and within 1/8 past that. Requests with no prefix at all are not samples
(unknown, not zero). Memory is bounded: at most ``limit`` keys hold a signature; past it new keys
wait until the window closes, when only the keys the window's summary monitors are kept.
"""

from __future__ import annotations

from array import array
from collections.abc import Collection, Sequence

from dataplane.core.route_input import RouteInput

SAMPLE_EVERY = 32  # a power of two: counted requests per size sample (TrafficCounter.add)
PROMPT_EVERY = 8  # a power of two: due samples per one that hashes a prompt
_PROMPT_MASK = PROMPT_EVERY - 1


def _ladder(limit: int) -> tuple[int, ...]:
    positions = list(range(1, 17))
    p = 16
    while p < limit:
        step = p // 8
        positions.extend(range(p + step, 2 * p + 1, step))
        p *= 2
    return tuple(x for x in positions if x <= limit)


LADDER = _ladder(1024)  # route_input.MAX_PREFIX_BLOCKS (core modules import no siblings' limits)


def signature(blocks: Sequence[int]) -> array[int]:
    """The request's block hashes at the ladder positions it reaches."""
    n = len(blocks)
    return array("Q", [blocks[p - 1] for p in LADDER if p <= n])


def shared_blocks(a: array[int], b: array[int]) -> int:
    """Leading blocks two signatures share (the last ladder position where both agree)."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return LADDER[n - 1] if n else 0


class PrefixSizes:
    """Signatures of each key's last sampled request plus the window's (sum, samples)."""

    __slots__ = ("_prompt_turn", "_refs", "_samples", "_sums", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._prompt_turn = 0
        self._refs: dict[int, array[int]] = {}
        self._sums: dict[int, int] = {}
        self._samples: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._refs)

    def sample(self, inp: RouteInput, computed: Sequence[int] | None) -> None:
        """A due sample: ``computed`` is the blocks the policy already has (None: it has none)."""
        if computed is None:
            if not inp.message.prefix_blocks:
                turn = self._prompt_turn = self._prompt_turn + 1
                if turn & _PROMPT_MASK:
                    return
            computed = inp.blocks()
        self.observe(inp.key_hash, computed)

    def observe(self, key_hash: int, blocks: Sequence[int]) -> None:
        """One sampled request of the key (its chained prefix-block hashes, oldest first)."""
        if not blocks:
            return
        refs = self._refs
        previous = refs.get(key_hash)
        if previous is None and len(refs) >= self.limit:
            return
        current = signature(blocks)
        refs[key_hash] = current
        if previous is None:
            return
        self._sums[key_hash] = self._sums.get(key_hash, 0) + shared_blocks(previous, current)
        self._samples[key_hash] = self._samples.get(key_hash, 0) + 1

    def take(self, monitored: Collection[int]) -> dict[int, tuple[int, int]]:
        """The window's ``key → (sum of shared blocks, comparisons)``; the sums start over.

        Signatures carry over into the next window (a key's next request is compared with its
        last one of this window), but when more than half the limit is in use only those of
        ``monitored`` keys (the window's heavy hitters) are kept.
        """
        sums, samples = self._sums, self._samples
        taken = {key: (total, samples[key]) for key, total in sums.items()}
        self._sums, self._samples = {}, {}
        if len(self._refs) > self.limit // 2:
            refs = self._refs
            self._refs = {key: refs[key] for key in monitored if key in refs}
        return taken
