#!/bin/bash
# graph.sh BUILDDIR SRCDIR — the graph-mode half of `make bench`: eager vs
# graph mode of the example MLP and CNN at batch 32 and 128, beside PyTorch
# eager and TorchScript (torch.jit.trace; torch.compile where the installed
# PyTorch has it), in the same run: ms per training step, peak memory
# (tdbg's allocator peak, every program's peak RSS) and compile time.
#
# Every round runs every configuration once, one after the other; a figure
# is the median over rounds (min-max); a ratio is taken within a round, then
# its median. OMP_WAIT_POLICY=PASSIVE for every program: on 2 cores it is
# the faster setting for both (bench/run.sh measures both policies).
#
# Environment: THREADS (all cores), RUNS (3), STEPS_MLP (30), STEPS_CNN (12),
# PYTHON (/usr/bin/python3).
set -euo pipefail

runs_default=3
. "$(dirname "$0")/lib.sh"
optim=(--optim sgd --lr 0.01 --momentum 0.9)
export OMP_WAIT_POLICY=PASSIVE

configs=(tdbg:eager tdbg:graph)
torch_version=$("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null) || torch_version=
if [ -n "$torch_version" ]; then
    configs+=(torch:eager torch:script)
    if "$python" -c 'import torch; assert hasattr(torch, "compile")' 2>/dev/null; then
        configs+=(torch:compile)
    fi
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# One run of CONFIG on MODEL BATCH; appends ms, alloc, rss (KiB) and compile ms to files.
run() {
    local engine=${1%:*} mode=${1#*:} model=$2 batch=$3 out key
    local steps=$([ "$model" = mlp ] && echo "${STEPS_MLP:-30}" || echo "${STEPS_CNN:-12}")
    key="$tmp/$1.$model.$batch"
    if [ "$engine" = tdbg ]; then
        out=$("$build/examples/$model" --mode "$mode" --batch "$batch" --steps "$steps" --threads "$threads" \
              "${optim[@]}" --train-size 4096 --log-every 1000000 --time)
    else
        out=$("$python" "$src/bench/torch_train.py" --model "$model" --mode "$mode" --batch "$batch" \
              --steps "$steps" --threads "$threads" "${optim[@]}")
    fi
    step_ms <<< "$out" >> "$key.ms"
    sed -n 's/.*peak_alloc_bytes=\([0-9]*\).*/\1/p' <<< "$out" >> "$key.alloc"
    sed -n 's/.*peak_rss_kb=\([0-9]*\).*/\1/p' <<< "$out" >> "$key.rss"
    sed -n 's/.*compile_ms=\([0-9.]*\).*/\1/p' <<< "$out" >> "$key.compile"
    [ -s "$key.ms" ] || { echo "bench: $1 on $model batch $batch printed no time line" >&2; exit 1; }
}

scaled() { awk -v d="$1" '{ print $1 / d }'; }

echo "graph mode: $threads threads, OMP_WAIT_POLICY=PASSIVE, SGD lr 0.01 momentum 0.9, $runs rounds"
echo "PyTorch: ${torch_version:-not importable by $python: skipped}$( [ -n "$torch_version" ] && ! printf '%s\n' "${configs[@]}" | grep -q compile && echo " (no torch.compile before PyTorch 2: TorchScript only)")"
echo
for r in $(seq "$runs"); do
    for model in mlp cnn; do
        for batch in 32 128; do
            for c in "${configs[@]}"; do
                run "$c" "$model" "$batch"
            done
        done
    done
    echo "round $r of $runs done" >&2
done

for model in mlp cnn; do
    for batch in 32 128; do
        echo "$model, batch $batch"
        printf "  %-14s %-24s %-14s %-12s %s\n" "" "ms/step" "alloc peak MB" "RSS peak MB" "compile ms"
        for c in "${configs[@]}"; do
            k="$tmp/$c.$model.$batch"
            printf "  %-14s %-24s %-14s %-12s %s\n" "${c/:/ }" "$(summary < "$k.ms")" \
                "$(scaled 1048576 < "$k.alloc" | median)" "$(scaled 1024 < "$k.rss" | median)" \
                "$(median < "$k.compile")"
        done
        e="$tmp/tdbg:eager.$model.$batch" g="$tmp/tdbg:graph.$model.$batch"
        printf "  graph speed-up over eager: %s x; allocator peak %s%% lower, RSS peak %s%% lower\n" \
            "$(paste "$e.ms" "$g.ms" | awk '{ print $1 / $2 }' | summary)" \
            "$(paste "$e.alloc" "$g.alloc" | awk '{ printf "%.1f\n", 100 * (1 - $2 / $1) }' | median)" \
            "$(paste "$e.rss" "$g.rss" | awk '{ printf "%.1f\n", 100 * (1 - $2 / $1) }' | median)"
        if [ -n "$torch_version" ]; then
            printf "  tdbg graph / torch eager: %s x time; tdbg graph / torch script: %s x time\n" \
                "$(paste "$g.ms" "$tmp/torch:eager.$model.$batch.ms" | awk '{ print $1 / $2 }' | summary)" \
                "$(paste "$g.ms" "$tmp/torch:script.$model.$batch.ms" | awk '{ print $1 / $2 }' | summary)"
        fi
        echo
    done
done
