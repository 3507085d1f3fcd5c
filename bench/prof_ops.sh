#!/bin/bash
# prof_ops.sh BUILDDIR SRCDIR — the per-op part of `make bench` (issue 19):
# where tdbg's engine spends a training step against PyTorch, layer kind by
# layer kind, forward and backward apart, from the two profilers.
#
# Models: the CNN (examples/cnn, batch 64, SGD lr 0.01 momentum 0.9) and the
# GPT (examples/gpt's defaults, read from `gpt --help`: layers, heads, embd,
# block, batch, dropout, AdamW lr and weight decay, clip), in tdbg with
# --profile over STEPS steps after the examples' 3 untimed warm-up steps
# (`--profile 'file=F;steps=3-B;keep=STEPS'`), and the same models in
# PyTorch (bench/torch_ops.py: torch_train.py's CNN, torch_gpt.py's GPT with
# the attention composed of matmul, scale, masked_fill, softmax, dropout,
# matmul as tdbg's is; TORCH_ATTN=sdpa for F.scaled_dot_product_attention)
# under torch.profiler.profile(activities=[CPU], record_shapes=True) over
# as many steps after 3 unprofiled ones. OMP_NUM_THREADS=T,
# OPENBLAS_NUM_THREADS=T, --threads T / torch.set_num_threads(T),
# OMP_WAIT_POLICY=PASSIVE; T in THREAD_COUNTS, one table per model and T.
#
# Every round runs each model once on each side (tdbg first in odd rounds,
# PyTorch first in even ones); a row's figure is ms per step, the median
# over the rounds; its ratio tdbg/torch and excess (tdbg - torch, ms) are
# taken within a round, then their median (min-max). Rows are sorted by
# the excess, largest first.
#
# Each side counts each microsecond once:
# - tdbg: an op event's dur is its self time (the engine's ops do not
#   overlap, docs/profiler.md), summed by kind and by the op's args.phase;
#   the script checks the sum against tdbg-prof --json's op_ms. "outside
#   ops" is a phase's time (forward, backward, update) less its loader
#   waits (the CNN loads its next batch inside the forward phase; the
#   steps' time: lines leave it out too) and its ops' (tape bookkeeping,
#   gradient clipping at the end of the backward phase).
# - torch: bench/torch_ops.py walks the profiler's event tree; the outermost
#   op of a layer gets its total time (children included) in the forward,
#   the autograd nodes that layer's ops created (found by sequence number)
#   in the backward; the self time of the rest is "outside ops" (Python,
#   dispatch between ops, clip_grad_norm_, the loss's seed). Its header
#   lists the torch op names of each kind.
#
# tdbg op type (args.type, Grad suffix = the same kind)  kind      torch
#   Conv2D                                  conv           aten::conv2d / ConvolutionBackward0
#   BatchNorm                               batchnorm      aten::batch_norm (+ add_ of num_batches_tracked)
#   Relu                                    relu           aten::relu / ReluBackward0
#   MaxPool2D                               maxpool        aten::max_pool2d
#   GlobalAvgPool                           avgpool        aten::adaptive_avg_pool2d (mean)
#   Linear                                  linear         aten::linear (addmm, mm) / AddmmBackward0, MmBackward0, TBackward0
#   CrossEntropy                            cross_entropy  aten::cross_entropy_loss / NllLoss-, LogSoftmaxBackward0
#   LayerNorm                               layernorm      aten::layer_norm
#   Gelu                                    gelu           aten::gelu
#   Embedding (wte, wpe)                    embedding      aten::embedding
#   MatMul (attention's scores and out)     attn_matmul    aten::matmul (expand, reshape, bmm)
#   Scale                                   attn_scale     aten::mul
#   MaskedFill                              attn_mask      aten::masked_fill (+ the mask's triu, ones)
#   Softmax                                 softmax        aten::softmax
#   Dropout named */attn/dropout            attn_dropout   aten::dropout of a 4-D input
#   Dropout, others (resid_dropout)         dropout        aten::dropout
#   Add                                     add            aten::add
#   Reshape, Transpose, Flatten, and the    views          view, reshape, transpose, split, flatten, slice, ...
#     Embedding named */attn/embedding*                    (c_attn's q, k, v rows: tdbg gathers the weight's
#                                                           rows, torch splits c_attn's output)
#   every op of the update phase (SGD,      update         Optimizer.step#..., Optimizer.zero_grad#...
#     AdamW: update/*)
#   -                                       grad_accum     AccumulateGrad (torch only)
# A tdbg type not listed becomes its own kind, "other:TYPE".
#
# Both step times are taken with the profiler on (the `time:` lines'
# median over the profiled steps); torch.profiler adds a few us per event
# (bench/prof.sh measures both profilers' cost).
#
# Environment: RUNS (3), THREAD_COUNTS ("1 2"), MODELS ("cnn gpt"),
# CNN_STEPS (5), GPT_STEPS (10), TORCH_ATTN (composed), DATA (gpt's text,
# as bench/gpt.sh), PYTHON (/opt/torchenv/bin/python when it exists, else
# /usr/bin/python3; without an importable torch the script says so and
# stops).
set -euo pipefail

