#!/bin/bash
# listen.sh BUILDDIR SRCDIR — attaching's part of `make bench` (issue 21):
# what a run that listens for a front end (TDBG_LISTEN=1: a Unix socket, a
# listener thread blocked in accept(), one flag tested at each
# te_step_begin) costs with nobody attached, against a run without
# TDBG_LISTEN, on the example MLP (784-1024-1024-10, batch 128, SGD
# momentum). Target <= 0.5%.
#
# The figure is the steps' CPU time (the example's `time:` line: cpu_ms
# over the timed steps) on one compute thread (--threads 1,
# OMP_NUM_THREADS=1). Every round runs off and on next to each other (the
# order flipped every other round); a ratio on/off is taken within a round,
# then its median and min-max over rounds. The socket goes to a temporary
# XDG_RUNTIME_DIR.
#
# Environment: RUNS (7), MLP_STEPS (103), THREADS (1).
set -euo pipefail

runs_default=7
. "$(dirname "$0")/lib.sh"
threads=${THREADS:-1}
export OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads
steps=${MLP_STEPS:-103}
mlp=$build/examples/mlp
[ -x "$mlp" ] || { echo "bench: $mlp is missing (make first)" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# One run, listening or not (ON 0|1); appends the CPU ms per step to
# $tmp/ON.cpu. A listening run must have said where it listens.
run() {
    local on=$1 line
    local -a cmd=("$mlp" --steps "$steps" --workers 0 --optim sgd --lr 0.01 --momentum 0.9
                  --threads "$threads" --log-every 1000000 --time)
    local -a env=(env -u TDBG_LISTEN XDG_RUNTIME_DIR="$tmp")
    [ "$on" = 1 ] && env+=(TDBG_LISTEN=1)
    if ! "${env[@]}" "${cmd[@]}" > "$tmp/out" 2> "$tmp/err"; then
        printf 'bench: TDBG_LISTEN=%s %s failed:\n' "$on" "${cmd[*]}" >&2
        cat "$tmp/out" "$tmp/err" >&2
        exit 1
    fi
    if [ "$on" = 1 ] && ! grep -q '^tdbg: listening on unix:' "$tmp/err"; then
        echo "bench: TDBG_LISTEN=1 ${cmd[*]} did not listen:" >&2
        cat "$tmp/err" >&2
        exit 1
    fi
    line=$(grep '^time: ' "$tmp/out") || { echo "bench: ${cmd[*]} printed no time line" >&2; exit 1; }
    awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } }
         END { print v["cpu_ms"] / v["steps"] }' <<< "$line" >> "$tmp/$on.cpu"
}

echo "== attach: listening with nobody attached against not listening (MLP, $threads thread(s), CPU time per step, $runs rounds, target <= 0.5%)"
echo "   cpu: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc --all) cores; load: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$runs"); do
    if [ $((r % 2)) = 1 ]; then run 0; run 1; else run 1; run 0; fi
done
over=$(paste "$tmp/1.cpu" "$tmp/0.cpu" | awk '{ print ($1 / $2 - 1) * 100 }' | summary %+.2f%%)
printf '%-22s %-22s %s\n' "off ms/step" "listening ms/step" "listening/off - 1"
printf '%-22s %-22s %s\n' "$(summary %.2f < "$tmp/0.cpu")" "$(summary %.2f < "$tmp/1.cpu")" "$over"
