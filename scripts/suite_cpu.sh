#!/usr/bin/env bash
# Total CPU seconds of a command and every process it starts (issue 34: the suite's CPU cost).
#
#   scripts/suite_cpu.sh [LABEL] [-- COMMAND...]      default command: make test
#
# The command runs in its own cgroup v2 group, so children, grandchildren and orphans that
# outlive their parent are all counted (cpu.stat's user_usec + system_usec); processes still in
# the group when the command ends are listed (a leak) and waited for up to 10 s, then counted too.
# Needs root and a writable cgroup v2 hierarchy (/sys/fs/cgroup or /sys/fs/cgroup/unified);
# without one it falls back to /usr/bin/time, which misses orphans that outlive the command.
# One line of results goes to stdout and to $SUITE_CPU_LOG (default .venv/suite_cpu.log):
#   label, wall s, user s, system s, total s, load averages before and after, the CPU seconds of
#   scripts/cpu_yardstick.py before and after (the shared machine's speed drifts by a quarter within
#   a day: compare runs made close together, or against their yardsticks), exit status.
set -uo pipefail
cd "$(dirname "$0")/.."
label=${1:-run}
shift || true
[[ "${1:-}" == "--" ]] && shift
if [[ $# -eq 0 ]]; then set -- make test; fi
log=${SUITE_CPU_LOG:-.venv/suite_cpu.log}
mkdir -p "$(dirname "$log")"

root=""
for candidate in /sys/fs/cgroup /sys/fs/cgroup/unified; do
    if [[ -f $candidate/cgroup.procs && -f $candidate/cgroup.controllers ]]; then
        root=$candidate
        break
    fi
done
yardstick() { python3 scripts/cpu_yardstick.py; }  # the machine's speed now
yard_before=$(yardstick)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
started=$(date +%s.%N)

if [[ -n $root ]] && mkdir "$root/suite-cpu-$$" 2>/dev/null; then
    group=$root/suite-cpu-$$
    (echo "$BASHPID" >"$group/cgroup.procs" && exec "$@")
    status=$?
    ended=$(date +%s.%N)
    for _ in $(seq 100); do
        [[ -s $group/cgroup.procs ]] || break
        sleep 0.1
    done
    if [[ -s $group/cgroup.procs ]]; then
        echo "suite_cpu: still running after the command ended (leaked):" >&2
        xargs -r ps -o pid,etime,args -p <"$group/cgroup.procs" >&2 || true
    fi
    user_s=$(awk '$1 == "user_usec" {printf "%.1f", $2 / 1e6}' "$group/cpu.stat")
    system_s=$(awk '$1 == "system_usec" {printf "%.1f", $2 / 1e6}' "$group/cpu.stat")
    rmdir "$group" 2>/dev/null || echo "suite_cpu: $group kept (processes left in it)" >&2
    how=cgroup
else
    times=$(mktemp)
    /usr/bin/time -f '%U %S' -o "$times" "$@"
    status=$?
    ended=$(date +%s.%N)
    read -r user_s system_s <"$times"
    rm -f "$times"
    how="time(1), orphans not counted"
fi

yard_after=$(yardstick)
wall_s=$(awk -v a="$started" -v b="$ended" 'BEGIN {printf "%.1f", b - a}')
total_s=$(awk -v u="$user_s" -v s="$system_s" 'BEGIN {printf "%.1f", u + s}')
line="$(date -u +%FT%TZ) $label wall=${wall_s}s user=${user_s}s system=${system_s}s"
line+=" total=${total_s}s load_before=[$load_before] load_after=[$(cut -d' ' -f1-3 /proc/loadavg)]"
line+=" yardstick=[${yard_before}s ${yard_after}s]"
line+=" status=$status ($how; $(git rev-parse --short HEAD 2>/dev/null); $*)"
echo "$line" | tee -a "$log"
exit "$status"
