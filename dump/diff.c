/* diff.c — tdbg_diff_main: opens the two dumps, then compares their common
 * steps one after the other (pair, compare, verdicts, report), and ends
 * with the summary. Only the step being compared is in memory. */
#include "diff.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void diff_complain(diff_ctx *c, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("tdbg-diff: ", c->err);
    if (rc == DIFF_RC_SAME)
        fputs("warning: ", c->err);
    vfprintf(c->err, fmt, ap);
    fputc('\n', c->err);
    va_end(ap);
    c->rc = rc > c->rc ? rc : c->rc;
}

static bool use_color(const diff_opts *o, FILE *out)
{
    if (o->color >= 0)
        return o->color == 1;
    const char *no = getenv("NO_COLOR");
    int fd = fileno(out);
    return o->format == DIFF_TABLE && fd >= 0 && isatty(fd) && !(no && no[0]);
}

/* The table's first columns: wide enough for A's op names and the steps. */
static void widths(diff_ctx *c, const diff_side *a, const diff_step *last, const diff_row *rows,
                   int n_rows)
{
    c->op_width = 2;
    for (int i = 0; i < a->n_ops; i++)
        if ((int)strlen(a->ops[i].name) > c->op_width)
            c->op_width = (int)strlen(a->ops[i].name);
    for (int i = 0; i < n_rows; i++)
        if ((int)strlen(rows[i].op) > c->op_width)
            c->op_width = (int)strlen(rows[i].op);
    char digits[32];
    c->step_width = snprintf(digits, sizeof digits, "%lld", last ? (long long)last->step : 0LL);
    if (c->step_width < 4)
        c->step_width = 4;
}

/* Marks the run's first divergent row; with --first returns the rows to
 * show (up to it) and sets *stop. */
static int mark_first(diff_ctx *c, diff_row *rows, int n_rows, bool *found, bool *stop)
{
    for (int i = 0; !*found && i < n_rows; i++)
        if (rows[i].differs) {
            rows[i].first = *found = true;
            if (c->o.first) {
                *stop = true;
                return i + 1;
            }
        }
    return n_rows;
}

/* A step on its way: open, paired and planned (HDF5 calls only), then
 * compared and reported. */
typedef struct stage {
    const diff_step *d;
    dump_step_reader *ra, *rb;
    diff_row *rows;
    int n;                      /* rows; -1 when the step could not be opened */
    diff_plan *plan;
} stage;

static void stage_open(diff_ctx *c, const diff_step *d, stage *s)
{
    char why[DIFF_WHY_MAX];
    *s = (stage){ .d = d, .n = -1 };
    if (!(s->ra = dump_step_open(d->path_a, why, sizeof why))) {
        diff_complain(c, DIFF_RC_TROUBLE, "%s", why);
        return;
    }
    if (!(s->rb = dump_step_open(d->path_b, why, sizeof why))) {
        diff_complain(c, DIFF_RC_TROUBLE, "%s", why);
        return;
    }
    if ((s->n = diff_pair_step(c, d->step, s->ra, s->rb, &s->rows)) < 0 ||
        !(s->plan = diff_plan_new(c, s->ra, s->rb, s->rows, s->n))) {
        diff_complain(c, DIFF_RC_TROUBLE, "%s: out of memory", d->path_a);
        s->n = -1;
    }
}

static void stage_close(stage *s)
{
    diff_plan_free(s->plan);
    free(s->rows);
    dump_step_close(s->rb);
    dump_step_close(s->ra);
    *s = (stage){ .n = -1 };
}

typedef struct opener {
    diff_ctx *c;
    const diff_step *d;
    stage *s;
} opener;

static void open_next(void *arg)
{
    opener *o = arg;
    stage_open(o->c, o->d, o->s);
}

/* Compares the steps; the report goes out step by step. Step k + 1 is
 * opened (HDF5, on one thread) while step k is compared (the others). */
static void run(diff_ctx *c, const diff_side *a, const diff_side *b, diff_graph *g,
                diff_lowp *lp, const diff_step *steps, int n_steps, diff_summary *s)
{
    bool begun = false, found = false, differs = false;
    stage cur, next = { .n = -1 };
    stage_open(c, &steps[0], &cur);
    for (int k = 0; k < n_steps; k++) {
        opener o = { c, &steps[k + 1], &next };
        const bool more = k + 1 < n_steps;
        if (cur.plan)
            diff_plan_run(cur.plan, more ? open_next : NULL, &o);
        else if (more)
            open_next(&o);
        if (cur.n >= 0) {
            diff_plan_finish(c, cur.plan);
            cur.plan = NULL;
            diff_graph_step(g, cur.rows, cur.n);
            diff_lowp_step(c, lp, cur.ra, cur.rb, cur.rows, cur.n);
            diff_mark_fused(cur.rows, cur.n, a, b, cur.ra, cur.rb);
            int shown = mark_first(c, cur.rows, cur.n, &found, &s->stopped);
            if (!begun) {
                widths(c, a, &steps[n_steps - 1], cur.rows, cur.n);
                diff_out_begin(c, a, b);
                begun = true;
            }
            diff_out_rows(c, cur.rows, shown);
            diff_summary_add(s, cur.rows, shown);
            for (int i = 0; i < shown; i++)
                differs |= cur.rows[i].differs;
            s->steps++;
        }
        stage_close(&cur);
        cur = next;
        next = (stage){ .n = -1 };
        if (s->stopped)
            break;
    }
    stage_close(&cur);
    if (!begun) {
        widths(c, a, NULL, NULL, 0);
        diff_out_begin(c, a, b);
    }
    if (differs && c->rc < DIFF_RC_DIFFER)
        c->rc = DIFF_RC_DIFFER;
}

