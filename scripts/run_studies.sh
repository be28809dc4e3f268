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
    issue30-*)  # issue 30: the new default on the HELD-OUT seeds 4-6, clients not echoing
      # tokens (frozen at the FREEZE commit before any of these ran); smg is the 2026 baseline
      q=(--no-session-echo --seeds 4,5,6)
      case ${study#issue30-} in
        table1) run issue30_table1 capacity "${testbed[@]}" --q-cap 3.0546875 "${q[@]}" \
          --policies cacheroute_conversation --ladder 100,140,160,180 --ref-qps 100 ;;
        table1_smg) run issue30_table1_smg capacity "${testbed[@]}" --q-cap 3.0546875 "${q[@]}" \
          --policies smg,smg_events --ladder 100,140,160,180 --ref-qps 100 ;;
        public) run issue30_public capacity --workload paper --profile llama-3.3-70b-fp8-tp2-h100 \
          --q-cap 20.25 "${q[@]}" --policies cacheroute_conversation,smg --ladder 800,900,1000 \
          --ref-qps 800 ;;
        topk256) run issue30_topk256 capacity "${testbed[@]}" --top-k 256 --q-cap 2.671875 \
          "${q[@]}" --policies cacheroute_conversation,smg --ladder 100,140,160 --ref-qps 100 ;;
        gamma) run issue30_gamma capacity "${testbed[@]}" --option arrival=gamma --option cv=1.9 \
          --q-cap 2.0 "${q[@]}" --policies cacheroute_conversation,smg --ladder 100,140,160 \
          --ref-qps 100 ;;
        routers16) run issue30_routers16 capacity "${testbed[@]}" --routers 16 --q-cap 3.0546875 \
          "${q[@]}" --policies cacheroute_conversation,smg --ladder 140,160 --ref-qps 140 ;;
        *) echo "unknown study $study" >&2; exit 2 ;;
      esac ;;
    balanced-*)  # issue 30, second round: cacheroute_balanced on the HELD-OUT seeds 4-6, clients
      # not echoing tokens (first_epsilon frozen on seeds 2-3 before any of these ran); the
      # other policies' numbers are the stored issue30-* and earlier runs on the same seeds
      q=(--no-session-echo --seeds 4,5,6 --policies cacheroute_balanced)
      case ${study#balanced-} in
        table1) run balanced_table1 capacity "${testbed[@]}" --q-cap 3.0546875 "${q[@]}" \
          --ladder 100,140,160,180 --ref-qps 100 ;;
        public) run balanced_public capacity --workload paper --profile llama-3.3-70b-fp8-tp2-h100 \
          --q-cap 20.25 "${q[@]}" --ladder 800,900,1000 --ref-qps 800 ;;
        topk256) run balanced_topk256 capacity "${testbed[@]}" --top-k 256 --q-cap 2.671875 \
          "${q[@]}" --ladder 100,140,160 --ref-qps 100 ;;
        gamma) run balanced_gamma capacity "${testbed[@]}" --option arrival=gamma --option cv=1.9 \
          --q-cap 2.0 "${q[@]}" --ladder 100,140,160 --ref-qps 100 ;;
        routers16) run balanced_routers16 capacity "${testbed[@]}" --routers 16 --q-cap 3.0546875 \
          "${q[@]}" --ladder 120,140,150,160 --ref-qps 140 ;;
        echo) run balanced_echo capacity "${testbed[@]}" --q-cap 3.0546875 --seeds 4,5,6 \
          --policies cacheroute_balanced --ladder 100,140,160,180 --ref-qps 100 ;;
        routers4) run balanced_routers4 capacity "${testbed[@]}" --routers 4 --q-cap 3.0546875 \
          "${q[@]}" --ladder 80,100,140,160,180 --ref-qps 100 ;;
        whales) run balanced_whales capacity --workload whales --q-cap 23.75 --seeds 2,3,4 \
          --no-session-echo --policies cacheroute_balanced ;;  # the seeds online5-whales ran
        public950)  # a rung between the public ladder's 900 and 1,000, for the default and smg
          run balanced_public950 capacity --workload paper --profile llama-3.3-70b-fp8-tp2-h100 \
            --q-cap 20.25 --no-session-echo --seeds 4,5,6 --policies cacheroute_balanced,smg \
            --ladder 950 --ref-qps 950 ;;
        *) echo "unknown study $study" >&2; exit 2 ;;
      esac ;;
    fresh-*)  # issue 30, last round: seeds 7-9, run for no decision. cacheroute_balanced's
      # opening-turn rule was changed after its first held-out run (seeds 4-6, 16 routers), so
      # 4-6 informed it; these seeds were never run before, for it and the strongest others alike
      p=(--no-session-echo --seeds 7,8,9)
      r16=("${testbed[@]}" --routers 16 --q-cap 3.0546875 "${p[@]}" --ladder 120,140,150,160 \
        --ref-qps 140)
      case ${study#fresh-} in
        table1) run fresh_table1 capacity "${testbed[@]}" --q-cap 3.0546875 "${p[@]}" \
          --policies sglang,smg,smg_events,cacheroute,cacheroute_conversation,cacheroute_balanced \
          --ladder 100,140,160,180 --ref-qps 100 ;;
        public) run fresh_public capacity --workload paper --profile llama-3.3-70b-fp8-tp2-h100 \
          --q-cap 20.25 "${p[@]}" --policies chwbl,preble,sglang,smg,cacheroute,cacheroute_balanced \
          --ladder 800,900,1000 --ref-qps 800 ;;
        topk256) run fresh_topk256 capacity "${testbed[@]}" --top-k 256 --q-cap 2.671875 \
          "${p[@]}" --policies sglang,smg,cacheroute,cacheroute_balanced --ladder 100,140,160 \
          --ref-qps 100 ;;
        gamma) run fresh_gamma capacity "${testbed[@]}" --option arrival=gamma --option cv=1.9 \
          --q-cap 2.0 "${p[@]}" --policies sglang,smg,cacheroute,cacheroute_balanced \
          --ladder 100,140,160 --ref-qps 100 ;;
        routers16) run fresh_routers16 capacity "${r16[@]}" \
          --policies cacheroute,cacheroute_conversation,cacheroute_balanced,smg ;;
        routers16_sglang) run fresh_routers16_sglang capacity "${r16[@]}" --front session \
          --policies sglang ;;
        *) echo "unknown study $study" >&2; exit 2 ;;
      esac ;;
    online5-*)  # issue 22, this round: every at-a-glance row on the paper's five seeds (2-3 tuned
      # the frozen parameters, 4-6 held out), with q_cap as each row's study measured it
      case ${study#online5-} in
        table1) run online5_table1 capacity "${testbed[@]}" --q-cap 3.0546875 --seeds 2,3,4,5,6 \
          --policies cacheroute_online ;;
        echo_off) run online5_echo_off capacity "${testbed[@]}" --q-cap 3.0546875 --seeds 2,3,4,5,6 \
          --policies cacheroute_online --no-session-echo --ladder 100,140,160,180,220 ;;
        topk256) run online5_topk256 capacity "${testbed[@]}" --top-k 256 --q-cap 2.671875 \
          --seeds 2,3,4,5,6 --policies cacheroute_online ;;
        topk256_base) run online5_topk256_base capacity "${testbed[@]}" --top-k 256 \
          --q-cap 2.671875 --seeds 5,6 ;;
        gamma) run online5_gamma capacity "${testbed[@]}" --option arrival=gamma --option cv=1.9 \
          --q-cap 2.0 --seeds 2,3,4,5,6 --policies cacheroute_online ;;
        gamma_base) run online5_gamma_base capacity "${testbed[@]}" --option arrival=gamma \
          --option cv=1.9 --q-cap 2.0 --seeds 5,6 --policies "$key" ;;
        public) run online5_public capacity --workload paper --profile llama-3.3-70b-fp8-tp2-h100 \
          --q-cap 20.25 --seeds 2,3,4,5,6 --policies cacheroute_online \
          --ladder 600,700,800,900,1000,1200 ;;
        public_echo_off) run online5_public_echo_off capacity --workload paper \
          --profile llama-3.3-70b-fp8-tp2-h100 --q-cap 20.25 --seeds 2,3,4,5,6 \
          --policies cacheroute_online --no-session-echo --ladder 700,800,900 --ref-qps 800 ;;
        lowshare) run online5_lowshare capacity --workload lowshare --q-cap 1.60546875 \
          --seeds 2,3,4 --policies cacheroute_online ;;
        whales) run online5_whales capacity --workload whales --q-cap 23.75 --seeds 2,3,4 \
          --policies cacheroute_online ;;
        routers16_fine)  # 120 and 150 QPS at 16 routers, where the knees below fall between rungs
          fine=("${testbed[@]}" --q-cap 3.0546875 --routers 16 --seeds 4,5,6 --ladder 120,150 \
            --ref-qps 120)
          sync=(--tree-sync-ms 1000 --policy-param sglang.tie_order=random)
          run online5_r16_online_round_robin_fine capacity "${fine[@]}" --policies cacheroute_online
          run online5_r16_sglang_key_fine capacity "${fine[@]}" --front key --policies sglang
          run online5_r16_sglang_sync_round_robin_fine capacity "${fine[@]}" "${sync[@]}" \
            --policies sglang
          run online5_r16_sglang_sync_key_fine capacity "${fine[@]}" --front key "${sync[@]}" \
            --policies sglang ;;
        routers4 | routers16)  # 1/4/16 routers, held-out seeds 4-6, under each front tier
          n=${study#online5-routers}
          many=("${testbed[@]}" --q-cap 3.0546875 --routers "$n" --seeds 4,5,6 \
            --ladder 80,100,140,160,180)
          sync=(--tree-sync-ms 1000 --policy-param sglang.tie_order=random)
          # the order is what matters most: the issue's 1.3x compares the first four
          for variant in online:round_robin sglang:key sglang_sync:round_robin sglang_sync:key \
            online:key online:session sglang:session; do
            policy=${variant%%:*} front=${variant#*:} extra=()
            [ "$policy" = sglang_sync ] && extra=("${sync[@]}")
            [ "$policy" = online ] && name=cacheroute_online || name=sglang
            run "online5_r${n}_${policy}_$front" capacity "${many[@]}" --front "$front" \
              "${extra[@]}" --policies "$name"
          done
          run "online5_r${n}_cacheroute_round_robin" capacity "${many[@]}" --policies cacheroute ;;
        *) echo "unknown study $study" >&2; exit 2 ;;
      esac ;;
    *) echo "unknown study $study" >&2; exit 2 ;;
  esac
done
