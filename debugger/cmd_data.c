/*
 * cmd_data.c — the data: `info batch` (which samples the step's batches
 * hold, and where they came from) and `data skip` (a bad sample replaced
 * for the rest of the run).
 */
#include "cmd.h"
#include "session.h"

#include <string.h>

#define SKIPS_SHOWN 16

static void info_one(const te_batch *b, int k)
{
    const te_dataset *d = b->dataset;
    fprintf(dbg_out, "batch %d: '%s', %lld rows", k, d && d->name ? d->name : "?", (long long)b->rows);
    if (b->loader)
        fprintf(dbg_out, ", loader seed %llu, %s, epoch %lld, batch %lld (position %lld)", (unsigned long long)b->seed,
                b->shuffle ? "shuffled" : "in order", (long long)b->epoch, (long long)b->batch_in_epoch,
                (long long)b->position);
    else
        fprintf(dbg_out, ", published by the program");
    fprintf(dbg_out, "\n");
    if (b->checked && b->finding.issue != TE_DATA_OK) {
        fprintf(dbg_out, "  data check: %s", te_data_issue_name(b->finding.issue));
        if (b->finding.row >= 0)
            fprintf(dbg_out, " at row %lld (%lld of %lld rows fail it)", (long long)b->finding.row,
                    (long long)b->finding.bad_rows, (long long)b->rows);
        fprintf(dbg_out, "\n");
    } else {
        fprintf(dbg_out, "  data check: %s\n", b->checked ? "clean"
                         : b->x_dtype != TE_F32 ? "none (the checks read f32 features; this x is "
                                                           "integer tokens)"
                                                         : "none ('break data' sets one)");
    }
    if (b->loader) {
        int64_t from[SKIPS_SHOWN], to[SKIPS_SHOWN];
        const int n = te_loader_skips(b->loader, from, to, SKIPS_SHOWN);
        for (int i = 0; i < n && i < SKIPS_SHOWN; i++)
            fprintf(dbg_out, "  data skip: sample %lld -> %lld\n", (long long)from[i], (long long)to[i]);
        if (n > SKIPS_SHOWN)
            fprintf(dbg_out, "  ... and %d more replacements\n", n - SKIPS_SHOWN);
    }
    fprintf(dbg_out, "  %-5s %-10s %s\n", "row", "sample", "source");
    for (int64_t r = 0; r < b->rows; r++) {
        char src[256];
        te_batch_source(b, r, src, sizeof src);
        fprintf(dbg_out, "  %-5lld %-10lld %s", (long long)r, (long long)b->index[r], src[0] ? src : "-");
        if (b->drawn[r] != b->index[r])
            fprintf(dbg_out, "  (in place of %lld)", (long long)b->drawn[r]);
        fprintf(dbg_out, "\n");
    }
}

void dbg_info_batch(void)
{
    const int n = te_batch_count();
    if (!n) {
        fprintf(dbg_out, "No batch yet: the program has not asked its loader for one.\n");
        return;
    }
    const int64_t step = te_batch_at(n - 1)->step;
    int first = n - 1;
    while (first > 0 && te_batch_at(first - 1)->step == step)
        first--;
    fprintf(dbg_out, "%s of step %lld:\n", n - first == 1 ? "The batch" : "The batches", (long long)step);
    for (int i = first; i < n; i++)
        info_one(te_batch_at(i), i - first);
}

/* The loader of the newest batch: the one `data skip` acts on. */
static te_loader *current_loader(void)
{
    for (int i = te_batch_count() - 1; i >= 0; i--)
        if (te_batch_at(i)->loader)
            return te_batch_at(i)->loader;
    return NULL;
}

static bool cmd_data(const char *args)
{
    char w[32];
    const char *rest = dbg_word(args, w, sizeof w);
    if (strcmp(w, "skip") != 0) {
        dbg_error("data: expected 'skip INDEX', got '%s'", w);
        return false;
    }
    long long index;
    if (!dbg_parse_int(rest, "data skip INDEX", 0, &index))
        return false;
    te_loader *l = current_loader();
    if (!l) {
        dbg_error("data skip: no loader has made a batch yet (a program's own pipeline cannot replace samples)");
        return false;
    }
    int64_t to;
    if (te_loader_skip(l, index, &to) != TE_OK) {
        dbg_error("%s", te_error());
        return false;
    }
    const te_dataset *d = te_loader_dataset(l);
    fprintf(dbg_out, "Sample %lld of '%s' is replaced by sample %lld from the next batch on.\n", index,
            d && d->name ? d->name : "?", (long long)to);
    return false;
}

const dbg_cmd dbg_cmds_data[] = {
    { .name = "data", .usage = "data skip INDEX",
      .help = "replace a bad sample for the rest of the run\n"
      "Another sample, drawn from the loader's seed and the index, takes its place from the\n"
      "next batch on: batches keep their shape and a replay makes the same ones. Snapshots\n"
      "and dumps record the replacement; 'info batch' lists them.",
      .needs = DBG_CMD_STARTED, .args = { { .words = DBG_WORDS("skip") } }, .max_words = 2, .run = cmd_data },
    { .name = NULL },
};
