#!/usr/bin/env bash
# Mutation testing of the pure cores (docs/mutation.md): mutmut over the planner, the routing
# table, the key hash and the policy helpers, each mutant run against the tests that cover it
# ([tool.mutmut] in pyproject.toml). About 8 minutes on 2 shared cores; nice'd so it can run in
# the background. Then a per-module score net of the documented equivalent mutants; exits 1 when
# a survivor is unexplained or a module is below 97 %.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
JOBS=${JOBS:-2}
"$VENV/bin/python" -m pip install --quiet -e '.[mutation]'
rm -rf mutants  # mutmut keeps results per mutant; start clean so edited tests count
nice -n "${NICE:-10}" "$VENV/bin/mutmut" run --max-children "$JOBS"
"$VENV/bin/python" scripts/mutation_report.py "$VENV/bin/mutmut"
