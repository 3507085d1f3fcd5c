/* fuzz_csv.c — a CSV file handed to `--data FILE.csv` (engine/dataset_csv.c),
 * read as the examples read it: any bytes are a dataset or an error that
 * says why, never a crash or a hang. A dataset's every sample reads back
 * (features as written: NaN for an empty field, +-Inf beyond float's
 * range), and every sample names its line and byte, in order. Then a
 * loader hands out its batches and the data check looks at them, as
 * `break data` would. */
#include "fuzz.h"
#include "te.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char path[PATH_MAX];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    if (te_init(&(te_config){ .threads = 1 }) != TE_OK)
        abort();
    snprintf(path, sizeof path, "%s/data.csv", fuzz_tmpdir());
    return 0;
}

/* The line of a source text "PATH:LINE (byte B)"; -1 when it is not one. */
static long long source_line(const char *s, long long *byte)
{
    const char *colon = strrchr(s, ':');
    long long line = -1;
    if (!colon || sscanf(colon + 1, "%lld (byte %lld)", &line, byte) != 2)
        return -1;
    return line;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!fuzz_write(path, data, size))
        abort();
    for (int classes = 0; classes <= 3; classes += 3) {
        te_error_clear();
        te_dataset *d = te_dataset_csv(path, classes);
        if (!d) {
            if (!te_error()[0])
                abort(); /* a refusal always says why */
            continue;
        }
        if (d->size < 1 || d->ndim != 1 || d->shape[0] < 1 || !d->get || !d->source)
            abort();
        float *x = malloc((size_t)d->shape[0] * sizeof *x);
        if (!x)
            abort();
        long long last_line = 0, last_byte = -1;
        for (int64_t i = 0; i < d->size; i++) {
            int32_t y;
            d->get(d, i, x, &y);
            char src[PATH_MAX + 64];
            d->source(d, i, src, sizeof src);
            long long byte = -1, line = source_line(src, &byte);
            if (line <= last_line || byte <= last_byte || (size_t)byte >= size)
                abort(); /* records come in the file's order, each from a line of its own */
            last_line = line;
            last_byte = byte;
        }
        free(x);
        /* a loader's batches and the data check over them */
        te_data_check_set(&(te_data_check){ .nonfinite = true, .label = true, .empty = true, .constant = true });
        te_loader *l = te_loader_new(d, &(te_loader_opts){ .batch = d->size < 4 ? (int)d->size : 4,
                                                            .shuffle = true, .seed = 7 });
        if (!l)
            abort();
        for (int64_t b = 0; b < te_loader_batches_per_epoch(l) && b < 8; b++) {
            te_tensor *bx, *by;
            if (te_loader_next(l, &bx, &by) != TE_OK)
                abort();
        }
        te_loader_free(l);
        te_data_check_set(NULL);
        te_tape_reset();
        te_dataset_free(d);
    }
    unlink(path);
    return 0;
}
