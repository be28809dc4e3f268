"""Capture the llama.cpp metrics fixture from the real binary: never type it by hand.

    .venv/bin/python scripts/capture_llamacpp_metrics.py

Starts the cached ``llama-server`` (``scripts/build_llamacpp.py``) with the tiny test model, sends
:data:`tests.support.llamacpp.CAPTURE_PROMPTS` (two prefixes, each asked twice), and writes its
``/metrics`` page to ``tests/data/metrics/llamacpp.txt`` and what the answers' usage said
(prompt and cached tokens, summed) to ``tests/data/metrics/llamacpp.json``. The agent's dialect
test reads the page against that truth; ``tests/agents/test_llamacpp_real.py`` checks that the
binary still exports the fixture's names and HELP texts. The hand-written page it replaced said
``prompt_tokens_total`` counted every prompt token; the binary's HELP text says processed ones.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.llamacpp import cached_binary, capture_page  # noqa: E402

HEADER = """# CacheRoute test sample: llama.cpp llama-server --metrics (llama-cpp-python 0.3.36's
# vendored llama.cpp), captured from the real binary by scripts/capture_llamacpp_metrics.py
# (do not edit): one slot, no RAM cache, four requests of two prefixes; usage in llamacpp.json.
"""


def main() -> int:
    binary = cached_binary()
    if not binary.exists():
        print(f"no llama-server at {binary}: run scripts/build_llamacpp.py", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        page, truth = capture_page(binary, Path(tmp))
    folder = ROOT / "tests" / "data" / "metrics"
    (folder / "llamacpp.txt").write_text(HEADER + page)
    (folder / "llamacpp.json").write_text(json.dumps(truth, indent=1) + "\n")
    print(f"wrote {folder / 'llamacpp.txt'}; usage: {truth}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
