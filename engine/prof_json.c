/*
 * prof_json.c — the ring as Chrome trace event JSON (docs/profiler.md
 * "The trace format"): "X" events of categories step, phase, op, wait and compile
 * with ts and dur in microseconds, a "memory" counter after every op, a
 * thread_name per thread, and otherData {"tdbg": 1, "program", "steps"}.
 */
#include "prof_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* A JSON string; op names are user text. */
static void put_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", f);
        else if (*p == '\t')
            fputs("\\t", f);
        else if (*p < 0x20 || *p == 0x7f)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

/* Nanoseconds as microseconds with 3 decimals, exactly. */
static void put_us(FILE *f, uint64_t ns) { fprintf(f, "%" PRIu64 ".%03u", ns / 1000, (unsigned)(ns % 1000)); }

static void event_head(FILE *f, bool *first, const char *ph, const char *cat, const char *name, uint64_t t0,
                       int32_t tid)
{
    fputs(*first ? "\n" : ",\n", f);
    *first = false;
    fprintf(f, "{\"ph\":\"%s\",\"cat\":\"%s\",\"name\":", ph, cat);
    put_str(f, name);
    fprintf(f, ",\"pid\":%d,\"tid\":%d,\"ts\":", (int)getpid(), (int)tid);
    put_us(f, t0);
}

static void put_x(FILE *f, bool *first, const char *cat, const char *name, uint64_t t0, uint64_t t1, int32_t tid)
{
    event_head(f, first, "X", cat, name, t0, tid);
    fputs(",\"dur\":", f);
    put_us(f, t1 > t0 ? t1 - t0 : 0);
}

static void put_op(FILE *f, bool *first, const prof_step *s, const prof_ev *e)
{
    put_x(f, first, "op", prof_str(s, e->name), e->t0, e->t1, e->tid);
    fprintf(f, ",\"args\":{\"step\":%" PRId64 ",\"phase\":\"%s\",\"type\":", s->step, te_phase_name(e->phase));
    put_str(f, prof_str(s, e->type));
    fputs(",\"shape\":[", f);
    for (int d = 0; d < e->ndim; d++)
        fprintf(f, "%s%" PRId64, d ? "," : "", e->shape[d]);
    fprintf(f, "],\"dtype\":\"%s\",\"flops\":%.0f,\"bytes\":%" PRIu64 ",\"device\":\"%s\"",
            e->ndim ? te_dtype_name(e->dtype) : "", e->flops, e->bytes, te_device_name(e->device));
    if (e->tid == PROF_DEVICE_TID) {
        fputs(",\"host_us\":", f);
        put_us(f, e->host_ns);
    }
    if (e->kernel != PROF_NONE) {
        fputs(",\"kernel\":", f);
        put_str(f, prof_str(s, e->kernel));
    }
    if (e->coll_seq >= 0) /* a collective: which one of the job's, and who took part */
        fprintf(f, ",\"seq\":%" PRId64 ",\"rank\":%d,\"ranks\":%d", e->coll_seq, (int)e->coll_rank,
                (int)e->coll_ranks);
    fputs("}}", f);
    event_head(f, first, "C", "memory", "memory", e->t1, e->tid);
    fprintf(f, ",\"args\":{\"live\":%" PRIu64 ",\"peak\":%" PRIu64 "}}", e->live, e->peak);
}

/* end: the step's end, or for the step still running (a save at a stop),
 * now; then the phase still open (open_phase) ends there too. */
static void put_step(FILE *f, bool *first, const prof_step *s, uint64_t end, int open_phase)
{
    char name[32];
    snprintf(name, sizeof name, "step %" PRId64, s->step);
    put_x(f, first, "step", name, s->t0, end, s->tid);
    fprintf(f, ",\"args\":{\"step\":%" PRId64 ",\"data_ns\":%" PRIu64 ",\"hooks_ns\":%" PRIu64
               ",\"compile_ns\":%" PRIu64 ",\"dump_ns\":%" PRIu64,
            s->step, s->loader_ns, s->hooks_ns, s->compile_ns, s->dump_ns);
    if (s->arena_bytes)
        fprintf(f, ",\"arena_bytes\":%" PRIu64, s->arena_bytes);
    fputs(s->done ? "}}" : ",\"partial\":true}}", f);
    for (int i = 0; i < s->n; i++) {
        const prof_ev *e = &s->ev[i];
        switch (e->kind) {
        case PROF_OP: put_op(f, first, s, e); continue;
        case PROF_PHASE:
            put_x(f, first, "phase", te_phase_name(e->phase), e->t0, i == open_phase ? end : e->t1, e->tid);
            fprintf(f, ",\"args\":{\"step\":%" PRId64 ",\"hooks_ns\":%" PRIu64 ",\"data_ns\":%" PRIu64 "}}", s->step,
                    e->hooks_ns, e->loader_ns);
            continue;
        case PROF_DATA: put_x(f, first, "phase", "data", e->t0, e->t1, e->tid); break;
        case PROF_WAIT: put_x(f, first, "wait", "data", e->t0, e->t1, e->tid); break;
        case PROF_COMPILE: put_x(f, first, "compile", "compile", e->t0, e->t1, e->tid); break;
        case PROF_REPLAY: put_x(f, first, "replay", "watch replay", e->t0, e->t1, e->tid); break;
        }
        fprintf(f, ",\"args\":{\"step\":%" PRId64 "}}", s->step);
    }
}