/* Opens both sides. A data-parallel dump (rank-N directories) facing a
 * one-process dump is compared as one run: its ranks combined into a
 * temporary dump (combined, removed by the caller; "" when none). */
static void sides_open(diff_ctx *c, diff_side *a, diff_side *b, bool *ok_a, bool *ok_b, char *combined, size_t n)
{
    combined[0] = '\0';
    const bool dp_a = diff_is_ranks(c->o.a), dp_b = diff_is_ranks(c->o.b);
    *ok_a = *ok_b = false;
    memset(a, 0, sizeof *a);
    memset(b, 0, sizeof *b);
    if (dp_a && dp_b) {
        diff_complain(c, DIFF_RC_TROUBLE, "%s and %s are both data-parallel dumps: compare one's ranks with "
                      "--ranks, or a rank directory of each (%s/rank-0)", c->o.a, c->o.b, c->o.a);
        return;
    }
    if (!dp_a && !dp_b) {
        *ok_a = diff_side_open(c, a, c->o.a);
        *ok_b = diff_side_open(c, b, c->o.b);
        return;
    }
    diff_side *dp = dp_a ? a : b, *one = dp_a ? b : a;
    const char *dp_arg = dp_a ? c->o.a : c->o.b, *one_arg = dp_a ? c->o.b : c->o.a;
    bool *ok_dp = dp_a ? ok_a : ok_b, *ok_one = dp_a ? ok_b : ok_a;
    diff_ranks k = { 0 };
    if ((*ok_one = diff_side_open(c, one, one_arg)) && diff_ranks_open(c, &k, dp_arg) &&
        diff_combine(c, &k, one, combined, n) && (*ok_dp = diff_side_open(c, dp, combined)))
        dp->arg = dp_arg;
    diff_ranks_close(&k);
}

int tdbg_diff_main(int argc, char **argv, FILE *out, FILE *err)
{
    diff_ctx c = { .out = out, .err = err };
    bool done = false;
    int rc = diff_opts_parse(argc, argv, &c.o, &done, out, err);
    if (rc != DIFF_RC_SAME || done) {
        diff_opts_free(&c.o);
        return rc;
    }
    if (c.o.ranks) {
        rc = diff_ranks_main(&c);
        diff_opts_free(&c.o);
        return rc;
    }
    c.color = use_color(&c.o, out);
    diff_side a, b;
    bool ok_a, ok_b;
    char combined[PATH_MAX];
    sides_open(&c, &a, &b, &ok_a, &ok_b, combined, sizeof combined);
    diff_step *steps = NULL;
    diff_graph *g = NULL;
    diff_summary s;
    memset(&s, 0, sizeof s);
    int n_steps = 0;
    if (ok_a && ok_b) {
        n_steps = diff_steps_common(&c, &a, &b, &steps, s.only_a_steps, s.only_b_steps,
                                    sizeof s.only_a_steps);
        char detail[1100] = "";
        if (s.only_a_steps[0] || s.only_b_steps[0])
            snprintf(detail, sizeof detail, " (steps only in A: %s; only in B: %s)",
                     s.only_a_steps[0] ? s.only_a_steps : "none",
                     s.only_b_steps[0] ? s.only_b_steps : "none");
        if (n_steps == 0)
            diff_complain(&c, DIFF_RC_TROUBLE, "%s and %s have no step in common%s%s", c.o.a,
                          c.o.b, c.o.has_steps ? " among --steps" : "", detail);
    }
    if (n_steps > 0 && !(g = diff_graph_new(a.ops, a.n_ops, a.meta.lists_inplace, a.meta.lists_reads)))
        diff_complain(&c, DIFF_RC_TROUBLE, "out of memory");
    diff_lowp lp;
    if (g) {
        diff_lowp_init(&lp, &a, &b);
        s.lowp = lp.low >= 0 ? &lp : NULL;
        run(&c, &a, &b, g, &lp, steps, n_steps, &s);
        diff_lowp_end(&lp);
        if (s.tensors == 0 && s.unreadable == 0)
            diff_complain(&c, DIFF_RC_TROUBLE, "%s and %s have no tensor in common%s", c.o.a,
                          c.o.b, c.o.has_ops || c.o.io != DUMP_IO_BOTH ? " among those selected"
                                                                       : "");
        diff_out_end(&c, &s);
    }
    diff_graph_free(g);
    free(s.causes);
    free(steps);
    diff_side_close(&a);
    diff_side_close(&b);
    diff_combine_remove(combined);
    diff_opts_free(&c.o);
    return c.rc;
}
