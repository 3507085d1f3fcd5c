#!/bin/bash
# diff.sh BUILDDIR SRCDIR — tdbg-diff's part of `make bench`: one pair of
# dumps of the MLP (784-1024-1024-10, batch 128, every op's inputs and
# outputs on every step): A in eager mode, B in graph mode with noise
# injected into fc2/relu's output half way. On that same pair, in the same
# rounds, with the page cache warm: tdbg-diff (its full table), h5diff -d
# (absolute tolerance) and h5diff -p (relative tolerance) from hdf5-tools on
# each pair of step files, and bench/numpy_diff.py (h5py and numpy: max abs
# error and allclose per dataset). Median wall seconds over the rounds, the
# ratio of each peer to tdbg-diff, and tdbg-diff's peak RSS.
#
# Environment: STEPS (8: about 330 MB a dump), RUNS (3), THREADS (all cores,
# for training), PYTHON (/usr/bin/python3), KEEP=1 keeps the dumps.
set -euo pipefail

runs_default=3
. "$(dirname "$0")/lib.sh"
steps=${STEPS:-8}
export OMP_WAIT_POLICY=PASSIVE
tmp=$(mktemp -d "${TMPDIR:-/var/tmp}/tdbg-bench-diff.XXXXXX") # on disk, not a tmpfs
if [ "${KEEP:-0}" = 1 ]; then
    echo "dumps kept in $tmp" >&2
else
    trap 'rm -rf "$tmp"' EXIT
fi
mlp=("$build/examples/mlp" --batch 128 --threads "$threads" --optim sgd --lr 0.01 --momentum 0.9
     --train-size 4096 --log-every 1000000 --steps "$steps")
half=$((steps / 2))

"${mlp[@]}" --dump "dir=$tmp/a;io=both" > /dev/null
"${mlp[@]}" --mode graph --inject "noise@op=fc2/relu,step=$half" --dump "dir=$tmp/b;io=both" > /dev/null
mb=$(du -sm "$tmp/a" "$tmp/b" | awk '{ s += $1 } END { print s }')
cat "$tmp"/a/* "$tmp"/b/* > /dev/null   # every tool then reads from the page cache

now() { date +%s.%N; }
# seconds TAG CMD...: runs CMD, appends its wall time to $tmp/TAG.s
seconds() {
    local tag=$1 t0 t1
    shift
    t0=$(now)
    "$@" || [ $? -eq 1 ]   # 1: differences found, as diff and h5diff say
    t1=$(now)
    awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }' >> "$tmp/$tag.s"
}
h5diff_all() {   # h5diff over each pair of step files; its exit status 1 is a difference
    local f rc=0
    for f in "$tmp"/a/step-*.h5; do
        h5diff "$@" "$f" "$tmp/b/${f##*/}" >> "$tmp/h5diff.out" || rc=$?
    done
    return "$rc"
}
has_h5diff=0
command -v h5diff > /dev/null && has_h5diff=1
has_numpy=0
"$python" -c 'import h5py, numpy' 2>/dev/null && has_numpy=1
peers=()
[ $has_h5diff = 1 ] && peers+=(h5diff_d h5diff_p)
[ $has_numpy = 1 ] && peers+=(numpy)

# Each round runs every tool once on the same pair; a ratio is taken within
# its round, then summarised over the rounds (median, min-max).
for r in $(seq "$runs"); do
    seconds tdbg "$build/dump/tdbg-diff" "$tmp/a" "$tmp/b" > "$tmp/tdbg.out"
    if [ $has_h5diff = 1 ]; then
        : > "$tmp/h5diff.out"
        seconds h5diff_d h5diff_all -d 1e-5
        : > "$tmp/h5diff.out"
        seconds h5diff_p h5diff_all -p 1.3e-6
    fi
    if [ $has_numpy = 1 ]; then
        seconds numpy "$python" "$src/bench/numpy_diff.py" "$tmp/a" "$tmp/b" > "$tmp/numpy.out"
    fi
    for p in "${peers[@]}"; do
        paste "$tmp/$p.s" "$tmp/tdbg.s" | tail -1 | awk '{ print $1 / $2 }' >> "$tmp/$p.ratio"
    done
    echo "round $r of $runs done" >&2
done
rss="(no /usr/bin/time)"
if [ -x /usr/bin/time ]; then
    rss=$( { /usr/bin/time -f '%M' "$build/dump/tdbg-diff" -q "$tmp/a" "$tmp/b" > /dev/null; } 2>&1 | tail -1 || true)
fi

echo "diff: $runs rounds, $(nproc) cores; MLP 784-1024-1024-10 batch 128, $steps steps, io=both:"
echo "  A eager, B graph with noise@op=fc2/relu,step=$half; $mb MB in all, in the page cache"
sed -n '/^root cause/,$p' "$tmp/tdbg.out" | sed 's/^/  | /'
printf "%-36s %s s   peak RSS %s KB\n" "tdbg-diff, every tensor, full table" \
    "$(summary %.3f < "$tmp/tdbg.s")" "$rss"
label_h5diff_d="h5diff -d 1e-5, each step file"
label_h5diff_p="h5diff -p 1.3e-6, each step file"
label_numpy="numpy + h5py script"
for p in "${peers[@]}"; do
    label=label_$p
    printf "%-36s %s s   %sx tdbg-diff's time\n" "${!label}" "$(summary %.3f < "$tmp/$p.s")" \
        "$(summary %.2f < "$tmp/$p.ratio")"
done
if [ $has_h5diff = 1 ]; then
    echo "  | h5diff -p: $(grep -c 'differences found' "$tmp/h5diff.out") objects reported with differences (attributes too)"
else
    echo "h5diff: skipped, not installed (Debian: hdf5-tools)"
fi
if [ $has_numpy = 1 ]; then
    sed 's/^/  | /' "$tmp/numpy.out"
else
    echo "numpy + h5py: skipped, '$python' cannot import them"
fi
