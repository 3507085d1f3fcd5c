#!/bin/bash
# dump.sh BUILDDIR SRCDIR — the dump's part of `make bench`, in one run:
# (1) write throughput: the disk's own sequential write speed (dd with
# fdatasync), tdbg's writer (MB/s of tensor bytes over the wall time during
# which a step was being built, written or synced, fsync and rename
# included) and h5py writing the same tensors, one file per step with fsync;
# (2) the training slowdown with full dumps of every op's inputs and
# outputs on a few steps (3 of 30: the whole run's time against the run's
# without a dump) and on every step, with statistics-only dumps of every op
# (the default selection: every op's outputs, forward, backward and update),
# and with statistics of everything (inputs too, parameters and gradients),
# on every step (the fastest step against the fastest step without a dump).
#
# Environment: THREADS (all cores), RUNS (5), PYTHON (/usr/bin/python3).
set -euo pipefail

runs_default=5
. "$(dirname "$0")/lib.sh"
export OMP_WAIT_POLICY=PASSIVE
tmp=$(mktemp -d "${TMPDIR:-/var/tmp}/tdbg-bench.XXXXXX") # on disk, not a tmpfs
trap 'rm -rf "$tmp"' EXIT
mlp=("$build/examples/mlp" --batch 128 --threads "$threads" --optim sgd --lr 0.01 --momentum 0.9
     --train-size 4096 --log-every 1000000 --time)
all="io=both;phase=forward,backward,update,params,grads"

# How much slower A is than B, in per cent.
slower_pct() { awk -v a="$1" -v b="$2" 'BEGIN { print 100 * (a / b - 1) }'; }

# A training run's figure is its fastest step, as in bench/debug.sh: other
# tenants move the median of a short run by 10-20%, the fastest step much
# less, and what a dump costs is paid in every step.

# Each round: the disk, then tdbg's writer and h5py on the same tensors, then
# the five training runs. The disk's speed drifts by half between minutes
# on this kind of machine, so every ratio is taken within its round.
for r in $(seq "$runs"); do
    dd if=/dev/zero of="$tmp/dd.bin" bs=1M count=256 conv=fdatasync 2>&1 |
        awk '/copied/ { for (i = 1; i <= NF; i++) if ($i == "s,") print $1 / $(i - 1) / 1e6 }' >> "$tmp/dd"
    rm -f "$tmp/dd.bin"
    rm -rf "$tmp/tdbg" "$tmp/h5py"
    out=$("${mlp[@]}" --steps 6 --dump "dir=$tmp/tdbg;$all")
    field MB_per_s <<< "$out" | tail -1 >> "$tmp/tdbg.mbs"
    paste "$tmp/dd" "$tmp/tdbg.mbs" | tail -1 | awk '{ print $2 / $1 }' >> "$tmp/tdbg_dd"
    if "$python" -c 'import h5py' 2>/dev/null; then
        "$python" "$src/bench/h5py_write.py" "$tmp/tdbg" "$tmp/h5py" | field MB_per_s >> "$tmp/h5py.mbs"
        paste "$tmp/h5py.mbs" "$tmp/tdbg.mbs" | tail -1 | awk '{ print $2 / $1 }' >> "$tmp/tdbg_h5py"
    fi
    rm -rf "$tmp/tdbg" "$tmp/h5py"
    none_out=$("${mlp[@]}" --steps 30)
    none=$(fastest_ms <<< "$none_out")
    # a few steps: the run's time, as most of its steps dump nothing
    few=$("${mlp[@]}" --steps 30 --dump "dir=$tmp/d;$all;steps=10-12" | total_ms)
    rm -rf "$tmp/d"
    slower_pct "$few" "$(total_ms <<< "$none_out")" >> "$tmp/few.pct"
    for k in full stats stats_all; do
        case $k in
        full) spec="dir=$tmp/d;$all" ;;
        stats) spec="dir=$tmp/d;what=stats" ;;
        stats_all) spec="dir=$tmp/d;$all;what=stats" ;;
        esac
        t=$("${mlp[@]}" --steps 30 --dump "$spec" | fastest_ms)
        echo "$t" >> "$tmp/$k.ms"
        slower_pct "$t" "$none" >> "$tmp/$k.pct"
        rm -rf "$tmp/d"
    done
    echo "$none" >> "$tmp/none.ms"
    echo "round $r of $runs done" >&2
done

echo "dumps: $threads threads, $runs rounds, MLP 784-1024-1024-10 batch 128, in $(df -T "$tmp" | awk 'NR == 2 { print $2 }') at $tmp"
echo "(median over rounds, min-max; ratios and slowdowns are taken within each round)"
printf "%-46s %s MB/s\n" "disk, dd bs=1M conv=fdatasync" "$(summary < "$tmp/dd")"
printf "%-46s %s MB/s\n" "tdbg writer, every tensor of every op" "$(summary < "$tmp/tdbg.mbs")"
printf "%-46s %s\n" "  tdbg / dd" "$(summary %.2f < "$tmp/tdbg_dd")"
if [ -s "$tmp/h5py.mbs" ]; then
    printf "%-46s %s MB/s\n" "h5py, the same tensors" "$(summary < "$tmp/h5py.mbs")"
    printf "%-46s %s\n" "  tdbg / h5py" "$(summary %.2f < "$tmp/tdbg_h5py")"
else
    echo "h5py: skipped, '$python' cannot import h5py"
fi
printf "%-46s %s ms/step (fastest step)\n" "training, no dump" "$(summary %.2f < "$tmp/none.ms")"
printf "%-46s %s%% vs no dump (the run's time)\n" "training, full dump of 3 of 30 steps" "$(summary %+.1f < "$tmp/few.pct")"
label_full="training, full dump of everything"
label_stats="training, statistics of every op"
label_stats_all="training, statistics of everything"
for k in full stats stats_all; do
    label=label_$k
    printf "%-46s %s ms/step, %s%% vs no dump\n" "${!label}" "$(summary %.2f < "$tmp/$k.ms")" \
        "$(summary %+.1f < "$tmp/$k.pct")"
done