runs_default=3
[ -n "${PYTHON:-}" ] || [ ! -x /opt/torchenv/bin/python ] || PYTHON=/opt/torchenv/bin/python
. "$(dirname "$0")/lib.sh"
export OMP_WAIT_POLICY=PASSIVE
thread_counts=(${THREAD_COUNTS:-1 2})
models=(${MODELS:-cnn gpt})
attn=${TORCH_ATTN:-composed}
warmup=3 # the examples' untimed steps (examples/common.c), torch_report.WARMUP

gpt=$build/examples/gpt
gpt_defaults
gpt_model=(--layers "${def[layers]}" --heads "${def[heads]}" --embd "${def[embd]}" --block "${def[block]}")

torch_version=$("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null) || {
    echo "per-op comparison: skipped (no torch importable by $python)"
    exit 0
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

steps_of() { case $1 in cnn) echo "${CNN_STEPS:-5}" ;; *) echo "${GPT_STEPS:-10}" ;; esac; }
batch_of() { case $1 in cnn) echo 64 ;; *) echo "${def[batch]}" ;; esac; }

# The command line of ENGINE on MODEL at THREADS, tdbg's trace to FILE, into
# the array cmd.
command_of() {
    local engine=$1 model=$2 t=$3 file=$4 n batch
    n=$(steps_of "$model")
    batch=$(batch_of "$model")
    if [ "$engine" = tdbg ]; then
        local p=(--profile "file=$file;steps=$warmup-$((warmup + n - 1));keep=$n")
        if [ "$model" = gpt ]; then
            cmd=("$gpt" "${gpt_model[@]}" --batch "$batch" --dropout "${def[dropout]}" --lr "${def[lr]}" \
                --weight-decay "${def[weight-decay]}" --clip "${def[clip]}" --steps $((warmup + n)) --warmup 0 \
                --eval-every 0 --data "$data" --threads "$t" --log-every 1000000 --time "${p[@]}")
        else
            cmd=("$build/examples/$model" --batch "$batch" --steps $((warmup + n)) --threads "$t" --workers 0
                 --optim sgd --lr 0.01 --momentum 0.9 --log-every 1000000 --time "${p[@]}")
        fi
    else
        local m=(--lr 0.01 --momentum 0.9)
        if [ "$model" = gpt ]; then
            m=("${gpt_model[@]}" --dropout "${def[dropout]}" --lr "${def[lr]}" --weight-decay "${def[weight-decay]}"
               --clip "${def[clip]}" --attn "$attn")
        fi
        cmd=("$python" "$src/bench/torch_ops.py" --model "$model" --batch "$batch" --steps "$n" --threads "$t" "${m[@]}")
    fi
}

