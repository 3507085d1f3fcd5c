#!/bin/bash
# run.sh BUILDDIR SRCDIR — `make bench`: ms per training step of the example
# MLP (batch 128) and CNN (batch 64) in tdbg eager and PyTorch eager on the
# CPU, with the same sizes, thread count and optimizer, side by side; then
# the CPU's sgemm GFLOP/s (bench/sgemm, once per round) and the MLP step's
# achieved GFLOP/s.
#
# Each program runs with its defaults and with OMP_WAIT_POLICY=PASSIVE: on
# few cores, spinning OpenMP threads and OpenBLAS threads otherwise fight
# over them. Every round runs all of them one after the other, so a ratio
# is taken within a round; a figure is the median over rounds of each run's
# median step time, with the min-max over rounds. Ratios compare tdbg (with
# its defaults, then with PASSIVE) against the faster PyTorch setting.
#
# Environment: THREADS (all cores), RUNS (5), MLP_STEPS (40), CNN_STEPS (15),
# PYTHON (/usr/bin/python3, Debian's python3-torch).
set -euo pipefail

runs_default=5
. "$(dirname "$0")/lib.sh"
optim=(--optim sgd --lr 0.01 --momentum 0.9)
models=("mlp 128 ${MLP_STEPS:-40}" "cnn 64 ${CNN_STEPS:-15}")

have_torch=yes
torch_version=$("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null) || have_torch=no
configs=(tdbg:default tdbg:PASSIVE)
[ $have_torch = no ] || configs+=(torch:default torch:PASSIVE)

# One run of CONFIG (engine:policy) on MODEL BATCH STEPS; prints its median ms.
run() {
    local engine=${1%:*} policy=${1#*:} env=()
    [ "$policy" = default ] || env=(OMP_WAIT_POLICY="$policy")
    if [ "$engine" = tdbg ]; then
        env "${env[@]}" "$build/examples/$2" --batch "$3" --steps "$4" --threads "$threads" \
            "${optim[@]}" --log-every 1000000 --time
    else
        env "${env[@]}" "$python" "$src/bench/torch_train.py" --model "$2" --batch "$3" \
            --steps "$4" --threads "$threads" "${optim[@]}"
    fi | step_ms
}


tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "tdbg bench: $threads threads, SGD lr 0.01 momentum 0.9, $runs rounds"
echo "ms per training step (forward, loss, backward, update; not data loading),"
echo "median over rounds (min-max)"
if [ $have_torch = no ]; then
    echo "PyTorch: skipped, '$python' cannot import torch (apt-get install python3-torch)"
else
    echo "PyTorch $torch_version eager on the CPU ($python)"
fi
echo

for r in $(seq "$runs"); do
    for m in "${models[@]}"; do
        set -- $m
        for c in "${configs[@]}"; do
            ms=$(run "$c" "$1" "$2" "$3") || ms=
            if [ -z "$ms" ]; then
                echo "bench: $c on $1 failed or printed no time line" >&2
                exit 1
            fi
            echo "$ms" >> "$tmp/$c.$1"
        done
    done
    "$build/bench/sgemm" 1024 "$threads" 10 | sed -n 's/.*median=\([0-9.]*\) .*/\1/p' >> "$tmp/sgemm"
    echo "round $r of $runs done" >&2
done

printf "%-24s %-30s %s\n" "" "mlp, batch 128" "cnn, batch 64"
for c in "${configs[@]}"; do
    label="${c%:*} eager"
    [ "${c#*:}" = default ] || label="$label, ${c#*:}"
    printf "%-24s %-30s %s\n" "$label" "$(summary < "$tmp/$c.mlp")" "$(summary < "$tmp/$c.cnn")"
done
if [ $have_torch = yes ]; then
    declare -A best
    for m in mlp cnn; do
        best[$m]=torch:default
        if awk -v p="$(median < "$tmp/torch:PASSIVE.$m")" -v d="$(median < "$tmp/torch:default.$m")" \
            'BEGIN { exit !(p <= d) }'; then best[$m]=torch:PASSIVE; fi
    done
    for c in tdbg:default tdbg:PASSIVE; do
        cells=()
        for m in mlp cnn; do
            ratio=$(paste "$tmp/$c.$m" "$tmp/${best[$m]}.$m" | awk '{ print $1 / $2 }' | summary)
            cells+=("$ratio vs ${best[$m]#*:}")
        done
        label="tdbg / faster torch"
        [ "${c#*:}" = default ] || label="tdbg ${c#*:} / faster"
        printf "%-24s %-30s %s\n" "$label" "${cells[0]}" "${cells[1]}"
    done
fi
echo

echo "sgemm 1024x1024x1024, $threads threads: $(summary < "$tmp/sgemm") GFLOP/s"
gflops=$(median < "$tmp/sgemm")
# A linear layer costs 2 flops per weight and sample forward and 4 backward.
params=$((784 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 10 + 10))
for c in tdbg:default tdbg:PASSIVE; do
    median < "$tmp/$c.mlp" | awk -v p="$params" -v s="$gflops" -v c="${c#*:}" '{
        f = 6 * p * 128 / 1e9
        printf "mlp step (%s): 6 x %d params x batch 128 = %.3f GFLOP in %.2f ms: %.1f GFLOP/s, %.0f%% of sgemm\n",
            c, p, f, $1, f / ($1 / 1e3), 100 * f / ($1 / 1e3) / s }'
done
