#!/bin/bash
# amp.sh BUILDDIR SRCDIR — the mixed-precision part of `make bench`: ms per
# training step and the engine allocator's peak of the example MLP (batch
# 128) and CNN (batch 64) at each AMP level, O0 (f32) and O1-O3 in f16 and
# bf16 (the examples' --amp LEVEL --amp-dtype DT), beside PyTorch eager on
# the CPU in f32 and under CPU autocast (bf16), the same models, sizes and
# optimizer (bench/torch_amp.py), in the same run. Two more tdbg rows: O2
# bf16 with TDBG_NO_NATIVE_LOWP=1 shows what the native bf16 kernels
# (oneDNN, engine/cpu/cpu_lowp.c) save over the f32 shadow path, and O2
# bf16 under `tdbg --batch -ex "break overflow"` what the armed breakpoint
# costs (it never stops here: nothing overflows); bench/lowp_linear times
# one bf16 Linear both ways.
#
# Memory is the activations': the bytes one eager forward leaves allocated
# for its backward (the examples' activation_bytes: what the tape keeps,
# the input batch and the parameters not counted), beside PyTorch's
# saved-tensor bytes (input and weights counted); the allocator's peak too.
#
# Every round runs every configuration once, one after the other, at 1
# thread (the gate: the least noisy figure) and then at 2; a figure is the
# median over rounds (min-max); a ratio is taken within a round, then its
# median. OMP_WAIT_POLICY=PASSIVE for every program (see bench/graph.sh).
# The gates of the issue are printed at the end from the 1-thread figures:
# O2 bf16's step time over PyTorch autocast's, O2's activation bytes over
# O0's (PyTorch's autocast over f32 beside it), the armed breakpoint's step
# time over the bare run's.
#
# Environment: RUNS (5), THREAD_COUNTS ("1 2"), MLP_STEPS (20), CNN_STEPS
# (8), AMP_LEVELS ("O0 O1 O2 O3": O0 alone runs the examples without --amp
# flags, so the script works on a tree whose examples lack them), PYTHON
# (/opt/torchenv/bin/python when it exists, else /usr/bin/python3).
set -euo pipefail

runs_default=5
[ -n "${PYTHON:-}" ] || [ ! -x /opt/torchenv/bin/python ] || PYTHON=/opt/torchenv/bin/python
. "$(dirname "$0")/lib.sh"
optim=(--optim sgd --lr 0.01 --momentum 0.9)
export OMP_WAIT_POLICY=PASSIVE
thread_counts=(${THREAD_COUNTS:-1 2})
levels=(${AMP_LEVELS:-O0 O1 O2 O3})

configs=()
for l in "${levels[@]}"; do
    case $l in
    O0) configs+=(tdbg:O0:f32) ;;
    O1 | O2 | O3) configs+=("tdbg:$l:f16" "tdbg:$l:bf16") ;;
    *) echo "amp.sh: AMP_LEVELS: unknown level '$l' (O0 O1 O2 O3)" >&2; exit 2 ;;
    esac
