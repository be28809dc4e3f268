"""scripts/perf_census.py sorts a system-wide perf profile's samples into busy time per process,
the cyclic GC's share and the page faults' share (issue 34's census)."""

from __future__ import annotations

import subprocess
import sys

from tests.support.scripts import ROOT

# Four samples at 2 Hz as ``perf script -F comm,pid,ip,sym`` prints them: idle, a worker in the
# collector, a worker faulting a page in from numpy, a server in the interpreter.
PERF_SCRIPT = """\
swapper     0
\tffffffff8224215b pv_native_safe_halt

python   100
\t5a1 visit_decref
\t5a2 gc_collect_main
\t5a3 _PyEval_EvalFrameDefault

python   100
\tffffffff81 clear_page_erms
\tffffffff82 asm_exc_page_fault
\t7f1 mapiter_trivial_get

python   200
\t5a3 _PyEval_EvalFrameDefault
"""


def test_the_census_splits_busy_time_into_the_collector_and_page_faults() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "perf_census.py"), "--hz", "2", "--top", "1"],
        input=PERF_SCRIPT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["busy", "1.5", "s"]  # idle not counted
    assert "largest Python       1.0 s  (cyclic GC 0.5 s, page faults 0.5 s)" in lines
    assert "other Python         0.5 s  (cyclic GC 0.0 s, page faults 0.0 s)" in lines
    assert "      0.5 s  python: visit_decref" in lines
