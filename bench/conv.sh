#!/bin/bash
# conv.sh BUILDDIR SRCDIR — the CNN on the CPU against PyTorch at its best
# (issue 22): ms per training step of the example CNN at batch 64 in tdbg
# eager and graph mode, PyTorch eager and torch.compile; the CNN at batch 32
# in tdbg eager and graph mode (graph mode's speed-up); the example MLP at
# batch 128 in tdbg eager and PyTorch eager; graph mode's conv + add fusion
# on a residual block (bench/conv_sum). Then the ratios, and the CNN
# step's arithmetic floor: its conv FLOPs divided by the CPU's sgemm rate
# (bench/sgemm 1024, measured once per round at each thread count), and the
# fraction of that floor tdbg reaches (floor / measured).
#
# Everything runs at one thread (--threads 1, OMP_NUM_THREADS=1: the figure
# to gate on, as the second core of these machines is often stolen) and at
# two (--threads 2, OMP_NUM_THREADS=2: what a user sees), with the same
# optimizer (SGD lr 0.01 momentum 0.9) and OMP_WAIT_POLICY=PASSIVE for every
# program (on few cores the faster setting for both; bench/run.sh measures
# both policies). Every round runs every configuration once, one after the
# other, so a ratio is taken within a round; a figure is the median over
# rounds of each run's median step time (min-max over rounds), a ratio the
# median of the per-round ratios. torch.compile's compile time (tracing,
# compiling and the first step) is reported apart and not in its step time.
#
# The floor counts the three 3x3 convolutions only (the batch norms, pools
# and the linear layer are under 1% of the work): 2*N*O*C*9*OH*OW flops
# forward per conv, twice that backward, so 3x the forward in all, at the
# shapes of `cnn --help`'s default channels (32x32 input, conv3 at 16x16).
#
# torch.compile compiles for a minute or more per run on 2 cores: COMPILE=0
# skips it. Without PyTorch (PYTHON cannot import torch) the PyTorch configs
# are skipped, and without torch.compile (PyTorch 1.x) that one is.
#
# Environment: RUNS (5), CNN_STEPS (15), MLP_STEPS (40), COMPILE (1),
# PYTHON (/usr/bin/python3; a PyTorch 2 venv for torch.compile).
set -euo pipefail

runs_default=5
. "$(dirname "$0")/lib.sh"
optim=(--optim sgd --lr 0.01 --momentum 0.9)
cnn_steps=${CNN_STEPS:-15}
mlp_steps=${MLP_STEPS:-40}
export OMP_WAIT_POLICY=PASSIVE
thread_counts=(1 2)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