done
printf '%s\n' "${levels[@]}" | grep -qx O2 && configs+=(tdbg:O2:bf16-shadow tdbg:O2:bf16-overflow)
torch_version=$("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null) || torch_version=
[ -z "$torch_version" ] || configs+=(torch:eager:f32 torch:autocast:bf16)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# One run of CONFIG (engine:level:dtype) on MODEL at THREADS; appends its
# median ms, its activation bytes (tdbg: the forward's; torch: the saved
# tensors') and its allocator peak (tdbg).
run() {
    local engine level dt model=$2 t=$3 out key env=() pre=()
    IFS=: read -r engine level dt <<< "$1"
    local batch=$([ "$model" = mlp ] && echo 128 || echo 64)
    local steps=$([ "$model" = mlp ] && echo "${MLP_STEPS:-20}" || echo "${CNN_STEPS:-8}")
    key="$tmp/$1.$model.$t"
    if [ "$engine" = tdbg ]; then
        local amp=()
        [ "$level" = O0 ] || amp=(--amp "$level" --amp-dtype "${dt%%-*}")
        [ "$dt" != bf16-shadow ] || env=(TDBG_NO_NATIVE_LOWP=1)
        [ "$dt" != bf16-overflow ] || pre=("$build/debugger/tdbg" --batch -ex "break overflow" --)
        out=$(env "${env[@]}" "${pre[@]}" "$build/examples/$model" "${amp[@]}" --batch "$batch" \
              --steps "$steps" --threads "$t" "${optim[@]}" --log-every 1000000 --time)
        sed -n 's/.*activation_bytes=\([0-9]*\).*/\1/p' <<< "$out" >> "$key.mem"
        sed -n 's/.*peak_alloc_bytes=\([0-9]*\).*/\1/p' <<< "$out" >> "$key.peak"
    else
        out=$("$python" "$src/bench/torch_amp.py" --model "$model" --batch "$batch" --steps "$steps" \
              --threads "$t" --autocast "$([ "$level" = autocast ] && echo bf16 || echo none)")
        sed -n 's/.*saved_bytes=\([0-9]*\).*/\1/p' <<< "$out" >> "$key.mem"
    fi
    step_ms <<< "$out" >> "$key.ms"
    [ -s "$key.ms" ] || { echo "bench: $1 on $model at $t threads printed no time line" >&2; exit 1; }
}

mib() { awk '{ printf "%.1f\n", $1 / 1048576 }'; }
# "activations/peak" in MiB of a run's figure files (torch: no peak).
mib_pair() {
    local a p=-
    a=$(mib < "$1.mem" | median)
    [ ! -s "$1.peak" ] || p=$(mib < "$1.peak" | median)
    echo "$a/$p"
}
# The within-round ratios of two figure files, summarised.
ratio() { paste "$1" "$2" | awk '{ print $1 / $2 }' | summary; }

echo "mixed precision: SGD lr 0.01 momentum 0.9, OMP_WAIT_POLICY=PASSIVE, $runs rounds, threads ${thread_counts[*]}"
echo "native bf16 kernels: $(grep -q avx512_bf16 /proc/cpuinfo && echo "CPU has AVX512-BF16" || echo "CPU lacks AVX512-BF16: the shadow path")"
echo "PyTorch: ${torch_version:-not importable by $python: skipped}"
echo
for r in $(seq "$runs"); do
    for t in "${thread_counts[@]}"; do
        for model in mlp cnn; do
            for c in "${configs[@]}"; do
                run "$c" "$model" "$t"
            done
        done
    done
    for p in native shadow; do
        TDBG_NO_NATIVE_LOWP=$([ $p = shadow ] && echo 1 || echo 0) "$build/bench/lowp_linear" 128 1024 1024 1 20 |
            sed -n 's/.*median=\([0-9.]*\) .*/\1/p' >> "$tmp/linear.$p"
    done
    echo "round $r of $runs done" >&2
done

for t in "${thread_counts[@]}"; do
    echo "$t thread(s): ms per step, median (min-max); MiB: activations (tdbg: kept by the forward; torch: saved" \
        "tensors), allocator peak"
    printf "  %-24s %-26s %-12s %-26s %s\n" "" "mlp, batch 128" "MiB act/peak" "cnn, batch 64" "MiB act/peak"
    for c in "${configs[@]}"; do
        k="$tmp/$c"
        printf "  %-24s %-26s %-12s %-26s %s\n" "${c//:/ }" "$(summary < "$k.mlp.$t.ms")" \
            "$(mib_pair "$k.mlp.$t")" "$(summary < "$k.cnn.$t.ms")" "$(mib_pair "$k.cnn.$t")"
    done
    echo
done

echo "one bf16 Linear 128x1024 @ 1024x1024^T + bias, forward and backward, 1 thread (bench/lowp_linear), ms:"
echo "  native $(summary < "$tmp/linear.native"), shadow $(summary < "$tmp/linear.shadow")," \
    "native / shadow $(ratio "$tmp/linear.native" "$tmp/linear.shadow")"
echo

t=${thread_counts[0]}
o0="$tmp/tdbg:O0:f32" o2="$tmp/tdbg:O2:bf16" ac="$tmp/torch:autocast:bf16"
for model in mlp cnn; do
    [ -s "$o2.$model.$t.ms" ] || continue
    echo "gates, $model, $t thread(s):"
    [ -z "$torch_version" ] ||
        echo "  O2 bf16 / torch autocast step time: $(ratio "$o2.$model.$t.ms" "$ac.$model.$t.ms") (target <= 1)"
    [ ! -s "$o0.$model.$t.mem" ] ||
        echo "  O2 bf16 / O0 activation bytes: $(ratio "$o2.$model.$t.mem" "$o0.$model.$t.mem") (target <= 0.6)," \
            "allocator peak $(ratio "$o2.$model.$t.peak" "$o0.$model.$t.peak")"
    echo "  break overflow armed / bare, O2 bf16 step time:" \
        "$(ratio "$tmp/tdbg:O2:bf16-overflow.$model.$t.ms" "$o2.$model.$t.ms") (target <= 1.1)"
    echo "  native / shadow O2 bf16 step time: $(ratio "$o2.$model.$t.ms" "$tmp/tdbg:O2:bf16-shadow.$model.$t.ms")"
    [ -z "$torch_version" ] ||
        echo "  torch saved activations, autocast / f32: $(ratio "$ac.$model.$t.mem" "$tmp/torch:eager:f32.$model.$t.mem")"
done