# tdbg's trace FILE as torch_ops.py's lines: `row PASS KIND MS COUNT` per
# step, `types PASS KIND T1,T2` (the op types in the row, less Grad).
tdbg_rows() {
    awk '
        function str(key,   s) {
            if (!match($0, "\"" key "\":\"[^\"]*\"")) return ""
            s = substr($0, RSTART, RLENGTH); sub(/^"[^"]*":"/, "", s); return substr(s, 1, length(s) - 1) }
        function num(key,   s) {
            if (!match($0, "\"" key "\":[-0-9.e+]+")) return 0
            s = substr($0, RSTART, RLENGTH); sub(/^"[^"]*":/, "", s); return s + 0 }
        function kind(type, name, phase) {
            if (phase == "update") return "update"
            sub(/Grad$/, "", type)
            if (type == "Conv2D") return "conv"
            if (type == "BatchNorm") return "batchnorm"
            if (type == "Relu") return "relu"
            if (type == "MaxPool2D") return "maxpool"
            if (type == "GlobalAvgPool") return "avgpool"
            if (type == "Linear") return "linear"
            if (type == "CrossEntropy") return "cross_entropy"
            if (type == "LayerNorm") return "layernorm"
            if (type == "Gelu") return "gelu"
            if (type == "Embedding") return name ~ /attn\/embedding/ ? "views" : "embedding"
            if (type == "MatMul") return "attn_matmul"
            if (type == "Scale") return "attn_scale"
            if (type == "MaskedFill") return "attn_mask"
            if (type == "Softmax") return "softmax"
            if (type == "Dropout") return name ~ /attn\/dropout/ ? "attn_dropout" : "dropout"
            if (type == "Add") return "add"
            if (type == "Reshape" || type == "Transpose" || type == "Flatten") return "views"
            return "other:" type }
        /"cat":"step"/ { steps++ }
        # A phase less its loader waits and hooks (args.data_ns, hooks_ns).
        /"cat":"phase"/ { phase_ms[str("name")] += num("dur") / 1e3 - (num("data_ns") + num("hooks_ns")) / 1e6 }
        /"cat":"op"/ {
            p = str("phase"); t = str("type"); k = p SUBSEP kind(t, str("name"), p); d = num("dur") / 1e3
            sub(/Grad$/, "", t)
            ms[k] += d; n[k]++; in_ops[p] += d; all += d
            if (index("," types[k] ",", "," t ",") == 0) types[k] = types[k] (types[k] == "" ? "" : ",") t }
        END {
            if (!steps) { print "no step events" > "/dev/stderr"; exit 1 }
            for (k in ms) {
                split(k, pk, SUBSEP)
                printf "row %s %s %.4f %g\ntypes %s %s %s\n", pk[1], pk[2], ms[k] / steps, n[k] / steps, pk[1], pk[2], types[k] }
            for (p in phase_ms)
                if (p == "forward" || p == "backward" || p == "update")
                    printf "row %s outside %.4f 0\n", p, (phase_ms[p] - in_ops[p]) / steps
            printf "op_ms %.4f\n", all }' "$1"
}

# One run: appends `ENGINE ROUND PASS KIND MS` lines (and `wall`) to
# $tmp/MODEL.T, the types (tdbg), leaves and unmapped ops (torch) of the
# last round to $tmp/MODEL.T.ENGINE.info.
run() {
    local engine=$1 model=$2 t=$3 r=$4 file="$tmp/trace.json" out
    local -a cmd
    command_of "$engine" "$model" "$t" "$file"
    rm -f "$file"
    if ! OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t "${cmd[@]}" > "$tmp/out" 2> "$tmp/err"; then
        printf 'bench: %s failed:\n' "${cmd[*]}" >&2
        cat "$tmp/out" "$tmp/err" >&2
        exit 1
    fi
    out=$(cat "$tmp/out")
    local wall
    wall=$(step_ms <<< "$out")
    [ -n "$wall" ] || { printf 'bench: %s printed no time line:\n%s\n' "${cmd[*]}" "$out" >&2; exit 1; }
    if [ "$engine" = tdbg ]; then
        [ -s "$file" ] || { printf 'bench: %s wrote no trace:\n%s\n' "${cmd[*]}" "$out" >&2; exit 1; }
        out=$(tdbg_rows "$file")
        # The kinds' sum against tdbg-prof's time in ops: the same ops counted once.
        local mine theirs
        mine=$(sed -n 's/^op_ms //p' <<< "$out")
        theirs=$("$build/prof/tdbg-prof" --json "$file" | sed -n 's/^ *"op_ms": *\([0-9.e+-]*\),*$/\1/p')
        awk -v a="$mine" -v b="$theirs" 'BEGIN { exit !(b > 0 && a / b > 0.999 && a / b < 1.001) }' || {
            echo "bench: the rows of $model's trace sum to $mine ms, tdbg-prof says $theirs ms in ops" >&2
            exit 1
        }
    fi
    grep '^row ' <<< "$out" | awk -v e="$engine" -v r="$r" '{ print e, r, $2, $3, $4 }' >> "$tmp/$model.$t"
    echo "$engine $r wall - $wall" >> "$tmp/$model.$t"
    grep -E '^(types|leaf|unmapped) ' <<< "$out" > "$tmp/$model.$t.$engine.info" || true
}

