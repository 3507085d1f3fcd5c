/* fuzz_step.c — a step file, read as the tools read one: the input is
 * written as DIR/step-00000001.h5, then `tdbg-dump verify DIR`, `ls DIR`,
 * `stats DIR`, `show DIR TENSOR` (its first tensor), `tdbg-diff FILE FILE`
 * and the reader's own calls (open, every tensor's values, extents and
 * their checksums, the /stats table) run on it. Any file must end in an
 * exit status of 0, 1 or 2, never in a signal or a sanitizer report. */
#include "diff.h"
#include "dump.h"
#include "fuzz.h"
#include "h5file.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[PATH_MAX], file[PATH_MAX + 32];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    if (te_init(NULL) != TE_OK)
        abort();
    snprintf(dir, sizeof dir, "%s/run", fuzz_tmpdir());
    snprintf(file, sizeof file, "%s/step-00000001.h5", dir);
    return 0;
}

/* Tensor values in bounded pieces, as show and stats read them; the
 * extents and their checksums as tdbg-diff reads them. */
static void read_values(dump_step_reader *r)
{
    char err[1024];
    static float buf[4096];
    for (int i = 0; i < dump_step_count(r); i++) {
        const dump_tensor_info *ti = dump_step_tensor(r, i);
        if (ti->numel > 0 && ti->numel <= 4096)
            dump_step_read_f32(r, i, buf, err, sizeof err);
        int64_t count = ti->numel < 256 ? ti->numel : 256;
        if (count > 0 && (size_t)count * te_dtype_size(ti->dtype) <= sizeof buf)
            dump_step_read_range(r, i, 0, count, buf, err, sizeof err);
        dump_extent *e = NULL;
        int n = dump_step_extents(r, i, &e, err, sizeof err);
        for (int k = 0; k < n; k++)
            if (e[k].size <= sizeof buf) {
                FILE *f = fopen(file, "rb");
                if (f && fseek(f, (long)e[k].offset, SEEK_SET) == 0 && fread(buf, 1, e[k].size, f) == e[k].size)
                    dump_extent_verify(r, i, &e[k], buf, err, sizeof err);
                if (f)
                    fclose(f);
            }
        free(e);
    }
    dump_stats_row *rows = NULL;
    dump_step_stats(r, &rows, err, sizeof err);
    free(rows);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (mkdir(dir, 0700) != 0 && access(dir, F_OK) != 0)
        abort();
    if (!fuzz_write(file, data, size))
        abort();
    char err[1024], tensor[DUMP_PATH_MAX] = "/x/out0";
    dump_step_reader *r = dump_step_open(file, err, sizeof err);
    if (r) {
        if (dump_step_count(r) > 0)
            snprintf(tensor, sizeof tensor, "%s", dump_step_tensor(r, 0)->path);
        read_values(r);
        dump_step_close(r);
    } else if (!err[0]) {
        abort();   /* a refusal always says why */
    }
    fuzz_tool(tdbg_dump_main, "verify", dir, NULL);
    fuzz_tool(tdbg_dump_main, "ls", dir, NULL);
    fuzz_tool(tdbg_dump_main, "stats", dir, NULL);
    fuzz_tool(tdbg_dump_main, "show", dir, tensor, NULL);
    fuzz_tool(tdbg_diff_main, file, file, NULL);
    unlink(file);
    return 0;
}
