/*
 * capture.c — a compiled step as a few device graphs (CUDA Graphs).
 *
 * The plan's kernels are cut into segments (segments.c). The first run
 * after compiling runs every kernel directly: lazy allocations (the
 * backend's workspace, library handles, parameters' gradients) happen
 * then, outside any capture. From the second run on, each segment of two
 * or more capturable kernels is captured once through the backend's
 * capture entries and replayed with one launch per step; the rest run as
 * before, hooks and all.
 *
 * A captured kernel's host code runs only while it is captured. What it
 * leaves on the host (which tensor's memory a recompute moved, which
 * gradients are now valid) is recorded at capture and set again after
 * each launch; what it finds on the host at its start is recorded too, and
 * a step that starts a segment from another host state (a parameter moved,
 * a gradient left to accumulate) captures it again.
 */
#include "graph/graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What the host knows of one value's tensor. */
typedef struct host_state {
    void *data, *grad_data;
    te_tensor *grad;
    bool grad_valid;
} host_state;

typedef struct seg_state {
    void *exec;                /* the backend's replayable graph, or NULL */
    bool direct;               /* its capture failed: kernel by kernel from now on */
    host_state *before, *after; /* per value, at capture */
    int watch_slots;           /* the deferred watch's flags its captured kernels set */
} seg_state;

typedef struct tg_capture {
    const te_backend *be;
    tg_segment *seg;
    seg_state *st;
    int n_seg;
    bool cut;
    int hooks; /* when cut: 0 none, 1 only deferring ones in a deferred step, 2 others or injections */
    long runs;
} tg_capture;

bool tg_capture_wanted(const tg_plan *p)
{
    const te_backend *be = te_backends[p->device];
    if (!be || !be->graph.capture_begin || !be->graph.capture_end || !be->graph.launch || !be->graph.exec_free)
        return false;
    /* TDBG_GRAPH_DISABLE=capture: kernel by kernel, to compare. */
    const char *env = getenv("TDBG_GRAPH_DISABLE");
    while (env && *env) {
        size_t len = strcspn(env, ",");
        if ((len == 7 && strncmp(env, "capture", 7) == 0) || (len == 3 && strncmp(env, "all", 3) == 0))
            return false;
        env += len + (env[len] == ',');
    }
    return true;
}

te_status tg_capture_init(tg_plan *p)
{
    tg_capture *c = calloc(1, sizeof *c);
    const size_t n = (size_t)(p->n_kernels ? p->n_kernels : 1);
    if (c) {
        c->seg = calloc(n, sizeof *c->seg);
        c->st = calloc(n, sizeof *c->st);
    }
    if (!c || !c->seg || !c->st) {
        if (c) {
            free(c->seg);
            free(c->st);
        }
        free(c);
        te_set_error(TE_ERR_NOMEM, "graph: out of memory for the capture of %d kernels", p->n_kernels);
        return TE_ERR_NOMEM;
    }
    c->be = te_backends[p->device];
    p->cap = c;
    return TE_OK;
}

static void forget(tg_capture *c)
{
    for (int s = 0; s < c->n_seg; s++) {
        if (c->st[s].exec)
            c->be->graph.exec_free(c->st[s].exec);
        free(c->st[s].before);
        free(c->st[s].after);
        c->st[s] = (seg_state){ 0 };
    }
    c->n_seg = 0;
    c->cut = false;
}

void tg_capture_free(tg_plan *p)
{
    tg_capture *c = p->cap;
    if (!c)
        return;
    forget(c);
    free(c->seg);
    free(c->st);
    free(c);
    p->cap = NULL;
}

int tg_captured_segments(const tg_plan *p)
{
    int n = 0;
    for (int s = 0; p->cap && s < p->cap->n_seg; s++)
        n += p->cap->st[s].exec != NULL;
    return n;
}

static void save_state(const tg_plan *p, host_state *h)
{
    for (int v = 0; v < p->n_values; v++) {
        const te_tensor *t = p->values[v].t;
        h[v] = (host_state){ .data = te_data(t), .grad = t->grad, .grad_data = t->grad ? te_data(t->grad) : NULL,
                             .grad_valid = t->grad_valid };
    }
}

static bool same_state(const tg_plan *p, const host_state *h)
{
    for (int v = 0; v < p->n_values; v++) {
        const te_tensor *t = p->values[v].t;
        if (h[v].data != te_data(t) || h[v].grad != t->grad || h[v].grad_valid != t->grad_valid ||
            (t->grad && h[v].grad_data != te_data(t->grad)))
            return false;
    }
    return true;
}

