#!/bin/bash
# record.sh BUILDDIR SRCDIR — time travel's part of `make bench` (issue 20):
# what recording at the default settings (a snapshot every 20 steps, keep
# 32, 1 GiB; each step's loss and parameter checksum) costs on the example
# MLP (784-1024-1024-10, batch 128, SGD momentum), CNN (batch 64, SGD
# momentum) and GPT (examples/gpt's defaults), against recording off; the
# memory per snapshot of each; and a rewind's latency (bench/rewind_latency:
# the restore of a snapshot and the replay of K steps).
#
# Recording is switched on by TDBG_RECORD=1 (engine/record.c: the engine
# records a program that knows nothing of it, at the defaults, and prints a
# `record:` line with its snapshots at te_shutdown). The gate is the steps'
# CPU time (the examples' `time:` line: cpu_ms over the timed steps; every
# step but the first 3, so that the timed steps hold one snapshot per 20),
# on one compute thread (--threads 1, OMP_NUM_THREADS=1; THREADS=2 for the
# figures beside them), target <= 3%.
# Every round runs each model off and on next to each other (the order
# flipped every other round); a ratio on/off is taken within a round, then
# its median and min-max over rounds.
#
# Environment: RUNS (5), MODELS ("mlp cnn gpt"), MLP_STEPS (203), CNN_STEPS
# (43), GPT_STEPS (43), THREADS (1), DATA (gpt's text, as bench/gpt.sh).
set -euo pipefail

runs_default=5
. "$(dirname "$0")/lib.sh"
threads=${THREADS:-1}
export OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads
models=(${MODELS:-mlp cnn gpt})
sgd=(--optim sgd --lr 0.01 --momentum 0.9)

gpt=$build/examples/gpt
help=$("$gpt" --help) || { echo "bench: $gpt --help failed (make first)" >&2; exit 1; }
data=${DATA:-$(sed -n 's/^  --data [A-Z]* .*(\([^()]*\))$/\1/p' <<< "$help")}
[ -n "$data" ] && [ -r "$data" ] || data=$src/tests/fixtures/alice.txt
latency=$build/bench/rewind_latency
[ -x "$latency" ] || { echo "bench: $latency is missing (make bench builds it)" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

steps_of() { case $1 in mlp) echo "${MLP_STEPS:-203}" ;; cnn) echo "${CNN_STEPS:-43}" ;; *) echo "${GPT_STEPS:-43}" ;; esac; }

# One run of MODEL with recording off or on (REC 0|1); appends the steps'
# CPU ms per step to $tmp/MODEL.REC.cpu and, on, the record: line to .rec.
run() {
    local model=$1 rec=$2 key="$tmp/$1.$2" steps
    local -a cmd
    steps=$(steps_of "$model")
    if [ "$model" = gpt ]; then
        cmd=("$gpt" --steps "$steps" --warmup 0 --eval-every 0 --data "$data")
    else
        cmd=("$build/examples/$model" --steps "$steps" --workers 0 "${sgd[@]}")
    fi
    cmd+=(--threads "$threads" --log-every 1000000 --time)
    if ! TDBG_RECORD=$rec "${cmd[@]}" > "$tmp/out" 2> "$tmp/err"; then
        printf 'bench: TDBG_RECORD=%s %s failed:\n' "$rec" "${cmd[*]}" >&2
        cat "$tmp/out" "$tmp/err" >&2
        exit 1
    fi
    local line
    line=$(grep '^time: ' "$tmp/out") || { echo "bench: ${cmd[*]} printed no time line" >&2; exit 1; }
    awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } }
         END { print v["cpu_ms"] / v["steps"] }' <<< "$line" >> "$key.cpu"
    if [ "$rec" = 1 ]; then
        grep '^record: ' "$tmp/err" >> "$key.rec" || { echo "bench: ${cmd[*]} printed no record: line" >&2; exit 1; }
    fi
}

echo "== time travel: recording at the defaults against off ($threads thread(s), CPU time per step, $runs rounds)"
echo "   cpu: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc --all) cores; load: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$runs"); do
    for model in "${models[@]}"; do
        if [ $((r % 2)) = 1 ]; then run "$model" 0; run "$model" 1; else run "$model" 1; run "$model" 0; fi
    done
done
printf '%-5s %-22s %-22s %-26s %s\n' model "off ms/step" "on ms/step" "on/off - 1" "per snapshot (MB)"
for model in "${models[@]}"; do
    k=$tmp/$model
    over=$(paste "$k.1.cpu" "$k.0.cpu" | awk '{ print ($1 / $2 - 1) * 100 }' | summary %+.2f%%)
    snap=$(field snapshot_bytes < "$k.1.rec" | awk '{ print $1 / 1e6 }' | summary %.2f)
    printf '%-5s %-22s %-22s %-26s %s\n' "$model" "$(summary %.2f < "$k.0.cpu")" "$(summary %.2f < "$k.1.cpu")" \
        "$over" "$snap"
    sed -n '1p' "$k.1.rec" | sed 's/^/      /'
done

echo "== time travel: a rewind's latency (bench/rewind_latency: the MLP, one thread, restore + replay of K steps)"
"$latency" "$runs" 1
