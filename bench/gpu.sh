#!/bin/bash
# gpu.sh BUILDDIR SRCDIR — the CUDA backend's benchmark (issue 18), run by
# tools/gpu-check.sh on a machine with a GPU, in one go:
# (1) ms per training step of the example MLP (batch 32 and 128), CNN
#     (batch 32) and GPT (its defaults) on --backend cuda, eager and graph
#     mode (CUDA Graphs), beside PyTorch CUDA eager and torch.compile on the
#     same models, TF32 off on both sides;
# (2) the NaN watch: the same runs under `tdbg --batch -ex "break nan"`
#     (every op's outputs checked on the device), as a slowdown;
# (3) dumps from device memory: the writer's MB/s of tensor bytes against
#     the disk's own (dd with fdatasync), in the same round.
# Every round runs every configuration once; a figure is the median over
# rounds (min-max), a ratio is taken within a round, then its median. The
# GPU is not shared and its timings steady, so the median step is used.
#
# Environment: RUNS (3), STEPS (40), PYTHON (/usr/bin/python3), GPU_SECONDS
# (a budget: rounds stop once it is spent, 300).
set -euo pipefail

runs_default=3
. "$(dirname "$0")/lib.sh"
steps=${STEPS:-40}
budget=${GPU_SECONDS:-300}
tmp=$(mktemp -d "${TMPDIR:-/var/tmp}/tdbg-gpu.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

have_torch=no
"$python" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null && have_torch=yes
have_compile=no
[ $have_torch = yes ] && "$python" -c 'import torch; assert hasattr(torch, "compile")' 2>/dev/null && have_compile=yes

optim=(--optim sgd --lr 0.01 --momentum 0.9)
cases=("mlp 32" "mlp 128" "cnn 32" "gpt 0")

tdbg_run() { # MODEL BATCH MODE [debugger args...]
    local model=$1 batch=$2 mode=$3
    shift 3
    local args=(--backend cuda --mode "$mode" --steps "$steps" --log-every 1000000 --time)
    [ "$model" = gpt ] || args+=(--batch "$batch" "${optim[@]}" --train-size 4096)
    if [ $# -gt 0 ]; then
        "$build/debugger/tdbg" --batch "$@" -- "$build/examples/$model" "${args[@]}"
    else
        "$build/examples/$model" "${args[@]}"
    fi
}

torch_run() { # MODEL BATCH MODE
    if [ "$1" = gpt ]; then
        local h
        h=$("$build/examples/gpt" --help)
        d() { sed -n "s/^  --$1 [A-Z]* .*(\\([^()]*\\))\$/\\1/p" <<< "$h"; }
        "$python" "$src/bench/torch_gpt.py" --device cuda --mode "$3" --threads 1 --steps "$steps" \
            --layers "$(d layers)" --heads "$(d heads)" --embd "$(d embd)" --block "$(d block)" --batch "$(d batch)"
    else
        "$python" "$src/bench/torch_train.py" --device cuda --model "$1" --batch "$2" --mode "$3" \
            --threads 1 --steps "$steps" "${optim[@]}"
    fi
}

record() { # KEY OUTPUT
    local ms
    ms=$(step_ms <<< "$2")
    [ -n "$ms" ] || { echo "bench: $1 printed no time line:" >&2; tail -5 <<< "$2" >&2; return 1; }
    echo "$ms" >> "$tmp/$1.ms"
    field peak_device_bytes <<< "$2" | tail -1 >> "$tmp/$1.peak"
}

start=$SECONDS
for r in $(seq "$runs"); do
    for c in "${cases[@]}"; do
        read -r model batch <<< "$c"
        key=$model.$batch
        record "$key.eager" "$(tdbg_run "$model" "$batch" eager)"
        record "$key.graph" "$(tdbg_run "$model" "$batch" graph)"
        record "$key.eager_nan" "$(tdbg_run "$model" "$batch" eager -ex "break nan")"
        record "$key.graph_nan" "$(tdbg_run "$model" "$batch" graph -ex "break nan")"
        if [ $have_torch = yes ]; then
            record "$key.torch" "$(torch_run "$model" "$batch" eager)"
            [ $have_compile = no ] || record "$key.compile" "$(torch_run "$model" "$batch" compile)"
        fi
    done
    dd if=/dev/zero of="$tmp/dd.bin" bs=1M count=512 conv=fdatasync 2>&1 |
        awk '/copied/ { for (i = 1; i <= NF; i++) if ($i == "s,") print $1 / $(i - 1) / 1e6 }' >> "$tmp/dd"
    rm -f "$tmp/dd.bin"
    out=$("$build/examples/mlp" --backend cuda --batch 128 --steps 6 "${optim[@]}" --train-size 4096 \
          --log-every 1000000 --dump "dir=$tmp/d;io=both;phase=forward,backward,update,params,grads")
    rm -rf "$tmp/d"
    field MB_per_s <<< "$out" | tail -1 >> "$tmp/dump.mbs"
    paste "$tmp/dd" "$tmp/dump.mbs" | tail -1 | awk '{ print $2 / $1 }' >> "$tmp/dump_dd"
    echo "round $r of $runs done ($((SECONDS - start)) s)" >&2
    [ $((SECONDS - start)) -lt "$budget" ] || { echo "bench: GPU_SECONDS=$budget spent after $r rounds" >&2; break; }
done

ratio() { paste "$tmp/$1.ms" "$tmp/$2.ms" | awk '{ print $1 / $2 }' | summary "%.2f"; }
pct() { paste "$tmp/$1.ms" "$tmp/$2.ms" | awk '{ print 100 * ($1 / $2 - 1) }' | summary "%+.1f%%"; }

gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
echo "CUDA backend: ${gpu:-unknown GPU}, $(ls "$tmp"/*.eager.ms | wc -l) cases, rounds: $(wc -l < "$tmp/mlp.32.eager.ms")"
echo "(ms per step, median over rounds (min-max); ratios within a round)"
printf "%-10s %-22s %-22s %-22s %-22s %-16s %-16s %-14s %s\n" case "tdbg eager" "tdbg graph" "torch eager" \
    "torch compile" "eager/torch" "graph/compile" "graph speedup" "peak device MiB"
for c in "${cases[@]}"; do
    read -r model batch <<< "$c"
    k=$model.$batch
    t=-; cp=-; r1=-; r2=-
    [ -s "$tmp/$k.torch.ms" ] && { t=$(summary < "$tmp/$k.torch.ms"); r1=$(ratio "$k.eager" "$k.torch"); }
    [ -s "$tmp/$k.compile.ms" ] && { cp=$(summary < "$tmp/$k.compile.ms"); r2=$(ratio "$k.graph" "$k.compile"); }
    peak=$(median < "$tmp/$k.eager.peak" | awk '{ if ($1 != "") printf "%.1f", $1 / 1048576 }')
    printf "%-10s %-22s %-22s %-22s %-22s %-16s %-16s %-14s %s\n" "$model/$batch" "$(summary < "$tmp/$k.eager.ms")" \
        "$(summary < "$tmp/$k.graph.ms")" "$t" "$cp" "$r1" "$r2" "$(ratio "$k.eager" "$k.graph")" "${peak:--}"
done
echo
echo "NaN watch on every op (break nan), slowdown against the same mode without it (target <= 5%):"
for c in "${cases[@]}"; do
    read -r model batch <<< "$c"
    k=$model.$batch
    printf "  %-10s eager %-28s graph %s\n" "$model/$batch" "$(pct "$k.eager_nan" "$k.eager")" "$(pct "$k.graph_nan" "$k.graph")"
done
echo
printf "dumps from device memory: disk %s MB/s, tdbg writer %s MB/s, writer/disk %s (target >= 0.7)\n" \
    "$(summary %.0f < "$tmp/dd")" "$(summary %.0f < "$tmp/dump.mbs")" "$(summary %.2f < "$tmp/dump_dd")"