static void set_state(tg_plan *p, const host_state *h)
{
    for (int v = 0; v < p->n_values; v++) {
        te_tensor *t = p->values[v].t;
        t->data = h[v].data;
        t->grad_valid = h[v].grad_valid;
    }
}

static te_status run_direct(tg_plan *p, const tg_segment *sg, int base)
{
    te_status st = TE_OK;
    for (int i = sg->first; i < sg->first + sg->count && st == TE_OK; i++)
        st = tg_kernel_exec(p, i, base);
    return st;
}

/* The segment's kernels queued into a new graph in *exec (nothing runs). */
static te_status capture(tg_plan *p, const tg_segment *sg, int base, void **exec)
{
    const te_backend *be = p->cap->be;
    te_status st = be->graph.capture_begin();
    if (st != TE_OK)
        return st;
    te_status run = TE_OK;
    for (int i = sg->first; i < sg->first + sg->count && run == TE_OK; i++) {
        te_set_phase(p->kernels[i].phase);
        run = tg_kernel_run(&p->kernels[i], base);
    }
    char why[512] = "";
    if (run != TE_OK)
        snprintf(why, sizeof why, "%s", te_error());
    st = be->graph.capture_end(exec); /* always: the stream leaves capture */
    if (run == TE_OK)
        return st;
    if (*exec)
        be->graph.exec_free(*exec);
    *exec = NULL;
    te_set_error(run, "%s", why);
    return run;
}

static te_status replay(tg_plan *p, int s, int base)
{
    tg_capture *c = p->cap;
    const tg_segment *sg = &c->seg[s];
    seg_state *ss = &c->st[s];
    if (ss->exec && (!same_state(p, ss->before) || (c->be->graph.exec_stale && c->be->graph.exec_stale(ss->exec)))) {
        c->be->graph.exec_free(ss->exec);
        ss->exec = NULL;
    }
    if (!ss->exec) {
        if ((!ss->before && !(ss->before = malloc((size_t)p->n_values * sizeof *ss->before))) ||
            (!ss->after && !(ss->after = malloc((size_t)p->n_values * sizeof *ss->after)))) {
            te_set_error(TE_ERR_NOMEM, "graph: out of memory capturing kernels k%d..k%d", sg->first,
                         sg->first + sg->count - 1);
            return TE_ERR_NOMEM;
        }
        save_state(p, ss->before);
        const int slots = te_watch_slots();
        if (capture(p, sg, base, &ss->exec) != TE_OK) {
            TE_LOG(TE_LOG_GRAPH, TE_LOG_WARN,
                   "tdbg: graph mode: cannot capture kernels k%d..k%d on %s (%s); running them one by one",
                   sg->first, sg->first + sg->count - 1, c->be->name, te_error());
            te_error_clear();
            set_state(p, ss->before);
            ss->direct = true;
            return run_direct(p, sg, base);
        }
        save_state(p, ss->after);
        ss->watch_slots = te_watch_slots() - slots;
    }
    te_status st = c->be->graph.launch(ss->exec);
    if (st != TE_OK)
        return st;
    /* The watch's flag kernels are in the graph, at the slots they took
     * when captured: the step's count moves on as if they ran one by one. */
    if (te_watch_active())
        te_watch_advance(ss->watch_slots);
    set_state(p, ss->after);
    te_set_phase(p->kernels[sg->first + sg->count - 1].phase);
    return TE_OK;
}

te_status tg_capture_run(tg_plan *p, int base)
{
    tg_capture *c = p->cap;
    const int hooks = te_ops_seen_one_by_one() ? 2 : te_watch_active() ? 1 : 0;
    if (!c->cut || hooks != c->hooks) { /* hooks came or went: the host points moved */
        forget(c);
        c->n_seg = tg_segments_cut(p, tg_kernel_capturable, (void *)c->be, c->seg);
        c->hooks = hooks;
        c->cut = true;
        c->runs = 0; /* a warm run again: what the new segments allocate (the watch's flags) */
    }
    const bool warm = c->runs++ == 0; /* the first run allocates what capture cannot */
    te_status st = TE_OK;
    for (int s = 0; s < c->n_seg && st == TE_OK; s++) {
        const tg_segment *sg = &c->seg[s];
        st = !sg->capture || warm || c->st[s].direct ? run_direct(p, sg, base) : replay(p, s, base);
    }
    return st;
}
