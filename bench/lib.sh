# lib.sh — what the bench scripts share, sourced by each after it sets
# runs_default: the arguments (BUILDDIR SRCDIR), the knobs every script
# takes from the environment, and the statistics of their figures.
#
# Environment: THREADS (all cores), RUNS (runs_default), PYTHON
# (/usr/bin/python3).

if [ $# -ne 2 ]; then
    echo "usage: $0 BUILDDIR SRCDIR" >&2
    exit 2
fi
build=$1
src=$2
threads=${THREADS:-$(nproc)}
runs=${RUNS:-${runs_default:-3}}
python=${PYTHON:-/usr/bin/python3}

# The median of the numbers on stdin (nothing for none).
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# "median (min-max)" of the numbers on stdin, each printed with FORMAT
# (%.2f); "-" for none.
summary() { sort -g | awk -v f="${1:-%.2f}" '{ v[NR] = $1 } END {
    if (!NR) { printf "-"; exit }
    m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf f " (" f "-" f ")", m, v[1], v[NR] }'; }

# The number after NAME= on stdin's lines.
field() { sed -n "s/.*$1=\\([0-9.]*\\).*/\\1/p"; }

# From an example's `time:` line: the median step (step_ms) or the fastest
# (fastest_ms) in ms.
step_ms() { sed -n 's/^time: ms_per_step median=\([0-9.]*\) .*/\1/p'; }
fastest_ms() { sed -n 's/^time: ms_per_step .*min=\([0-9.]*\) .*/\1/p'; }
# ... or the sum of the timed steps (total_ms), in ms.
total_ms() { sed -n 's/^time: ms_per_step .*total_ms=\([0-9.]*\).*/\1/p'; }

# The GPT example's defaults, from `$gpt --help` (the number in parentheses
# at the end of each usage line), into the array def (layers heads embd
# block batch dropout lr weight-decay clip), and its text into data: DATA,
# else its default, else tests/fixtures/alice.txt. Ends the script when
# the help or a default is missing.
gpt_defaults() {
    local help f
    help=$("$gpt" --help) || { echo "bench: $gpt --help failed (make first)" >&2; exit 1; }
    default_of() { sed -n "s/^  $1 [A-Z]* .*(\\([^()]*\\))\$/\\1/p" <<< "$help"; }
    declare -gA def
    for f in layers heads embd block batch dropout lr weight-decay clip; do
        def[$f]=$(default_of "--$f")
        [ -n "${def[$f]}" ] || { echo "bench: no default for --$f in '$gpt --help'" >&2; exit 1; }
    done
    data=${DATA:-$(default_of --data)}
    [ -n "$data" ] && [ -r "$data" ] || data=$src/tests/fixtures/alice.txt
}
