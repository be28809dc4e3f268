"""The request record every workload produces and the simulator consumes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

BLOCK_TOKENS = 16


@dataclass(frozen=True, slots=True)
class SimRequest:
    """One request of a workload, in arrival order.

    ``blocks`` are the chained hashes of the prompt's 16-token blocks (a trailing partial block
    counts), so ``len(blocks) == ceil(prompt_tokens / 16)`` and two requests share a cached
    prefix exactly as far as their leading blocks are equal.

    ``output_blocks`` are the ids of the *full* 16-token blocks of prompt + output past the
    prompt's full blocks, chained like ``blocks``: the blocks an engine that caches generated
    tokens (vLLM V1, SGLang) holds once the request finishes, and that a later turn whose prompt
    contains this answer finds. Empty when the workload does not model them (traces).
    """

    arrival_s: float
    key: str
    key_hash: int
    blocks: tuple[int, ...]
    prompt_tokens: int
    output_tokens: int
    thread: int = -1
    output_blocks: tuple[int, ...] = ()
    turn: int = -1  # 0-based turn within the thread, -1 when the workload does not say

    def at(self, arrival_s: float) -> SimRequest:
        """This request arriving at ``arrival_s``: ``dataclasses.replace`` at a third of its
        cost, which a replay pays per request each time it rescales or shifts a stream."""
        return SimRequest(
            arrival_s, self.key, self.key_hash, self.blocks, self.prompt_tokens,
            self.output_tokens, self.thread, self.output_blocks, self.turn,
        )  # fmt: skip


class Workload(Protocol):
    """A request stream generator (synthetic or a trace replay)."""

    name: str

    def requests(self, *, qps: float, duration_s: float, seed: int) -> list[SimRequest]:
        """Requests arriving in [0, duration_s) at a mean of ``qps`` per second, by arrival."""
        ...
