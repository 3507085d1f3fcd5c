#!/bin/sh
# fuzz/mkseeds.sh BUILDDIR SRCDIR — makes the file readers' seed corpus
# (tests/fuzz/step, tests/fuzz/run) from tiny real dumps of examples/mlp:
# a 2-3-3 network on spirals, batch 4, two steps; full values (inputs and
# outputs), statistics only, gzip-compressed, graph mode, a CSV's (its
# /samples table names lines and bytes), rank 1's of 2 data-parallel ranks
# (rank attributes, /collectives, the all-reduce's tensors; where mpirun
# runs): as the writer
# makes them, a few KB each. And the GPT checkpoint reader's
# (tests/fuzz/checkpoint) from examples/gpt with --save, the configuration
# fuzz/fuzz_checkpoint.c checks against (1 layer, 1 head, embd 4, block 4),
# two steps on tests/fixtures/alice.txt: the valid AdamW checkpoint; an SGD
# one with momentum (one buffer, another kind); one of embd 8 and 2 heads
# (other attributes, every dataset of another shape); the valid one cut in
# half, and with its superblock's size of offsets changed from 8 to 4.
# Run it again when a format changes.
set -eu
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mlp="$build/examples/mlp --data spirals --hidden 3 --batch 4 --steps 2 --train-size 16 --threads 1 --log-every 100"
$mlp --dump "dir=$tmp/full;io=both" >/dev/null
$mlp --dump "dir=$tmp/stats;what=stats" >/dev/null
$mlp --dump "dir=$tmp/gzip;compress=gzip:1;ops=fc1*;phase=forward,params" >/dev/null
$mlp --mode graph --dump "dir=$tmp/graph;phase=backward,grads" >/dev/null
# a CSV's records: the /samples table with sources (a data skip's drawn != sample needs the debugger)
printf 'x,y,label\n0.5,1,0\n,2,1\n1e39,3,0\n-1,4,1\n2,5,0\n3,,1\n4,7,0\n5,8,1\n6,9,0\n7,1,1\n' >"$tmp/pts.csv"
$build/examples/mlp --data "$tmp/pts.csv" --hidden 3 --batch 4 --steps 2 --threads 1 --log-every 100 \
    --dump "dir=$tmp/samples;ops=fc1*" >/dev/null
dirs="full stats gzip graph samples"
if command -v mpirun >/dev/null &&
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np 2 \
        $mlp --batch 8 --dp --dump "dir=$tmp/dp;io=both" >/dev/null 2>&1; then
    mv "$tmp/dp/rank-1" "$tmp/dp1"
    dirs="$dirs dp1"
fi
gpt="$build/examples/gpt --data $src/tests/fixtures/alice.txt --layers 1 --heads 1 --embd 4 --block 4 --batch 2
     --steps 2 --warmup 0 --eval-every 0 --threads 1 --log-every 100"
$gpt --save "$tmp/valid.h5" >/dev/null
$gpt --optim sgd --momentum 0.9 --save "$tmp/sgd.h5" >/dev/null
$gpt --embd 8 --heads 2 --save "$tmp/wide.h5" >/dev/null
for t in step run checkpoint; do
    rm -rf "$src/tests/fuzz/$t"
    mkdir -p "$src/tests/fuzz/$t"
done
for d in $dirs; do
    cp "$tmp/$d/step-00000001.h5" "$src/tests/fuzz/step/$d.h5"
    cp "$tmp/$d/run.h5" "$src/tests/fuzz/run/$d.h5"
done
ck="$src/tests/fuzz/checkpoint"
cp "$tmp/valid.h5" "$tmp/sgd.h5" "$tmp/wide.h5" "$ck/"
size=$(wc -c <"$tmp/valid.h5")
head -c $((size / 2)) "$tmp/valid.h5" >"$ck/truncated.h5"
cp "$tmp/valid.h5" "$ck/superblock.h5"
printf '\004' | dd of="$ck/superblock.h5" bs=1 seek=13 conv=notrunc 2>/dev/null
ls -l "$src/tests/fuzz/step" "$src/tests/fuzz/run" "$ck"
