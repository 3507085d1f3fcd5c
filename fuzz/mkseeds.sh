#!/bin/sh
# fuzz/mkseeds.sh BUILDDIR SRCDIR — makes the file readers' seed corpus
# (tests/fuzz/step, tests/fuzz/run) from tiny real dumps of examples/mlp:
# a 2-3-3 network on spirals, batch 4, two steps; full values (inputs and
# outputs), statistics only, gzip-compressed, graph mode: as the writer
# makes them, a few KB each. Run it again when the format changes.
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
for t in step run; do
    rm -rf "$src/tests/fuzz/$t"
    mkdir -p "$src/tests/fuzz/$t"
done
for d in full stats gzip graph; do
    cp "$tmp/$d/step-00000001.h5" "$src/tests/fuzz/step/$d.h5"
    cp "$tmp/$d/run.h5" "$src/tests/fuzz/run/$d.h5"
done
ls -l "$src/tests/fuzz/step" "$src/tests/fuzz/run"