torch_version=$("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null) || torch_version=
# $tmp/compile while torch.compile is measured, else $tmp/compile.why says why not.
if [ -z "$torch_version" ]; then
    torch_line="skipped, '$python' cannot import torch"
elif [ "${COMPILE:-1}" = 0 ]; then
    echo "skipped (COMPILE=0)" > "$tmp/compile.why"
    torch_line="$torch_version ($python); torch.compile: $(cat "$tmp/compile.why")"
elif ! "$python" -c 'import torch; assert hasattr(torch, "compile")' 2>/dev/null; then
    echo "not available (PyTorch 2 has it)" > "$tmp/compile.why"
    torch_line="$torch_version ($python); torch.compile: $(cat "$tmp/compile.why")"
else
    torch_line="$torch_version ($python), eager and torch.compile"
    touch "$tmp/compile"
fi

# The configurations of a round (engine:mode:model:batch).
configs() {
    echo tdbg:eager:cnn:64 tdbg:graph:cnn:64
    if [ -n "$torch_version" ]; then
        echo torch:eager:cnn:64
        [ ! -e "$tmp/compile" ] || echo torch:compile:cnn:64
    fi
    echo tdbg:eager:cnn:32 tdbg:graph:cnn:32 tdbg:eager:mlp:128
    [ -z "$torch_version" ] || echo torch:eager:mlp:128
}

# One run of CONFIG at THREADS; appends its median ms (and torch.compile's
# compile ms) to $tmp/THREADS.CONFIG.{ms,compile}.
run() {
    local engine mode model batch t=$2 steps out err=$tmp/stderr key=$tmp/$2.$1 rc=0
    IFS=: read -r engine mode model batch <<< "$1"
    steps=$([ "$model" = mlp ] && echo "$mlp_steps" || echo "$cnn_steps")
    if [ "$engine" = tdbg ]; then
        out=$(OMP_NUM_THREADS=$t "$build/examples/$model" --mode "$mode" --batch "$batch" --steps "$steps" \
              --threads "$t" "${optim[@]}" --log-every 1000000 --time 2> "$err") || rc=$?
    else
        out=$(OMP_NUM_THREADS=$t "$python" "$src/bench/torch_train.py" --model "$model" --mode "$mode" \
              --batch "$batch" --steps "$steps" --threads "$t" "${optim[@]}" 2> "$err") || rc=$?
    fi
    if [ "$mode" = compile ] && { grep -q '^torch.compile: not' "$err" || ! grep -q '^compile_ms=' <<< "$out"; }; then
        # No torch.compile after all (or it did eager): no figure, rather than a wrong one.
        if grep -q '^torch.compile: not' "$err" || [ $rc = 0 ]; then
            echo "not available" > "$tmp/compile.why"
        else
            echo "failed: $(grep -v '^\s*$' "$err" | tail -1)" > "$tmp/compile.why"
        fi
        rm -f "$tmp/compile"
        echo "bench: torch.compile $(cat "$tmp/compile.why"); dropped" >&2
        return
    fi
    if [ $rc != 0 ] || ! step_ms <<< "$out" | grep -q .; then
        echo "bench: $1 at $t threads failed (status $rc) or printed no time line" >&2
        tail -5 "$err" >&2
        exit 1
    fi
    step_ms <<< "$out" >> "$key.ms"
    [ "$mode" != compile ] || sed -n 's/^compile_ms=\([0-9.]*\).*/\1/p' <<< "$out" >> "$key.compile"
}

# "median (min-max)" of the per-round ratios A / B of two configs' figures,
# "-" when either has none.
ratio() {
    [ -s "$1.ms" ] && [ -s "$2.ms" ] || { printf -- "-"; return; }
    paste "$1.ms" "$2.ms" | awk '{ print $1 / $2 }' | summary
}

[ -x "$build/bench/sgemm" ] || make -C "$build" bench/sgemm >&2
[ -x "$build/bench/conv_sum" ] || make -C "$build" bench/conv_sum >&2

echo "conv bench: $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1), $(nproc) cores, $runs rounds"
echo "SGD lr 0.01 momentum 0.9, OMP_WAIT_POLICY=PASSIVE for all; OMP_NUM_THREADS = --threads"
echo "PyTorch: $torch_line"
echo "ms per training step (forward, loss, backward, update; not data loading),"
echo "median over rounds (min-max); CNN $cnn_steps steps, MLP $mlp_steps, the first 3 untimed"
echo

for r in $(seq "$runs"); do
    for t in "${thread_counts[@]}"; do
        for c in $(configs); do
            run "$c" "$t"
        done
        OMP_NUM_THREADS=$t "$build/bench/sgemm" 1024 "$t" 10 | sed -n 's/.*median=\([0-9.]*\) .*/\1/p' >> "$tmp/$t.sgemm"
    done
    echo "round $r of $runs done" >&2
done

row() { printf "  %-16s %-24s %-24s %s\n" "$@"; }
cell() { if [ -s "$tmp/$1.ms" ]; then summary < "$tmp/$1.ms"; else printf -- "-"; fi; }
for t in "${thread_counts[@]}"; do
    echo "$t thread$([ "$t" = 1 ] || echo s) (--threads $t)"
    row "" "cnn, batch 64" "cnn, batch 32" "mlp, batch 128"
    row "tdbg eager" "$(cell "$t.tdbg:eager:cnn:64")" "$(cell "$t.tdbg:eager:cnn:32")" "$(cell "$t.tdbg:eager:mlp:128")"
    row "tdbg graph" "$(cell "$t.tdbg:graph:cnn:64")" "$(cell "$t.tdbg:graph:cnn:32")" "-"
    if [ -n "$torch_version" ]; then
        row "torch eager" "$(cell "$t.torch:eager:cnn:64")" "-" "$(cell "$t.torch:eager:mlp:128")"
        if [ -s "$tmp/$t.torch:compile:cnn:64.ms" ]; then
            row "torch.compile" "$(cell "$t.torch:compile:cnn:64")" "-" "-"
            echo "  torch.compile's compile time: $(awk '{ print $1 / 1e3 }' "$tmp/$t.torch:compile:cnn:64.compile" | summary %.1f) s"
        elif [ -e "$tmp/compile.why" ]; then
            echo "  torch.compile: $(cat "$tmp/compile.why")"
        fi
    fi
    echo
done

echo "ratios of step times, median of the per-round ratios (min-max)"
printf "  %-50s %-24s %s\n" "" "1 thread" "2 threads"
ratio_row() {
    printf "  %-50s %-24s %s\n" "$1" "$(ratio "$tmp/1.$2" "$tmp/1.$3")" "$(ratio "$tmp/2.$2" "$tmp/2.$3")"
}
if [ -n "$torch_version" ]; then
    if [ -s "$tmp/1.torch:compile:cnn:64.ms" ] || [ -s "$tmp/2.torch:compile:cnn:64.ms" ]; then
        ratio_row "cnn 64: tdbg eager / torch.compile" tdbg:eager:cnn:64 torch:compile:cnn:64
        ratio_row "cnn 64: tdbg graph / torch.compile" tdbg:graph:cnn:64 torch:compile:cnn:64
    else
        echo "  cnn 64: tdbg / torch.compile: torch.compile $(cat "$tmp/compile.why")"
    fi
    ratio_row "cnn 64: tdbg eager / torch eager" tdbg:eager:cnn:64 torch:eager:cnn:64
    ratio_row "cnn 64: tdbg graph / torch eager" tdbg:graph:cnn:64 torch:eager:cnn:64
fi
ratio_row "cnn 32: tdbg eager / tdbg graph (graph speed-up)" tdbg:eager:cnn:32 tdbg:graph:cnn:32
ratio_row "cnn 64: tdbg eager / tdbg graph (graph speed-up)" tdbg:eager:cnn:64 tdbg:graph:cnn:64
[ -z "$torch_version" ] || ratio_row "mlp 128: tdbg eager / torch eager" tdbg:eager:mlp:128 torch:eager:mlp:128
echo

# The CNN's conv FLOPs per step at batch 64, from its default channels.
channels=$("$build/examples/cnn" --help | sed -n 's/^  --channels .*(\([0-9]*,[0-9]*,[0-9]*\))$/\1/p')
[ -n "$channels" ] || { echo "bench: no default for --channels in 'cnn --help'" >&2; exit 1; }
gflop=$(awk -v c="$channels" 'BEGIN { split(c, k, ",")
    fwd = 2 * 9 * (3 * k[1] * 32 * 32 + k[1] * k[2] * 32 * 32 + k[2] * k[3] * 16 * 16)
    printf "%.4f", 3 * fwd * 64 / 1e9 }')
echo "cnn step floor: convs 3-${channels//,/-}, batch 64: $gflop GFLOP (3 x forward) at the sgemm rate"
for t in "${thread_counts[@]}"; do
    floor=$(awk -v g="$gflop" '{ print g / $1 * 1e3 }' "$tmp/$t.sgemm")
    echo "  $t thread$([ "$t" = 1 ] || echo s): sgemm 1024 $(summary %.1f < "$tmp/$t.sgemm") GFLOP/s, floor $(summary <<< "$floor") ms"
    for m in eager graph; do
        printf "    fraction of the sgemm floor reached, tdbg %s: %s\n" "$m" \
            "$(paste <(echo "$floor") "$tmp/$t.tdbg:$m:cnn:64.ms" | awk '{ print $1 / $2 }' | summary %.3f)"
    done
done

# Graph mode's conv + add in one kernel (the fuse-sum pass) against the two
# kernels apart, on a residual block with a projection shortcut.
echo
echo "conv + add in one kernel (fuse-sum) against the two apart: bench/conv_sum $runs THREADS"
for t in "${thread_counts[@]}"; do
    OMP_NUM_THREADS=$t "$build/bench/conv_sum" "$runs" "$t" | sed 's/^/  /'
done