# The table of MODEL at T threads from $tmp/MODEL.T.
table() {
    local model=$1 t=$2 k=$tmp/$1.$2
    printf '%s, %s thread(s): ms per step, median of %s rounds; tdbg/torch and excess (tdbg - torch):' \
        "$model" "$t" "$runs"
    printf ' median (min..max) of the per-round values; sorted by excess\n'
    printf '  %-14s %-9s %9s %9s  %-20s %-28s %-26s %s\n' kind pass "tdbg ms" "torch ms" "tdbg/torch" "excess ms" \
        "tdbg op types" "torch: top op by self time"
    awk -v runs="$runs" '
        function med(a, n,   i, j, x, b) {
            for (i = 1; i <= n; i++) b[i] = a[i]
            for (i = 2; i <= n; i++) { x = b[i]; for (j = i - 1; j >= 1 && b[j] > x; j--) b[j + 1] = b[j]; b[j + 1] = x }
            lo = b[1]; hi = b[n]
            return n % 2 ? b[(n + 1) / 2] : (b[n / 2] + b[n / 2 + 1]) / 2 }
        # "median (min-max)" of the n values in a, FORMAT f.
        function span(a, n, f,   m) { if (!n) return "-"; m = med(a, n); return sprintf(f " (" f ".." f ")", m, lo, hi) }
        FILENAME ~ /info$/ {
            if ($1 == "types") types[$2 SUBSEP $3] = $4
            if ($1 == "leaf") leaf[$2 SUBSEP $3] = sprintf("%s %.2f", $4, $5)
            next }
        { key = $3 SUBSEP $4; v[$1, $2, key] += $5; if (!(key in seen)) { seen[key] = 1; keys[++nk] = key } }
        END {
            for (i = 1; i <= nk; i++) {
                key = keys[i]; split(key, pk, SUBSEP); na = nr = 0
                for (r = 1; r <= runs; r++) {
                    a = v["tdbg", r, key] + 0; b = v["torch", r, key] + 0
                    ta[r] = a; tb[r] = b; d[r] = a - b; if (b > 0 && a > 0) rt[++nr] = a / b
                    if (pk[1] != "wall") { sa[r] += a; sb[r] += b }
                }
                line = sprintf("%-14s %-9s %9.3f %9.3f  %-20s %-28s %-26s %s", pk[2] == "-" ? "step wall" : pk[2],
                               pk[1] == "wall" ? "(time:)" : pk[1], med(ta, runs), med(tb, runs),
                               span(rt, nr, "%.2f"), span(d, runs, "%+.3f"),
                               pk[1] == "wall" ? "" : (key in types) ? types[key] : "-",
                               pk[1] == "wall" ? "" : (key in leaf) ? leaf[key] : "-")
                if (pk[1] == "wall") wall = line
                else { m = med(d, runs); printf "%.6f\t%s\n", m, line | "sort -t \"\t\" -k1,1gr | cut -f2- | sed \"s/^/  /\"" }
            }
            close("sort -t \"\t\" -k1,1gr | cut -f2- | sed \"s/^/  /\"")
            for (r = 1; r <= runs; r++) { d[r] = sa[r] - sb[r]; ta[r] = sa[r]; tb[r] = sb[r]; rt[r] = sb[r] > 0 ? sa[r] / sb[r] : 0 }
            printf "  %-14s %-9s %9.3f %9.3f  %-20s %s\n", "total", "", med(ta, runs), med(tb, runs),
                   span(rt, runs, "%.2f"), span(d, runs, "%+.3f")
            print "  " wall }' "$k.tdbg.info" "$k.torch.info" "$k" | sed 's/[[:space:]]*$//'
    local top
    top=$(awk '$1 == "unmapped" { printf "%s%s %.3f", n++ ? ", " : "", $3, $4 } n == 6 { exit }' "$k.torch.info")
    [ -z "$top" ] || echo "  torch's top-level ops in 'outside', ms per step (last round): $top"
    echo
}

echo "per op against PyTorch: tdbg --profile and torch.profiler (CPU, record_shapes), OMP_WAIT_POLICY=PASSIVE," \
     "$runs rounds, threads ${thread_counts[*]}"
echo "models: cnn batch 64, SGD lr 0.01 momentum 0.9 ($(steps_of cnn) profiled steps); gpt ${def[layers]} layers" \
     "${def[heads]} heads embd ${def[embd]} block ${def[block]} batch ${def[batch]} dropout ${def[dropout]}, AdamW," \
     "clip ${def[clip]} ($(steps_of gpt) profiled steps; torch attention: $attn); $warmup warm-up steps first"
echo "CPU: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1), $(nproc) cores; PyTorch $torch_version;" \
     "$(date -u '+%Y-%m-%d %H:%M UTC')"
echo

for r in $(seq "$runs"); do
    order=(tdbg torch)
    [ $((r % 2)) = 1 ] || order=(torch tdbg)
    for t in "${thread_counts[@]}"; do
        for model in "${models[@]}"; do
            for e in "${order[@]}"; do
                run "$e" "$model" "$t" "$r"
            done
        done
    done
    echo "round $r of $runs done" >&2
done

for t in "${thread_counts[@]}"; do
    for model in "${models[@]}"; do
        table "$model" "$t"
    done
done
