#!/bin/bash
# dump.sh BUILDDIR SRCDIR — the dump's part of `make bench`, in one run:
# (1) write throughput: the disk's own sequential write speed (dd with
# fdatasync), tdbg's writer thread (MB/s of tensor bytes over the time it
# spends writing, fsync and rename included) and h5py writing the same
# tensors, one file per step with fsync; (2) the training slowdown with full
# dumps of every op's inputs and outputs and with statistics-only dumps of
# every op, on every step (median ms per step against no dump).
#
# Environment: THREADS (all cores), RUNS (3), PYTHON (/usr/bin/python3).
set -euo pipefail

if [ $# -ne 2 ]; then
    echo "usage: $0 BUILDDIR SRCDIR" >&2
    exit 2
fi
build=$1
src=$2
threads=${THREADS:-$(nproc)}
runs=${RUNS:-3}
python=${PYTHON:-/usr/bin/python3}
export OMP_WAIT_POLICY=PASSIVE
tmp=$(mktemp -d "${TMPDIR:-/var/tmp}/tdbg-bench.XXXXXX") # on disk, not a tmpfs
trap 'rm -rf "$tmp"' EXIT
mlp=("$build/examples/mlp" --batch 128 --threads "$threads" --optim sgd --lr 0.01 --momentum 0.9
     --train-size 4096 --log-every 1000000 --time)
all="io=both;phase=forward,backward,update,params,grads"

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
field() { sed -n "s/.*$1=\\([0-9.]*\\).*/\\1/p"; }

for r in $(seq "$runs"); do
    dd if=/dev/zero of="$tmp/dd.bin" bs=1M count=256 conv=fdatasync 2>&1 |
        awk '/copied/ { for (i = 1; i <= NF; i++) if ($i == "s,") print $1 / $(i - 1) / 1e6 }' >> "$tmp/dd"
    rm -f "$tmp/dd.bin"
    rm -rf "$tmp/tdbg" "$tmp/h5py"
    out=$("${mlp[@]}" --steps 6 --dump "dir=$tmp/tdbg;$all")
    field MB_per_s <<< "$out" | tail -1 >> "$tmp/tdbg.mbs"
    if "$python" -c 'import h5py' 2>/dev/null; then
        "$python" "$src/bench/h5py_write.py" "$tmp/tdbg" "$tmp/h5py" | field MB_per_s >> "$tmp/h5py.mbs"
    fi
    rm -rf "$tmp/tdbg" "$tmp/h5py"
    "${mlp[@]}" --steps 20 | sed -n 's/^time: ms_per_step median=\([0-9.]*\) .*/\1/p' >> "$tmp/none.ms"
    "${mlp[@]}" --steps 20 --dump "dir=$tmp/full;$all" | sed -n 's/^time: ms_per_step median=\([0-9.]*\) .*/\1/p' >> "$tmp/full.ms"
    rm -rf "$tmp/full"
    "${mlp[@]}" --steps 20 --dump "dir=$tmp/stats;$all;what=stats" |
        sed -n 's/^time: ms_per_step median=\([0-9.]*\) .*/\1/p' >> "$tmp/stats.ms"
    rm -rf "$tmp/stats"
    echo "round $r of $runs done" >&2
done

dd_mbs=$(median < "$tmp/dd")
tdbg_mbs=$(median < "$tmp/tdbg.mbs")
echo "dumps: $threads threads, $runs rounds, MLP 784-1024-1024-10 batch 128, in $(df -T "$tmp" | awk 'NR == 2 { print $2 }') at $tmp"
printf "%-46s %s MB/s\n" "disk, dd bs=1M conv=fdatasync" "$dd_mbs"
printf "%-46s %s MB/s (%.0f%% of dd)\n" "tdbg writer, every tensor of every op" "$tdbg_mbs" \
    "$(awk -v a="$tdbg_mbs" -v b="$dd_mbs" 'BEGIN { print 100 * a / b }')"
if [ -s "$tmp/h5py.mbs" ]; then
    h5_mbs=$(median < "$tmp/h5py.mbs")
    printf "%-46s %s MB/s (tdbg / h5py %.2fx)\n" "h5py, the same tensors" "$h5_mbs" \
        "$(awk -v a="$tdbg_mbs" -v b="$h5_mbs" 'BEGIN { print a / b }')"
else
    echo "h5py: skipped, '$python' cannot import h5py"
fi
none=$(median < "$tmp/none.ms")
for k in full stats; do
    ms=$(median < "$tmp/$k.ms")
    printf "%-46s %s ms/step, %+.1f%% vs %s without a dump\n" \
        "$([ $k = full ] && echo "training, full dump of every op" || echo "training, statistics of every op")" \
        "$ms" "$(awk -v a="$ms" -v b="$none" 'BEGIN { print 100 * (a / b - 1) }')" "$none"
done
