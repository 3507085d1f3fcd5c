/* fuzz_diff_opts.c — tdbg-diff's option parser (dump/diff_opts.c): the
 * input is argv, one argument a line (an argument may hold spaces). Any
 * argv parses or ends in a usage message and status 2; what parses names
 * both dumps (or, with --ranks, the one dump of ranks and neither), and
 * its --map renames any op name. (--map and an @FILE
 * spec read the files they name; device files are skipped: fuzz.h.) */
#include "diff.h"
#include "fuzz.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!fuzz_harmless(data, size))
        return 0;
    char *text = fuzz_text(data, size), *argv[64];
    int argc = fuzz_argv(text, "tdbg-diff", argv, 64);
    diff_opts o;
    bool done;
    int rc = diff_opts_parse(argc, argv, &o, &done, fuzz_null(), fuzz_null());
    if (rc != 0 && rc != 2)
        abort();   /* parsing ends in success or trouble */
    if (rc == 0 && !done) {
        if (o.ranks ? o.a || o.b : !o.a || !o.b)
            abort();
        char buf[256];
        static const char *const names[] = { "fc1/linear", "enc/layer0/attn", "", "a/b/c/d/e/f" };
        for (size_t i = 0; i < sizeof names / sizeof *names; i++)
            if (!diff_map_apply(&o.map, names[i], buf, sizeof buf))
                abort();
    }
    diff_opts_free(&o);
    free(text);
    return 0;
}
