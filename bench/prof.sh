#!/bin/bash
# prof.sh BUILDDIR SRCDIR — the profiler's part of `make bench`: what
# recording costs on the example MLP (784-1024-1024-10, batch 128), CNN
# (batch 64) and GPT (examples/gpt's defaults, read from `gpt --help`),
# tdbg's `--profile` against none, beside torch.profiler against none on the
# same models, sizes and optimizers (bench/torch_prof.py: profile(activities=
# [CPU], record_shapes=True) around the training loop), in the same rounds.
#
# On: every step recorded (no steps= range), the ring at its default keep
# (10), the file written after the last step (tdbg: --profile file=F;
# torch: export_chrome_trace). The gate is the steps' CPU time (the
# examples' and torch_prof.py's cpu_ms: the process's user and system time
# over the timed steps, data loading left out), one compute thread
# (OMP_NUM_THREADS=1, OPENBLAS_NUM_THREADS=1, --threads 1), where wall-clock
# noise on a shared machine is larger than the 2% to be seen. Beside it:
# the median step's wall time and the whole process's user+sys CPU time
# (start-up, writing the trace and the final evaluation included), and the
# same at 2 threads (OMP_NUM_THREADS=2 ...), what a user sees, noisier.
#
# Every round runs every configuration once, off and on next to each other
# (the order flipped every other round); a ratio on/off is taken within a
# round, then its median and min-max over rounds. OMP_WAIT_POLICY=PASSIVE
# for every program (see bench/graph.sh). The tdbg on runs also say the ops
# a step records and the trace's size, so the overhead per op is printed.
#
# CPU time on a shared 2-core guest still swings by more than 2% from run
# to run, so the script then measures the profiler's cost per op directly
# (bench/prof_op_cost: small ops, off and on alternating, the thread's CPU
# clock) and scales it by each model's ops per step, and ends with perf's
# attribution where `perf record`
# works: one profiled run of each model (one thread, PERF_STEPS), sampled
# at 1 kHz of CPU time (cpu-clock) with DWARF call chains; the samples with
# a profiler function (te_prof_*, te_profile_*, the JSON writer's put_*)
# on their stack, over the CPU time of the run's steps (one sample per ms;
# the timed steps' mean times the steps, all of them recorded), and apart
# from them those of the file's writing.
#
# Environment: RUNS (5), THREAD_COUNTS ("1 2"), MLP_STEPS (30), CNN_STEPS
# (10), GPT_STEPS (13; the first 3 steps of every run are not timed),
# MODELS ("mlp cnn gpt"), PERF (1; 0 skips perf), PERF_STEPS ("100 20 30":
# mlp, cnn, gpt), DATA (gpt's text, as bench/gpt.sh), PYTHON
# (/opt/torchenv/bin/python when it exists, else /usr/bin/python3; without
# an importable torch the PyTorch rows are skipped).
set -euo pipefail

runs_default=5
[ -n "${PYTHON:-}" ] || [ ! -x /opt/torchenv/bin/python ] || PYTHON=/opt/torchenv/bin/python
. "$(dirname "$0")/lib.sh"
export OMP_WAIT_POLICY=PASSIVE
thread_counts=(${THREAD_COUNTS:-1 2})
models=(${MODELS:-mlp cnn gpt})
sgd=(--lr 0.01 --momentum 0.9)

gpt=$build/examples/gpt
gpt_defaults
gpt_model=(--layers "${def[layers]}" --heads "${def[heads]}" --embd "${def[embd]}" --block "${def[block]}")

torch_version=$("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null) || torch_version=
engines=(tdbg)
[ -z "$torch_version" ] || engines+=(torch)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

steps_of() { case $1 in mlp) echo "${MLP_STEPS:-30}" ;; cnn) echo "${CNN_STEPS:-10}" ;; *) echo "${GPT_STEPS:-13}" ;; esac; }
batch_of() { case $1 in mlp) echo 128 ;; cnn) echo 64 ;; *) echo "${def[batch]}" ;; esac; }

# The command line of ENGINE on MODEL at THREADS, profiling or not (PROF
# off|on), its trace written to FILE, into the array cmd.
command_of() {
    local engine=$1 model=$2 t=$3 prof=$4 file=$5 steps batch
    steps=$(steps_of "$model")
    batch=$(batch_of "$model")
    if [ "$engine" = tdbg ]; then
        local p=()
        [ "$prof" = off ] || p=(--profile "file=$file")
        if [ "$model" = gpt ]; then
            cmd=("$gpt" "${gpt_model[@]}" --batch "$batch" --dropout "${def[dropout]}" --lr "${def[lr]}" \
                --weight-decay "${def[weight-decay]}" --clip "${def[clip]}" --steps "$steps" --warmup 0 \
                --eval-every 0 --data "$data" --threads "$t" --log-every 1000000 --time "${p[@]}")
        else
            cmd=("$build/examples/$model" --batch "$batch" --steps "$steps" --threads "$t" --workers 0
                 --optim sgd "${sgd[@]}" --log-every 1000000 --time "${p[@]}")
        fi
    else
        local m=()
        if [ "$model" = gpt ]; then
            m=("${gpt_model[@]}" --dropout "${def[dropout]}" --lr "${def[lr]}" --weight-decay "${def[weight-decay]}"
               --clip "${def[clip]}")
        else
            m=("${sgd[@]}")
        fi
        cmd=("$python" "$src/bench/torch_prof.py" --model "$model" --batch "$batch" --steps "$steps"
             --threads "$t" --profile "$prof" --trace "$file" "${m[@]}")
    fi
}

