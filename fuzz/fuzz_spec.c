/* fuzz_spec.c — the dump spec parser (dump/spec.c), as --dump, the
 * debugger's `dump` and tdbg-diff's --ops/--steps use it: any text parses
 * or is refused with a message; what parses formats as canonical text
 * that parses back to the same spec, and its step and op selection
 * answers for a few steps and names. */
#include "dump.h"
#include "fuzz.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    return 0;
}

static char a_text[DUMP_SPEC_TEXT_MAX], b_text[DUMP_SPEC_TEXT_MAX];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!fuzz_harmless(data, size))
        return 0;
    char *text = fuzz_text(data, size), err[1024];
    static dump_spec s, t;
    if (!dump_spec_parse(text, &s, err, sizeof err)) {
        if (!err[0])
            abort();   /* a refusal always says why */
        free(text);
        return 0;
    }
    dump_spec_format(&s, a_text, sizeof a_text);
    if (!dump_spec_parse(a_text, &t, err, sizeof err))
        abort();   /* the canonical text must parse */
    dump_spec_format(&t, b_text, sizeof b_text);
    if (strcmp(a_text, b_text) != 0)
        abort();   /* ... to the same spec */
    static const int64_t steps[] = { 0, 1, 2, 7, 100, 1000000, INT64_MAX, -1 };
    static const char *const names[][2] = {
        { "fc1/linear", "Linear" }, { "grad/fc1/linear", "LinearGrad" }, { "conv2/bn", "BatchNorm2D" },
        { "", "" }, { "a?b=c/sqrt", NULL }, { NULL, "Conv2D" },
    };
    for (size_t i = 0; i < sizeof steps / sizeof *steps; i++)
        if (dump_spec_step(&s, steps[i]) != dump_spec_step(&t, steps[i]))
            abort();
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (dump_spec_op(&s, names[i][0], names[i][1]) != dump_spec_op(&t, names[i][0], names[i][1]))
            abort();
    free(text);
    return 0;
}
