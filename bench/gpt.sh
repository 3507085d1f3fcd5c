#!/bin/bash
# gpt.sh BUILDDIR SRCDIR — the transformer's part of `make bench`:
#
# 1. The time of a training step of examples/gpt in its default configuration
#    (layers, heads, embd, block, batch, lr, weight decay, clipping: read
#    from `gpt --help`, so the figures follow the example) in tdbg eager mode
#    and graph mode (attention fused), beside bench/torch_gpt.py's same model
#    in PyTorch eager (attention by F.scaled_dot_product_attention with
#    is_causal=True, PyTorch's fast path) and under torch.compile, on one
#    thread and on THREADS2 threads; tokens per second (batch x block per
#    step) from the same runs.
# 2. Peak memory of graph mode with fused attention against graph mode with
#    the composed chain (TDBG_GRAPH_DISABLE=fuse-attn: scores, scale, mask,
#    softmax, out as separate kernels, planned by the same memory planner),
#    at block MEM_BLOCK (256), the default width, batch MEM_BATCH (8): the
#    process's peak RSS (getrusage, the example's `memory:` line) and the
#    engine allocator's peak; PyTorch eager's RSS beside them, SDPA and
#    composed.
#
# Every round runs every configuration once, one after the other; a figure
# is the median over rounds of each run's median step (min-max over rounds);
# a ratio is taken within a round, then its median. OMP_WAIT_POLICY=PASSIVE
# for every program, as bench/graph.sh.
#
# Environment: RUNS (5), STEPS (20), THREADS2 (2), MEM_BLOCK (256),
# MEM_BATCH (8), MEM_STEPS (6), MEM_RUNS (1), COMPILE (1; 0 skips
# torch.compile, which takes a minute or more per run on two cores), DATA
# (the example's default corpus when present, else tests/fixtures/alice.txt),
# PYTHON (/usr/bin/python3; without an importable torch the PyTorch rows are
# skipped). THREADS is not used: the thread counts are 1 and THREADS2.
set -euo pipefail

runs_default=5
. "$(dirname "$0")/lib.sh"
export OMP_WAIT_POLICY=PASSIVE
gpt=$build/examples/gpt
steps=${STEPS:-20}
thread_counts=(1 "${THREADS2:-2}")
mem_block=${MEM_BLOCK:-256}
mem_batch=${MEM_BATCH:-8}
mem_steps=${MEM_STEPS:-6}
mem_runs=${MEM_RUNS:-1}

gpt_defaults

torch_version=$("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null) || torch_version=
configs=(tdbg:eager tdbg:graph)
if [ -n "$torch_version" ]; then
    configs+=(torch:eager)
    if [ "${COMPILE:-1}" != 0 ] && "$python" -c 'import torch; assert hasattr(torch, "compile")' 2>/dev/null; then
        configs+=(torch:compile)
    fi
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# One run of CONFIG (engine:mode) with THREADS, BLOCK, BATCH, STEPS and an
# attention variant (fused/composed for tdbg graph, sdpa/composed for
# torch); prints the program's output.
run() {
    local engine=${1%:*} mode=${1#*:} th=$2 block=$3 batch=$4 n=$5 attn=$6
    if [ "$engine" = tdbg ]; then
        local env=()
        [ "$attn" = composed ] && env=(TDBG_GRAPH_DISABLE=fuse-attn)
        env "${env[@]}" "$gpt" --mode "$mode" --threads "$th" --layers "${def[layers]}" \
            --heads "${def[heads]}" --embd "${def[embd]}" --block "$block" --batch "$batch" \
            --steps "$n" --warmup 0 --eval-every 0 --log-every 1000000 --data "$data" --time
    else
        "$python" "$src/bench/torch_gpt.py" --mode "$mode" --attn "$attn" --threads "$th" \
            --layers "${def[layers]}" --heads "${def[heads]}" --embd "${def[embd]}" --block "$block" \
            --batch "$batch" --steps "$n" --dropout "${def[dropout]}" --lr "${def[lr]}" \
            --weight-decay "${def[weight-decay]}" --clip "${def[clip]}"
    fi
}

# A run that printed no time line stops the bench, with its output.
need() { # KEY OUTPUT
    grep -q '^time: ' <<< "$2" && return
    printf 'bench: %s printed no time line:\n%s\n' "$1" "$2" >&2
    exit 1
}

echo "gpt: ${def[layers]} layers, ${def[heads]} heads, embd ${def[embd]}, block ${def[block]}, batch ${def[batch]}," \
     "dropout ${def[dropout]}, AdamW lr ${def[lr]} weight decay ${def[weight-decay]}, clip ${def[clip]}"
echo "data: $data; OMP_WAIT_POLICY=PASSIVE; $runs rounds of $steps steps (3 warm-up steps not timed)"
if [ -z "$torch_version" ]; then
    echo "PyTorch: skipped, '$python' cannot import torch"
else
    echo "PyTorch $torch_version ($python): eager with F.scaled_dot_product_attention(is_causal=True)" \
         "$(printf '%s\n' "${configs[@]}" | grep -q compile && echo "and torch.compile of the same model" ||
            echo "(torch.compile skipped)")"
fi
echo

for r in $(seq "$runs"); do
    for th in "${thread_counts[@]}"; do
        for c in "${configs[@]}"; do
            attn=fused
            [ "${c%:*}" = torch ] && attn=sdpa
            out=$(run "$c" "$th" "${def[block]}" "${def[batch]}" "$steps" "$attn")
            need "$c on $th threads" "$out"
            step_ms <<< "$out" >> "$tmp/$c.$th.ms"
            sed -n 's/^compile_ms=\([0-9.]*\)/\1/p' <<< "$out" >> "$tmp/$c.$th.compile"
        done
    done
    echo "round $r of $runs done" >&2
done

tokens=$((def[batch] * def[block]))
for th in "${thread_counts[@]}"; do
    echo "step time, $th thread(s): ms per step, median over rounds (min-max); tokens/s at the median"
    for c in "${configs[@]}"; do
        label=${c/:/ }
        case $c in tdbg:graph) label="$label (fused attention)" ;; torch:*) label="$label (SDPA)" ;; esac
        compile=$(median < "$tmp/$c.$th.compile")
        printf "  %-28s %-26s %8.0f tokens/s%s\n" "$label" "$(summary < "$tmp/$c.$th.ms")" \
            "$(median < "$tmp/$c.$th.ms" | awk -v t="$tokens" '{ print t / ($1 / 1e3) }')" \
            "${compile:+   (compile and first step: $compile ms)}"
    done
    for c in "${configs[@]}"; do
        [ "${c%:*}" = torch ] || continue
        for t in tdbg:eager tdbg:graph; do
            printf "  %-28s %s x\n" "${t/:/ } / ${c/:/ }" \
                "$(paste "$tmp/$t.$th.ms" "$tmp/$c.$th.ms" | awk '{ print $1 / $2 }' | summary)"
        done
    done
    echo
