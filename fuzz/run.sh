#!/bin/sh
# fuzz/run.sh — runs each fuzz target for FUZZ_SECONDS (`make fuzz` calls
# it after building them). The seed corpus (tests/fuzz/NAME) is read, never
# written: new inputs go into a scratch corpus (FUZZ_CORPUS/NAME, kept
# between runs), crashes, leaks and timeouts into OUT/findings/. One line
# per target gives its executions and findings; the status is 1 when any
# target found something.
#
#   fuzz/run.sh SRCDIR OUT       FUZZ_SECONDS (60) each, FUZZ_TARGETS ("cond spec ..."),
#                                FUZZ_CORPUS (OUT/corpus), FUZZ_TIMEOUT (25 s an input)
set -u
srcdir=$1
out=$2
seconds=${FUZZ_SECONDS:-60}
corpus=${FUZZ_CORPUS:-$out/corpus}
targets=${FUZZ_TARGETS:-$(cd "$srcdir/fuzz" && ls fuzz_*.c | sed -e '/fuzz_util/d' -e 's/^fuzz_//' -e 's/\.c$//')}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$srcdir/tests/lsan.supp}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
mkdir -p "$out/findings"
for t in $targets; do
    mkdir -p "$corpus/$t"
    log="$out/fuzz_$t.log"
    "$out/fuzz_$t" -max_total_time="$seconds" -timeout="${FUZZ_TIMEOUT:-25}" -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$out/findings/$t-" \
        "$corpus/$t" "$srcdir/tests/fuzz/$t" >"$log" 2>&1
    rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    found=$(ls "$out/findings" | grep -cE "^$t-(crash|leak|timeout|oom)-" || true)   # not slow-unit-: a note, not a failure
    echo "fuzz: $t: ${seconds} s, ${runs:-?} executions, corpus $(ls "$corpus/$t" | wc -l), findings $found (exit $rc, log $log)"
    if [ $rc -ne 0 ]; then
        status=1
        grep -m 1 -E "ERROR: (AddressSanitizer|libFuzzer|LeakSanitizer)|runtime error|SUMMARY" "$log" || tail -n 5 "$log"
    fi
done
exit $status
