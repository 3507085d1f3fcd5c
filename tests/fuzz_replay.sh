#!/bin/sh
# fuzz_replay — every fuzz target (fuzz/fuzz_*.c, built with replay.c as
# its main) on its seed corpus, tests/fuzz/NAME, and on every input that
# once crashed it, tests/fuzz/crashes/NAME: the fuzzers' regression tests,
# run by `make check` without clang. A crash, a sanitizer report or an
# abort() of a target's own checks fails it, naming the input.
srcdir=${srcdir:-.}
# A sanitizer build (configure --enable-sanitizers) reports HDF5's own leaks
# on its error paths, which damaged files take: tests/lsan.supp says why.
LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$srcdir/tests/lsan.supp}
export LSAN_OPTIONS
# Some past inputs make libhdf5 loop: the readers stop them after the time
# limit (dump/contain.h), and 2 s is plenty for files this small.
TDBG_DUMP_TIMEOUT=${TDBG_DUMP_TIMEOUT:-2}
export TDBG_DUMP_TIMEOUT
status=0
for t in ${FUZZ_NAMES:-cond spec cmdline diff_opts step run checkpoint prof listen csv}; do
    log=tests/fuzz_replay_$t.out
    if ./fuzz/replay_$t "$srcdir/tests/fuzz/$t" "$srcdir/tests/fuzz/crashes/$t" >"$log" 2>&1; then
        echo "fuzz_replay: $t: $(tail -n 1 "$log")"
        rm -f "$log"
    else
        echo "fuzz_replay:F: $t failed on $(grep '^replay: ' "$log" | tail -n 1 | sed 's/^replay: //')"
        tail -n 30 "$log"
        status=1
    fi
done
exit $status