# One run; appends to $tmp/ENGINE.MODEL.T.PROF.{cpu,ms,proc} the steps' CPU
# ms per step, the median step's wall ms and the process's user+sys seconds,
# and for a profiled run the trace's bytes (.bytes) and tdbg's ops per step
# (.ops).
run() {
    local engine=$1 model=$2 t=$3 prof=$4 key="$tmp/$1.$2.$3.$4" file="$tmp/trace.json" out
    local -a cmd
    command_of "$engine" "$model" "$t" "$prof" "$file"
    rm -f "$file"
    local TIMEFORMAT='%U %S'
    if ! { time OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t "${cmd[@]}" > "$tmp/out" 2> "$tmp/err"; } 2> "$tmp/time"; then
        printf 'bench: %s failed:\n' "${cmd[*]}" >&2
        cat "$tmp/out" "$tmp/err" >&2
        exit 1
    fi
    out=$(cat "$tmp/out")
    local line
    line=$(grep '^time: ' <<< "$out") || { printf 'bench: %s printed no time line:\n%s\n' "${cmd[*]}" "$out" >&2; exit 1; }
    awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } }
         END { print v["cpu_ms"] / v["steps"] }' <<< "$line" >> "$key.cpu"
    step_ms <<< "$out" >> "$key.ms"
    awk '{ print $1 + $2 }' "$tmp/time" >> "$key.proc"
    [ "$prof" = on ] || return 0
    [ -s "$file" ] || { printf 'bench: %s wrote no trace:\n%s\n' "${cmd[*]}" "$out" >&2; exit 1; }
    stat -c %s "$file" >> "$key.bytes"
    if [ "$engine" = tdbg ]; then
        echo $(( $(grep -c '"cat":"op"' "$file") / $(grep -c '"cat":"step"' "$file") )) >> "$key.ops"
    fi
}

# The within-round ratios on/off of a figure (cpu, ms, proc) of ENGINE MODEL T.
ratio() { paste "$tmp/$1.$2.$3.on.$4" "$tmp/$1.$2.$3.off.$4" | awk '{ print $1 / $2 }' | summary %.4f; }
# ... as a percentage over 1: "+1.23% (+0.50%-+2.00%)".
overhead() {
    paste "$tmp/$1.$2.$3.on.$4" "$tmp/$1.$2.$3.off.$4" | awk '{ print ($1 / $2 - 1) * 100 }' | summary %+.2f%%
}

echo "profiler overhead: tdbg --profile (every step, keep 10, file at the end) and torch.profiler" \
     "(CPU activities, record_shapes) against none, OMP_WAIT_POLICY=PASSIVE, $runs rounds, threads ${thread_counts[*]}"
echo "models: mlp 784-1024-1024-10 batch 128 ($(steps_of mlp) steps), cnn batch 64 ($(steps_of cnn) steps), SGD lr 0.01" \
     "momentum 0.9; gpt ${def[layers]} layers ${def[heads]} heads embd ${def[embd]} block ${def[block]} batch" \
     "${def[batch]} dropout ${def[dropout]}, AdamW, clip ${def[clip]} ($(steps_of gpt) steps); 3 warm-up steps not timed"
echo "CPU: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1), $(nproc) cores;" \
     "PyTorch: ${torch_version:-not importable by $python: skipped}"
echo

for r in $(seq "$runs"); do
    order=(off on)
    [ $((r % 2)) = 1 ] || order=(on off)
    for t in "${thread_counts[@]}"; do
        for model in "${models[@]}"; do
            for e in "${engines[@]}"; do
                for p in "${order[@]}"; do
                    run "$e" "$model" "$t" "$p"
                done
            done
        done
    done
    echo "round $r of $runs done" >&2
done

