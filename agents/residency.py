"""What one engine holds in its GPU prefix cache, as its KV events say: a bounded set of blocks.

The set is what lets the agent answer "is this block resident?"; the counters (blocks stored,
removed, clears) are what the report's rates come from. Memory is bounded by ``max_blocks``: past
it a stored block is not tracked (counted in ``overflow``), so a flood of events or an engine
larger than the bound costs a miscounted tail, never the agent's memory. The default bound
(1,048,576 blocks, ≈ 16M tokens at 16 tokens a block) is far above one engine's cache (a 70B model
on 2x H100 holds ≈ 40K blocks, ``../shared/docs/CALIBRATION.md``).
"""

from __future__ import annotations

from dataclasses import dataclass

from agents.kv_wire import Cleared, Event, Removed, Stored

DEFAULT_MAX_BLOCKS = 1 << 20


@dataclass(frozen=True, slots=True)
class ResidencyCounts:
    """Counters since the agent started (they only grow; ``resident`` is a level)."""

    resident: int
    stored: int
    removed: int
    cleared: int
    overflow: int


class Residency:
    """The resident block set of one engine (module docstring)."""

    __slots__ = ("_blocks", "cleared", "max_blocks", "overflow", "removed", "stored")

    def __init__(self, max_blocks: int = DEFAULT_MAX_BLOCKS) -> None:
        if max_blocks <= 0:
            raise ValueError(f"max_blocks must be > 0, got {max_blocks}")
        self.max_blocks = max_blocks
        self._blocks: set[int] = set()
        self.stored = 0
        self.removed = 0
        self.cleared = 0
        self.overflow = 0

    def __contains__(self, block: int) -> bool:
        return block in self._blocks

    def __len__(self) -> int:
        return len(self._blocks)

    def apply(self, events: tuple[Event, ...]) -> None:
        """Fold one batch's events in order."""
        blocks = self._blocks
        for event in events:
            if isinstance(event, Stored):
                self.stored += len(event.hashes)
                for block in event.hashes:
                    if block in blocks:
                        continue
                    if len(blocks) >= self.max_blocks:
                        self.overflow += 1
                    else:
                        blocks.add(block)
            elif isinstance(event, Removed):
                self.removed += len(event.hashes)
                blocks.difference_update(event.hashes)
            elif isinstance(event, Cleared):
                self.clear()
                blocks = self._blocks

    def clear(self) -> None:
        """Forget every block (``AllBlocksCleared``, or the publisher restarted)."""
        self.cleared += 1
        self._blocks = set()  # a new set: a huge one's table is given back, not kept empty

    def resident_run(self, blocks: tuple[int, ...]) -> int:
        """How many of ``blocks`` (a prefix, oldest first) are resident from the start."""
        held = self._blocks
        run = 0
        for block in blocks:
            if block not in held:
                break
            run += 1
        return run

    def counts(self) -> ResidencyCounts:
        return ResidencyCounts(
            len(self._blocks), self.stored, self.removed, self.cleared, self.overflow
        )
