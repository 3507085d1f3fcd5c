/* fuzz_run.c — a run's metadata file, read as the tools read it: the
 * input is written as DIR/run.h5, then dump_run_read, `tdbg-dump ls DIR`,
 * `tdbg-dump verify DIR` and `verify DIR/run.h5`, and `tdbg-diff DIR DIR`
 * (which reads the op table for its verdicts) run on it. Any file must end
 * in an exit status of 0, 1 or 2, never in a signal or a sanitizer report. */
#include "diff.h"
#include "dump.h"
#include "fuzz.h"
#include "h5file.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[PATH_MAX], file[PATH_MAX + 16];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    if (te_init(NULL) != TE_OK)
        abort();
    snprintf(dir, sizeof dir, "%s/run", fuzz_tmpdir());
    snprintf(file, sizeof file, "%s/run.h5", dir);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (mkdir(dir, 0700) != 0 && access(dir, F_OK) != 0)
        abort();
    if (!fuzz_write(file, data, size))
        abort();
    dump_run_meta m;
    dump_op_row *ops = NULL;
    int n_ops = 0;
    char err[1024];
    if (dump_run_read(dir, &m, &ops, &n_ops, err, sizeof err)) {
        if (n_ops < 0 || (n_ops > 0 && !ops))
            abort();
        /* the op graph tdbg-diff builds from the table */
        diff_graph_free(diff_graph_new(ops, n_ops, m.lists_inplace, m.lists_reads));
    } else if (!err[0]) {
        abort();   /* a refusal always says why */
    }
    free(ops);
    fuzz_tool(tdbg_dump_main, "ls", dir, NULL);
    fuzz_tool(tdbg_dump_main, "verify", dir, NULL);
    fuzz_tool(tdbg_dump_main, "verify", file, NULL);
    fuzz_tool(tdbg_diff_main, dir, dir, NULL);
    unlink(file);
    return 0;
}
