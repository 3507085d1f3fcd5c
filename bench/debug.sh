#!/bin/bash
# debug.sh BUILDDIR SRCDIR — the debugger's cost, part of `make bench`: the
# example MLP (batch 128) and CNN (batch 32), eager and graph mode, trained
# without a debugger, under `tdbg --batch` with (a) no breakpoint, (b)
# `break nan` (every op's outputs checked), (c) a threshold condition on
# every op (`break * if abs_max > 1e30`, which never holds); beside them
# PyTorch with anomaly mode and with an isnan() hook on every module, on the
# same models. A run's figure is its fastest step: on a shared 2-core guest
# the median moves by 10-20% with other tenants' load, the fastest step far
# less, and an overhead is in every step. Slowdowns are per-round ratios to
# the run without a debugger (tdbg) or without a watch (PyTorch), then their
# median over rounds (min..max).
#
# Environment: THREADS (all cores), RUNS (3), STEPS_MLP (60), STEPS_CNN (12),
# PYTHON (/usr/bin/python3).
set -euo pipefail

runs_default=3
. "$(dirname "$0")/lib.sh"
export OMP_WAIT_POLICY=PASSIVE
optim=(--optim sgd --lr 0.01 --momentum 0.9)
tdbg_configs=(none attached nan threshold)
have_torch=yes
"$python" -c 'import torch' 2>/dev/null || have_torch=no

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

batch_of() { [ "$1" = mlp ] && echo 128 || echo 32; }
steps_of() { [ "$1" = mlp ] && echo "${STEPS_MLP:-60}" || echo "${STEPS_CNN:-12}"; }

run_tdbg() { # CONFIG MODEL MODE
    local pre=()
    case $1 in
        none) ;;
        attached) pre=("$build/debugger/tdbg" --batch --) ;;
        nan) pre=("$build/debugger/tdbg" --batch -ex "break nan" --) ;;
        threshold) pre=("$build/debugger/tdbg" --batch -ex "break * if abs_max > 1e30" --) ;;
    esac
    "${pre[@]}" "$build/examples/$2" --mode "$3" --batch "$(batch_of "$2")" --steps "$(steps_of "$2")" \
        --threads "$threads" "${optim[@]}" --train-size 4096 --log-every 1000000 --time | fastest_ms
}

run_torch() { # WATCH MODEL
    "$python" "$src/bench/torch_train.py" --model "$2" --watch "$1" --batch "$(batch_of "$2")" \
        --steps "$(steps_of "$2")" --threads "$threads" "${optim[@]}" | fastest_ms
}

for r in $(seq "$runs"); do
    for model in mlp cnn; do
        for mode in eager graph; do
            for c in "${tdbg_configs[@]}"; do
                ms=$(run_tdbg "$c" "$model" "$mode")
                [ -n "$ms" ] || { echo "bench: tdbg $c $model $mode printed no time line" >&2; exit 1; }
                echo "$ms" >> "$tmp/tdbg.$c.$model.$mode"
            done
        done
        if [ $have_torch = yes ]; then
            for w in none anomaly hooks; do
                ms=$(run_torch "$w" "$model")
                [ -n "$ms" ] || { echo "bench: torch --watch $w $model printed no time line" >&2; exit 1; }
                echo "$ms" >> "$tmp/torch.$w.$model"
            done
        fi
    done
    echo "round $r of $runs done" >&2
done

# "+X% (min..max)" of the per-round slowdowns of file $1 against file $2
slowdown() { paste "$1" "$2" | awk '{ print 100 * ($1 / $2 - 1) }' | sort -g | awk '{ v[NR] = $1 } END {
    m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "%+.1f%% (%+.1f..%+.1f)", m, v[1], v[NR] }'; }

echo "debugger overhead: $threads threads, OMP_WAIT_POLICY=PASSIVE, $runs rounds; MLP batch 128, CNN batch 32"
printf "%-34s %-26s %-26s %-26s %s\n" "" "mlp eager" "mlp graph" "cnn eager" "cnn graph"
printf "%-34s" "no debugger, fastest step ms"
for model in mlp cnn; do for mode in eager graph; do
    printf " %-26s" "$(median < "$tmp/tdbg.none.$model.$mode")"
done; done
echo
for c in attached nan threshold; do
    case $c in
        attached) label="(a) tdbg attached, no breakpoint" ;;
        nan) label="(b) break nan" ;;
        threshold) label="(c) break * if abs_max > 1e30" ;;
    esac
    printf "%-34s" "$label"
    for model in mlp cnn; do for mode in eager graph; do
        printf " %-26s" "$(slowdown "$tmp/tdbg.$c.$model.$mode" "$tmp/tdbg.none.$model.$mode")"
    done; done
    echo
done
if [ $have_torch = yes ]; then
    printf "%-34s %-53s %s\n" "PyTorch eager, fastest step ms" "$(median < "$tmp/torch.none.mlp")" \
        "$(median < "$tmp/torch.none.cnn")"
    printf "%-34s %-53s %s\n" "  set_detect_anomaly(True)" "$(slowdown "$tmp/torch.anomaly.mlp" "$tmp/torch.none.mlp")" \
        "$(slowdown "$tmp/torch.anomaly.cnn" "$tmp/torch.none.cnn")"
    printf "%-34s %-53s %s\n" "  isnan() hook on every module" "$(slowdown "$tmp/torch.hooks.mlp" "$tmp/torch.none.mlp")" \
        "$(slowdown "$tmp/torch.hooks.cnn" "$tmp/torch.none.cnn")"
else
    echo "PyTorch: skipped, '$python' cannot import torch"
fi