for t in "${thread_counts[@]}"; do
    echo "$t thread(s): on/off within a round, median (min-max) over rounds"
    printf "  %-6s %-6s %-32s %-24s %-24s %-26s %s\n" "" "" "steps' CPU: overhead" "CPU ms/step off" \
        "wall ms/step on/off" "process CPU on/off" "trace"
    for model in "${models[@]}"; do
        for e in "${engines[@]}"; do
            k=$e.$model.$t
            trace="$(median < "$tmp/$k.on.bytes" | awk '{ printf "%.2f MB", $1 / 1e6 }')"
            if [ "$e" = tdbg ]; then
                trace="$trace, $(median < "$tmp/$k.on.ops") ops/step"
            fi
            printf "  %-6s %-6s %-32s %-24s %-24s %-26s %s\n" "$model" "$e" "$(overhead "$e" "$model" "$t" cpu)" \
                "$(summary < "$tmp/$k.off.cpu")" "$(ratio "$e" "$model" "$t" ms)" "$(ratio "$e" "$model" "$t" proc)" \
                "$trace"
        done
    done
    echo
done

t=${thread_counts[0]}
echo "gate, $t thread(s): tdbg's profiler on <= 2% of the step's CPU time; per op recorded, the median of the"
echo "rounds' (on - off) CPU time per step over the ops a step records:"
for model in "${models[@]}"; do
    k=tdbg.$model.$t
    per_op=$(paste "$tmp/$k.on.cpu" "$tmp/$k.off.cpu" | awk -v n="$(median < "$tmp/$k.on.ops")" \
        '{ print ($1 - $2) * 1e3 / n }' | summary %.2f)
    printf "  %-4s %s of the step, %s us per op%s\n" "$model" "$(overhead tdbg "$model" "$t" cpu)" "$per_op" \
        "$([ -z "$torch_version" ] || echo "; torch.profiler $(overhead torch "$model" "$t" cpu)")"
done

# The cost per op measured where the noise cannot hide it: bench/prof_op_cost,
# steps of small ops with the profiler off and on in alternating blocks,
# by the thread's CPU clock; times each model's ops per step, over its
# steps' CPU time off: the profiler's share of the step, from the op up.
if [ -x "$build/bench/prof_op_cost" ]; then
    cost=$(OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$build/bench/prof_op_cost" 200 400 9)
    echo
    echo "cost per op ($cost):"
    added=$(sed -n 's/.* added_us_per_op=\([0-9.e+-]*\) .*/\1/p' <<< "$cost")
    for model in "${models[@]}"; do
        k=tdbg.$model.$t
        awk -v a="$added" -v n="$(median < "$tmp/$k.on.ops")" -v ms="$(median < "$tmp/$k.off.cpu")" -v m="$model" \
            'BEGIN { printf "  %-4s %s ops/step x %.3f us = %.1f us of %.2f ms: %.3f%% of the step\n", m, n, a,
                     a * n, ms, 100 * a * n / (ms * 1e3) }'
    done
fi

[ "${PERF:-1}" != 0 ] || exit 0
if ! command -v perf > /dev/null || ! perf record -q -o "$tmp/perf.data" -e cpu-clock true > /dev/null 2>&1; then
    echo
    echo "perf attribution: skipped (no perf, or perf record is not allowed here)"
    exit 0
fi
read -r -a perf_steps <<< "${PERF_STEPS:-100 20 30}"
echo
echo "perf attribution, 1 thread, one profiled run each (perf record -e cpu-clock -F 1000 --call-graph dwarf):"
for model in "${models[@]}"; do
    case $model in mlp) n=${perf_steps[0]} ;; cnn) n=${perf_steps[1]} ;; *) n=${perf_steps[2]} ;; esac
    command_of tdbg "$model" 1 on "$tmp/trace.json"
    for i in "${!cmd[@]}"; do [ "${cmd[$i]}" != --steps ] || cmd[i + 1]=$n; done
    out=$(OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 perf record -q -o "$tmp/perf.data" -e cpu-clock -F 1000 \
          --call-graph dwarf,16384 "${cmd[@]}" 2> "$tmp/err") || { cat "$tmp/err" >&2; exit 1; }
    cpu=$(grep '^time: ' <<< "$out" | sed -n 's/.* steps=\([0-9]*\) .*cpu_ms=\([0-9.]*\).*/\1 \2/p')
    # Samples (blank-line separated stacks) with a profiler frame; those writing the file.
    perf script -i "$tmp/perf.data" -F ip,sym 2> /dev/null | awk -v cpu="$cpu" -v steps="$n" -v model="$model" '
        BEGIN { RS = ""; FS = "\n"; split(cpu, c, " ") }
        { n++; p = w = 0
          for (i = 1; i <= NF; i++) {
              if ($i ~ / (te_prof_|te_profile_|put_op|put_step|put_str|put_us|put_x|event_head|ex_profile_finish)/) p = 1
              if ($i ~ / (te_prof_write_json|te_profile_save|ex_profile_finish)/) w = 1 }
          np += p && !w; nw += w }
        END { ms = c[2] / c[1] * steps
              printf "  %-4s %d samples, %d recording: %.2f%% of %d steps%s CPU time (%.0f ms, from the %d timed" \
                     " ones), %.1f us per step; %d writing the file at the end\n", model, n, np, 100 * np / ms,
                     steps, "\047", ms, c[1], 1e3 * np / steps, nw }'
done
