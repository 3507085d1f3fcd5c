#!/bin/bash
# dp.sh BUILDDIR SRCDIR — data parallel's part of `make bench` (issue 24):
# what the collectives and the debugger across ranks cost. On a 2-core
# machine the point is the overhead, not a speed-up.
#
# Per model (examples/mlp 784-1024-1024-10, batch 128; examples/gpt
# 2 layers, embd 64, block 64, batch 16), the same global batch
# everywhere, these runs interleaved in each round:
#   one      one process, no MPI
#   one2     one process on two threads: the same two cores as dp2
#   dp1      mpirun -np 1 --dp: the bucket copies and the all-reduce, alone
#   dp2      mpirun -np 2 --dp: each rank half the batch
#   one+nan  one process under the debugger with `break nan` armed
#   dp2+nan  2 ranks, each with the debugger and `break nan` armed (TDBG=batch)
# one compute thread per process but one2. Each run's figure is rank 0's
# median ms per step (its `time:` line);
# ratios are taken within a round, then their median (min-max) over rounds.
#
# Environment: RUNS (5), STEPS_MLP (40), STEPS_GPT (40), MPIRUN (mpirun).
set -euo pipefail

runs_default=5
. "$(dirname "$0")/lib.sh"
export OMP_WAIT_POLICY=PASSIVE OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    OMPI_MCA_btl_vader_single_copy_mechanism=none
mpirun=${MPIRUN:-mpirun}
if ! command -v "$mpirun" >/dev/null; then
    echo "== data parallel: skipped ($mpirun not found: apt-get install openmpi-bin libopenmpi-dev, then ./configure)"
    exit 0
fi
if ! "$mpirun" --oversubscribe -np 1 "$build/examples/mlp" --dp --steps 1 --hidden 8 --batch 8 >/dev/null 2>&1; then
    echo "== data parallel: skipped (this build has no MPI: install libopenmpi-dev, then ./configure)"
    exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
configs=(one one2 dp1 dp2 one+nan dp2+nan)

args_of() { # MODEL
    case $1 in
        mlp) echo "--batch 128 --steps ${STEPS_MLP:-40} --optim sgd --lr 0.01 --momentum 0.9 --train-size 8192" ;;
        gpt) echo "--layers 2 --heads 4 --embd 64 --block 64 --batch 16 --steps ${STEPS_GPT:-40} --eval-every 0 --warmup 5" ;;
    esac
}

run() { # CONFIG MODEL
    local pre=() dp=() threads=1
    case $1 in
        one) ;;
        one2) threads=2 ;;
        dp1) pre=("$mpirun" --oversubscribe -np 1); dp=(--dp) ;;
        dp2) pre=("$mpirun" --oversubscribe -np 2); dp=(--dp) ;;
        one+nan) pre=(env TDBG=batch "TDBG_SCRIPT=break nan") ;;
        dp2+nan) pre=("$mpirun" --oversubscribe -np 2 -x TDBG=batch -x "TDBG_SCRIPT=break nan"); dp=(--dp) ;;
    esac
    # shellcheck disable=SC2046
    OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads "${pre[@]}" "$build/examples/$2" $(args_of "$2") \
        --threads "$threads" --log-every 1000000 --time "${dp[@]}" 2>/dev/null |
        step_ms
}

echo "== data parallel: the collectives and the debugger across ranks ($runs rounds, 1 thread per process)"
echo "   cpu: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc --all) cores; load: $(cut -d' ' -f1-3 /proc/loadavg); $("$mpirun" --version | head -1)"
for r in $(seq "$runs"); do
    for model in mlp gpt; do
        for c in "${configs[@]}"; do
            ms=$(run "$c" "$model")
            [ -n "$ms" ] || { echo "bench: $c $model printed no time line" >&2; exit 1; }
            echo "$ms" >> "$tmp/$model.$c"
        done
    done
    echo "round $r of $runs done" >&2
done

# A over B per round, then the median (min-max).
ratio() { paste "$tmp/$1" "$tmp/$2" | awk '{ print $1 / $2 }' | summary %.3f; }

printf '%-5s | %-20s %-20s %-20s | %-19s %-19s %-19s %-19s %s\n' model "one ms/step" "dp2 ms/step" \
    "dp2+nan ms/step" "dp1/one" "dp2/one" "dp2/one2" "dp2+nan/dp2" "one+nan/one"
for model in mlp gpt; do
    printf '%-5s | %-20s %-20s %-20s | %-19s %-19s %-19s %-19s %s\n' "$model" "$(summary < "$tmp/$model.one")" \
        "$(summary < "$tmp/$model.dp2")" "$(summary < "$tmp/$model.dp2+nan")" \
        "$(ratio "$model.dp1" "$model.one")" "$(ratio "$model.dp2" "$model.one")" \
        "$(ratio "$model.dp2" "$model.one2")" "$(ratio "$model.dp2+nan" "$model.dp2")" \
        "$(ratio "$model.one+nan" "$model.one")"
done
echo "dp1/one: the buckets' copies and an all-reduce with itself; dp2/one: 2 ranks of half the batch, each"
echo "on one thread, against one process of the whole batch on one (0.5 would be a perfect split of 2 free"
echo "cores); dp2/one2: against one process on both threads; dp2+nan/dp2 and one+nan/one: the armed NaN"
echo "check on every op, across 2 ranks and in one process."