done

echo "peak memory, graph mode, block $mem_block, batch $mem_batch, ${thread_counts[-1]} threads, $mem_steps steps:"
mem_configs=(tdbg:graph:fused tdbg:graph:composed)
[ -z "$torch_version" ] || mem_configs+=(torch:eager:sdpa torch:eager:composed)
for r in $(seq "$mem_runs"); do
    for m in "${mem_configs[@]}"; do
        out=$(run "${m%:*}" "${thread_counts[-1]}" "$mem_block" "$mem_batch" "$mem_steps" "${m##*:}")
        need "$m at block $mem_block" "$out"
        sed -n 's/.*peak_rss_kb=\([0-9]*\).*/\1/p' <<< "$out" >> "$tmp/mem.$m.rss"
        sed -n 's/.*peak_alloc_bytes=\([0-9]*\).*/\1/p' <<< "$out" >> "$tmp/mem.$m.alloc"
        sed -n 's/.*peak_tensor_bytes=\([0-9]*\).*/\1/p' <<< "$out" >> "$tmp/mem.$m.tensor"
        sed -n 's/^graph: .* kernels=\([0-9]*\) fused=\([0-9]*\) arena_bytes=\([0-9]*\).*/\1 \2 \3/p' <<< "$out" \
            >> "$tmp/mem.$m.graph"
    done
done
printf "  %-24s %-24s %-14s %-15s %s\n" "" "RSS peak MiB" "alloc peak MiB" "tensor peak MiB" \
    "kernels, fused, arena MiB"
mib() { [ -s "$1" ] && awk -v a="$(median < "$1")" 'BEGIN { printf "%.1f", a / 1048576 }'; }
for m in "${mem_configs[@]}"; do
    printf "  %-24s %-24s %-14s %-15s %s\n" "${m//:/ }" \
        "$(awk '{ print $1 / 1024 }' "$tmp/mem.$m.rss" | summary %.1f)" \
        "$(mib "$tmp/mem.$m.alloc")" "$(mib "$tmp/mem.$m.tensor")" \
        "$(tail -n 1 "$tmp/mem.$m.graph" | awk '{ if (NF) printf "%d, %d, %.1f", $1, $2, $3 / 1048576 }')"
done
f=$tmp/mem.tdbg:graph:fused c=$tmp/mem.tdbg:graph:composed
printf "  fused / composed: tensors %s x, allocator peak %s x, RSS %s x\n" \
    "$(paste "$f.tensor" "$c.tensor" | awk '{ print $1 / $2 }' | summary %.3f)" \
    "$(paste "$f.alloc" "$c.alloc" | awk '{ print $1 / $2 }' | summary %.3f)" \
    "$(paste "$f.rss" "$c.rss" | awk '{ print $1 / $2 }' | summary %.3f)"
# The composed run must have run more kernels, else the pass was not turned off.
if [ "$(tail -n 1 "$f.graph" | cut -d' ' -f1)" = "$(tail -n 1 "$c.graph" | cut -d' ' -f1)" ]; then
    echo "  warning: the composed run has as many kernels as the fused one: does this build know" \
         "TDBG_GRAPH_DISABLE=fuse-attn?" >&2
fi
