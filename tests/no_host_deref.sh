#!/bin/sh
# no_host_deref.sh SRCDIR — tensor data is dereferenced only by the
# backends (engine/cpu/, engine/cuda/; docs/engine.md "Residency"). Lists
# every te_f32(, te_i32( or ->data in the rest of the engine, except a
# pointer stored (a line that starts "X->data = ") or tested against NULL
# ("if (X->data)", "!X->data", "X->data &&", "&& X->data)", "X->data ||",
# "X->data == NULL", "X->data != NULL"): neither is a dereference. Prints
# nothing and exits 0 when none is left. te_data(t) is how the engine
# hands a tensor's memory to its backend's entries.
srcdir=${1:-.}
cd "$srcdir" || exit 2

status=0
for f in engine/*.c engine/graph/*.c engine/ops/*.c; do
    hits=$(grep -n 'te_f32(\|te_i32(\|->data\b' "$f" | grep -v '^[0-9]*:[[:space:]]*[A-Za-z_][][A-Za-z0-9_>.-]*->data = ' |
        awk -v x='[A-Za-z_][][A-Za-z0-9_>.-]*->data' '{
            s = $0
            gsub("if \\(!?" x "\\)", "", s)
            gsub("!" x, "", s)
            gsub(x " (&&|\\|\\||[!=]= NULL)", "", s)
            gsub("&& " x "\\)", "", s)
            if (s ~ /te_f32\(|te_i32\(|->data([^A-Za-z0-9_]|$)/) print
        }')
    if [ -n "$hits" ]; then
        printf '%s\n' "$hits" | sed "s|^|$f:|"
        status=1
    fi
done
exit $status
