"""A one-line live progress display for a terminal (carriage return, no extra dependency)."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import TextIO

from cachectl.loadgen.results import Outcome, percentile

RECENT = 2000  # percentiles over the latest completed requests, so a long run stays cheap


class ProgressLine:
    """Renders ``label  elapsed/total  sent done in-flight  hit  p50/p99  errors`` in place."""

    def __init__(self, label: str, total_s: float, warmup_s: float, out: TextIO | None = None):
        self.label = label
        self.total_s = total_s
        self.warmup_s = warmup_s
        self.out = out or sys.stderr
        self._width = 0

    @staticmethod
    def enabled(out: TextIO | None = None) -> bool:
        stream = out or sys.stderr
        return bool(getattr(stream, "isatty", lambda: False)())

    def text(self, outcomes: Sequence[Outcome], started: float, now: float | None = None) -> str:
        elapsed = (now if now is not None else time.monotonic()) - started
        sent = sum(1 for o in outcomes if o.started > 0)
        done = [o for o in outcomes if o.completed]
        errors = sum(1 for o in outcomes if o.error is not None)
        # Hit rate and TTFT over the measured requests once there are some (as reported at the
        # end), over the warm-up's before.
        measured = [o for o in done if o.measured]
        recent = (measured or done)[-RECENT:]
        ttfts = [t for o in recent if (t := o.ttft) is not None]
        prompt = sum(o.prompt_tokens for o in recent)
        hit = sum(o.cached_tokens for o in recent) / prompt if prompt else 0.0
        phase = "warm-up" if elapsed < self.warmup_s else "measuring"
        return (
            f"{self.label} {phase} {min(elapsed, self.total_s):5.1f}/{self.total_s:.0f}s  "
            f"sent {sent}  done {len(done)}  in flight {sent - len(done) - errors}  "
            f"hit {hit:6.1%}  ttft p50 {percentile(ttfts, 50):.2f}s p99 "
            f"{percentile(ttfts, 99):.2f}s  errors {errors}"
        )

    def show(self, outcomes: Sequence[Outcome], started: float) -> None:
        line = self.text(outcomes, started)
        pad = max(0, self._width - len(line))
        self._width = len(line)
        self.out.write("\r" + line + " " * pad)
        self.out.flush()

    def finish(self, outcomes: Sequence[Outcome], started: float) -> None:
        self.show(outcomes, started)
        self.out.write("\n")
        self.out.flush()
