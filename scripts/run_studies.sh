#!/usr/bin/env bash
# The studies of docs/results.md §4 (issue 13 §5-6), one per name, on the machine's spare CPU.
#
#   scripts/run_studies.sh OUTDIR STUDY...      e.g. scripts/run_studies.sh /tmp/studies lowshare
#
# Each study writes OUTDIR/STUDY.json (the results document), .txt (the table), .err (progress)
# and, where it says so, .png. Seeds 2,3,4 (Table 1 alone has the paper's 2-6); ladders, SLOs and
# reference loads are the presets' (sim/presets.py) unless a study names them. JOBS (default 1)
# worker processes under `nice -n 10`, since the machine is shared.
set -euo pipefail
out=${1:?usage: run_studies.sh OUTDIR STUDY...}
shift
mkdir -p "$out"
jobs=${JOBS:-1}
py=${PY:-.venv/bin/python}
testbed=(--workload paper --profile paper-testbed)
key=flat,chwbl,preble,sglang,cacheroute  # the reduced set where seven do not fit the machine
# Many routers: the paper ladder without 120 and 300, which decide none of these policies' knees
# at one router (Table 1's 1-router column is re-read on the same rungs: study_tables --rungs).
router_ladder=30,60,80,100,140,160,180,220

run() {  # run NAME ARGS...: one `cachectl sim` study, timed
  local name=$1
  shift
  local started=$SECONDS
  nice -n 10 "$py" -m cachectl sim "$@" --jobs "$jobs" --out "$out/$name.json" \
    >"$out/$name.txt" 2>"$out/$name.err"
  echo "$name: $((SECONDS - started)) s wall" | tee -a "$out/walltimes.txt"
}

for study in "$@"; do
  case $study in
    lowshare)  # Qwen3-32B low sharing, the seven policies on the preset ladder
      run lowshare capacity --workload lowshare --seeds 2,3,4 --plot "$out/lowshare.png" ;;
    routers4 | routers16)  # many routers: Table 1's setting with N routers
      run "$study" capacity "${testbed[@]}" --routers "${study#routers}" --seeds 2,3,4 \
        --policies "$key" --ladder "$router_ladder" ;;
    whales)  # the 8B mechanism ablation on the preset ladder 30…500
      run whales ablation --workload whales --seeds 2,3,4 --plot "$out/whales.png" ;;
    whales6)  # the same on six of its rungs (what fitted the shared machine this round)
      run whales6 ablation --workload whales --seeds 2,3,4 --ladder 60,100,200,300,400,500 \
        --plot "$out/whales6.png" ;;
    topk256)
      run topk256 capacity "${testbed[@]}" --top-k 256 --seeds 2,3,4 ;;
    gamma)
      run gamma capacity "${testbed[@]}" --option arrival=gamma --option cv=1.9 --seeds 2,3,4 \
        --policies "$key" ;;
    ragrequest)  # the other RAG scope Flat-LB cannot tell apart (docs/results.md §2)
      run ragrequest capacity "${testbed[@]}" --option rag_scope=request --seeds 2,3,4 \
        --policies flat,preble,sglang,cacheroute ;;
    public)  # the public H100 profile to its knee: Table 1's layout (seven policies, seeds 2-6)
      run public capacity --workload paper --profile llama-3.3-70b-fp8-tp2-h100 --seeds 2,3,4,5,6 \
        --plot "$out/public.png" ;;
    online)  # issue 22, held-out seeds 4-6 (docs/results.md §5; the public and synced cells
      # ran one process per cell with scripts/run_cells.py on the shared machine)
      run table1_online capacity "${testbed[@]}" --seeds 4,5,6 --policies cacheroute_online \
        --ladder 100,140,160,180,220 --ref-qps 100
      run topk256_online capacity "${testbed[@]}" --top-k 256 --seeds 4,5,6 \
        --policies cacheroute_online --ladder 100,140,160 --ref-qps 100
      run routers16_online capacity "${testbed[@]}" --routers 16 --seeds 4,5,6 \
        --policies cacheroute_online --ladder 140,160 --ref-qps 140
      run routers16_sglang_key capacity "${testbed[@]}" --routers 16 --front key --seeds 4,5,6 \
        --policies sglang --ladder 100,140 --ref-qps 100 ;;
    *) echo "unknown study $study" >&2; exit 2 ;;
  esac
done
