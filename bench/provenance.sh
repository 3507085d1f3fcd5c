#!/bin/bash
# provenance.sh BUILDDIR SRCDIR — which sample did it's part of `make bench`
# (issue 23): what batch provenance (each batch's record of its rows'
# dataset indices, te_provenance_enable) and the full data check (nonfinite,
# label, empty, constant, above/below bounds no value reaches) cost the
# training thread, against neither. Target: both together <= 1% of the step.
#
# bench/provenance trains examples/mlp's model (784-1024-1024-10, batch
# 128, SGD momentum, blobs through a shuffling loader) and a small one
# (784-64-64-10, same data: the data is most of its step) in the three
# configurations (off, prov, prov+check) interleaved in blocks of steps
# within one process (a round), and prints each configuration's ms per
# step, the training thread's CPU time (CLOCK_THREAD_CPUTIME_ID) and wall
# time. Loader workers 0 (the check on the training thread, in
# te_loader_next: the worst case) and 2 (the check in the workers); one
# compute thread (the gate) and two (beside it). Every round runs every
# case once, one after the other; a ratio against off is taken within a
# round, then its median and min-max over rounds. Then what the check and a
# record cost alone on one batch (bench/provenance's `direct:` line), as a
# share of the one-thread, no-worker step.
#
# Environment: RUNS (7), MODELS ("1024 64": hidden widths), MLP_STEPS (60:
# timed steps per configuration and round, hidden 1024), SMALL_STEPS (300),
# THREADS ("1 2"), WORKERS ("0 2").
set -euo pipefail

runs_default=7
. "$(dirname "$0")/lib.sh"
export OMP_WAIT_POLICY=PASSIVE
models=(${MODELS:-1024 64})
thread_list=(${THREADS:-1 2})
worker_list=(${WORKERS:-0 2})
prog=$build/bench/provenance
[ -x "$prog" ] || { echo "bench: $prog is missing (make bench builds it)" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cases=()
for h in "${models[@]}"; do
    for t in "${thread_list[@]}"; do
        for w in "${worker_list[@]}"; do cases+=("$h $t $w"); done
    done
done

echo "== which sample did it: provenance and the full data check against neither (blobs, batch 128, SGD momentum, $runs rounds, target <= 1%)"
echo "   cpu: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc --all) cores; load: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$runs"); do
    for c in "${cases[@]}"; do
        set -- $c
        steps=$([ "$1" -ge 256 ] && echo "${MLP_STEPS:-60}" || echo "${SMALL_STEPS:-300}")
        f=$tmp/$1.$2.$3
        if ! OMP_NUM_THREADS=$2 OPENBLAS_NUM_THREADS=$2 "$prog" 1 "$2" "$3" "$1" "$steps" > "$tmp/out" 2> "$tmp/err"; then
            echo "bench: $prog 1 $2 $3 $1 $steps failed:" >&2
            cat "$tmp/out" "$tmp/err" >&2
            exit 1
        fi
        line=$(grep '^round: ' "$tmp/out") || { echo "bench: $prog printed no round line" >&2; exit 1; }
        echo "hidden=$1 threads=$2 workers=$3 ${line#round: r=0 }" >> "$tmp/raw"
        for k in off_cpu_ms prov_cpu_ms check_cpu_ms off_wall_ms prov_wall_ms check_wall_ms; do
            field "$k" <<< "$line" >> "$f.$k"
        done
        grep '^direct: ' "$tmp/out" | field check_us >> "$tmp/$1.check_us"
        grep '^direct: ' "$tmp/out" | field publish_us >> "$tmp/$1.publish_us"
    done
    echo "round $r of $runs done" >&2
done

# The per-round change of configuration A against off, in %, of KIND (cpu|wall).
change() { paste "$1.$2_$3_ms" "$1.off_$3_ms" | awk '{ print ($1 / $2 - 1) * 100 }' | summary %+.2f%%; }

printf '%-22s %-3s %-3s | %-20s %-22s %-22s | %-20s %-22s %s\n' model thr wrk "off cpu ms/step" "prov/off - 1" \
    "prov+check/off - 1" "off wall ms/step" "prov/off - 1" "prov+check/off - 1"
for c in "${cases[@]}"; do
    set -- $c
    f=$tmp/$1.$2.$3
    printf '%-22s %-3s %-3s | %-20s %-22s %-22s | %-20s %-22s %s\n' "784-$1-$1-10" "$2" "$3" \
        "$(summary < "$f.off_cpu_ms")" "$(change "$f" prov cpu)" "$(change "$f" check cpu)" \
        "$(summary < "$f.off_wall_ms")" "$(change "$f" prov wall)" "$(change "$f" check wall)"
done
for h in "${models[@]}"; do
    f=$tmp/$h.1.0.off_cpu_ms
    [ -s "$f" ] || continue
    echo "784-$h-$h-10, alone on one batch (128 x 784): the full check $(summary %.1f < "$tmp/$h.check_us") us," \
        "$(median < "$tmp/$h.check_us" | awk -v s="$(median < "$f")" '{ printf "%.2f%%", $1 / 1e3 / s * 100 }')" \
        "of the 1-thread no-worker step; a record $(summary %.2f < "$tmp/$h.publish_us") us"
done
echo "raw rounds (ms per step):"
sed 's/^/   /' "$tmp/raw"