static const char *program_name(char *buf, size_t n)
{
    ssize_t len = readlink("/proc/self/exe", buf, n - 1);
    if (len <= 0)
        return "";
    buf[len] = 0;
    const char *slash = strrchr(buf, '/');
    return slash ? slash + 1 : buf;
}

/* Writes steps[0..n) through a temporary file renamed over file. */
static te_status write_steps(const prof_state *p, const prof_step *const *steps, int n_steps, const char *file)
{
    /* Written beside the file and renamed over it: a crash mid-write leaves
     * the previous capture, never half a trace. */
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp%d", file, (int)getpid()) >= (int)sizeof tmp) {
        te_set_error(TE_ERR_ARG, "profile: the path %s is too long", file);
        return TE_ERR_ARG;
    }
    const uint64_t now = te_prof_now();
    FILE *f = fopen(tmp, "w");
    if (!f) {
        te_set_error(TE_ERR_IO, "profile: cannot write %s: %s", file, strerror(errno));
        return TE_ERR_IO;
    }
    bool first = true;
    fputs("{\"traceEvents\":[", f);
    int32_t tids[64];
    int n_tids = 0;
    for (int i = 0; i < n_steps; i++) {
        const prof_step *s = steps[i];
        put_step(f, &first, s, s->done ? s->t1 : now, s->done ? -1 : p->open_phase);
        for (int k = -1; k < s->n; k++) {
            int32_t tid = k < 0 ? s->tid : s->ev[k].tid;
            int j = 0;
            while (j < n_tids && tids[j] != tid)
                j++;
            if (j == n_tids && n_tids < 64)
                tids[n_tids++] = tid;
        }
    }
    char exe[512];
    const char *prog = program_name(exe, sizeof exe);
    for (int j = 0; j < n_tids; j++) {
        event_head(f, &first, "M", "__metadata", "thread_name", 0, tids[j]);
        fprintf(f, ",\"args\":{\"name\":\"%s\"}}",
                tids[j] == PROF_DEVICE_TID ? "device (event time)" : j == 0 ? "steps" : "thread");
    }
    fputs("\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"tdbg\":1,\"program\":", f);
    put_str(f, prog);
    fprintf(f, ",\"steps\":[%" PRId64 ",%" PRId64 "]}}\n", steps[0]->step, steps[n_steps - 1]->step);
    bool bad = ferror(f) != 0;
    if (fclose(f) != 0 || bad || rename(tmp, file) != 0) {
        te_set_error(TE_ERR_IO, "profile: cannot write %s: %s", file, strerror(errno));
        unlink(tmp);
        return TE_ERR_IO;
    }
    return TE_OK;
}

/* The steps to write, oldest first: the finished ones still in the ring,
 * then the one being recorded (its slot is the oldest finished one's once
 * the ring is full, so that it holds keep steps in all). */
int te_prof_steps_in_order(const prof_state *p, const prof_step **out)
{
    int64_t n_done = p->recorded < p->o.keep ? p->recorded : p->o.keep;
    if (p->cur && n_done == p->o.keep)
        n_done--;
    int n = 0;
    for (int64_t i = p->recorded - n_done; i < p->recorded; i++)
        if (p->ring[i % p->o.keep].done)
            out[n++] = &p->ring[i % p->o.keep];
    if (p->cur)
        out[n++] = p->cur;
    return n;
}

te_status te_prof_write_json(const prof_state *p, const char *file)
{
    const prof_step *steps[TE_PROF_KEEP_MAX];
    const int n_steps = te_prof_steps_in_order(p, steps);
    if (!n_steps) {
        te_set_error(TE_ERR_STATE, "profile: no step recorded to write to %s", file);
        return TE_ERR_STATE;
    }
    return write_steps(p, steps, n_steps, file);
}
