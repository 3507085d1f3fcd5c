/*
 * cmd_dump.c — dumps from the debugger: `dump SPEC` starts a dump session
 * (the same spec as --dump and TDBG_DUMP) with the first whole step to
 * come, `dump off` stops it after writing what is queued, `info dump` says
 * what it selects and what it wrote. At every stop the session writes
 * what it has queued (and its flight recorder what it holds) before the
 * first command is read, so what these print is what is on disk.
 */
#include "cmd.h"
#include "dump.h"
#include "h5file.h"
#include "session.h"

#include <stdlib.h>
#include <string.h>

static dump_session *dumping;
static dump_spec dumping_spec;

static void report(const dump_status *s);

/* quit, the end of a batch script, the program's end: everything queued
 * reaches the disk, and the last word says what is there. */
static void stop_at_exit(void)
{
    if (!dumping)
        return;
    dump_flush(dumping);
    dump_status s = dump_status_get(dumping);
    dump_stop(dumping);
    dumping = NULL;
    fprintf(dbg_out, "tdbg: dump to %s ended: ", dumping_spec.dir);
    report(&s);
}

static void report(const dump_status *s)
{
    fprintf(dbg_out, "%lld steps and %lld tensors written (%.1f MB), %.1f MB queued%s%s\n",
            (long long)s->steps_written, (long long)s->tensors_written, (double)s->bytes_written / (1 << 20),
            (double)s->queued_bytes / (1 << 20), s->capped ? "; the size cap was reached" : "",
            s->failed ? "; stopped by an error" : "");
    if (s->failed)
        fprintf(dbg_out, "  %s\n", s->error);
}

/* The op, io and slot a tensor has in this step's ops (its first use as an
 * output, else as an input); parameters and gradients by name. */
static void place_of(const char *name, const te_tensor *t, dump_tensor_info *ti)
{
    for (int i = 0; i < dbg.n_ops; i++)
        for (int io = 1; io >= 0; io--) {
            const dbg_op *o = &dbg.ops[i];
            int n = io ? o->n_out : o->n_in;
            for (int k = 0; k < n; k++)
                if ((io ? o->out[k] : o->in[k]) == t) {
                    snprintf(ti->op, sizeof ti->op, "%s", o->name);
                    snprintf(ti->op_type, sizeof ti->op_type, "%s", o->type);
                    snprintf(ti->file, sizeof ti->file, "%s", o->loc.file ? o->loc.file : "");
                    snprintf(ti->kernel, sizeof ti->kernel, "%s", o->kernel);
                    ti->exec_index = o->exec;
                    ti->phase = o->phase;
                    ti->line = o->loc.line;
                    ti->io = io ? DUMP_OUT : DUMP_IN;
                    ti->slot = k;
                    return;
                }
        }
    /* "param:fc1.weight" -> op "param/fc1.weight", as parameter dumps are named */
    const char *colon = strchr(name, ':');
    snprintf(ti->op, sizeof ti->op, "%.*s/%.100s", colon ? (int)(colon - name) : 0, name,
             colon ? colon + 1 : name);
    snprintf(ti->op_type, sizeof ti->op_type, "%s", strncmp(name, "grad:", 5) == 0 ? "Gradient" : "Parameter");
    ti->exec_index = -1;
    ti->phase = dbg.phase;
    ti->io = DUMP_OUT;
}

/* `dump now T...`: those tensors, at once, into DIR/now/step-N.h5 (DIR the
 * running dump's, else tdbg-dump), replacing an earlier one of this step. */
static bool dump_now(const char *args)
{
    const te_tensor *ts[32];
    char names[32][TE_NAME_MAX], err[1024];
    int n = 0;
    while (args[0] && n < 32) {
        args = dbg_word(args, names[n], sizeof names[n]);
        if (!(ts[n] = dbg_tensor_find(names[n], err, sizeof err))) {
            dbg_error("dump now: %s", err);
            return false;
        }
        n++;
    }
    if (!n) {
        dbg_error("dump now: which tensors? e.g. dump now fc1/linear:out0 param:fc1.weight");
        return false;
    }
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/now", dumping ? dumping_spec.dir : "tdbg-dump");
    if (dumping) /* HDF5 is not thread-safe: the writer thread must be idle */
        dump_flush(dumping);
    int64_t step = dbg.step < 0 ? 0 : dbg.step;
    dump_step_writer *w = dump_step_create(dir, step, 0, err, sizeof err);
    for (int i = 0; w && i < n; i++) {
        dump_tensor_info ti = { 0 };
        place_of(names[i], ts[i], &ti);
        snprintf(ti.tensor, sizeof ti.tensor, "%s", ts[i]->name);
        if (!dump_step_add(w, &ti, ts[i], err, sizeof err)) {
            dump_step_abort(w);
            w = NULL;
        }
    }
    if (!w || !dump_step_commit(w, err, sizeof err)) {
        dbg_error("dump now: %s", err);
        return false;
    }
    fprintf(dbg_out, "Wrote %d tensor%s to %s/step-%08lld.h5\n", n, n == 1 ? "" : "s", dir, (long long)step);
    return false;
}

/* The first step a session started now writes: this one when stopped at
 * its start (no op has run: the session's own step hook is still to
 * come, after the debugger's), else the next (a step under way is partly
 * gone; before `run`, step 0). */
static int64_t first_step(void)
{
    return dbg.in_step && dbg.n_ops == 0 ? dbg.step : dbg.step + 1;
}

bool dbg_dump_running(void) { return dumping != NULL; }

bool dbg_dump_off(const char *what)
{
    if (!dumping) {
        dbg_error("%s: no dump is running", what);
        return false;
    }
    dump_flush(dumping);
    dump_status s = dump_status_get(dumping);
    dump_stop(dumping);
    dumping = NULL;
    fprintf(dbg_out, "Dump to %s stopped: ", dumping_spec.dir);
    report(&s);
    return true;
}

bool dbg_dump_begin(const char *text, int64_t from)
{
    static bool registered;
    dump_spec spec;
    char err[1024];
    if (!dump_spec_parse(text, &spec, err, sizeof err)) {
        dbg_error("dump: %s", err);
        return false;
    }
    if (dumping) { /* a new spec replaces the old one */
        dump_stop(dumping);
        dumping = NULL;
    }
    dump_run_info info = { .mode = TE_MODE_EAGER, .command_line = dbg.program };
    if (!(dumping = dump_start(&spec, &info, err, sizeof err))) {
        dbg_error("%s", err);
        return false;
    }
    dumping_spec = spec;
    if (!registered) {
        atexit(stop_at_exit);
        registered = true;
    }
    char shown[DUMP_SPEC_TEXT_MAX];
    dump_spec_format(&spec, shown, sizeof shown);
    fprintf(dbg_out, "Dumping from step %lld: %s\n", (long long)from, shown);
    return true;
}

static bool cmd_dump(const char *args)
{
    if (strncmp(args, "now", 3) == 0 && (args[3] == ' ' || !args[3]))
        return dump_now(dbg_skip_space(args + 3));
    if (!args[0]) {
        dbg_error("dump: give a spec (dump dir=D;ops=GLOB;steps=0|5-8;...), or 'dump off'");
        return false;
    }
    if (strcmp(args, "off") == 0)
        dbg_dump_off("dump off");
    else
        dbg_dump_begin(args, first_step());
    return false;
}

void dbg_dump_stopped(void) { dump_stopped(dumping, dbg_stopped_at()); }

void dbg_info_dump(void);
void dbg_info_dump(void)
{
    if (!dumping) {
        fprintf(dbg_out, "No dump is running ('dump SPEC' starts one).\n");
        return;
    }
    char text[DUMP_SPEC_TEXT_MAX];
    dump_spec_format(&dumping_spec, text, sizeof text);
    fprintf(dbg_out, "Dumping: %s\n  ", text);
    dump_flush(dumping); /* a no-op at a stop, which flushed: the counts are the files' */
    dump_status s = dump_status_get(dumping);
    report(&s);
    if (s.warning[0])
        fprintf(dbg_out, "  warning: %s\n", s.warning);
}

const dbg_cmd dbg_cmds_dump[] = {
    { .name = "dump", .usage = "dump SPEC | dump off | dump now TENSOR...",
      .help = "write tensors to HDF5 from the next step, stop, or write some now\n"
      "SPEC as for --dump: dir=D;ops=GLOB,type:T;steps=0|5-8|every:N;io=inputs|outputs|both;\n"
      "phase=forward,backward,update,params,grads;what=full|stats;max=2G;compress=gzip:N,\n"
      "or @FILE. 'info dump' shows what it selects and what it wrote. 'dump now' writes the\n"
      "tensors named into DIR/now/step-N.h5 at once.",
      .args = { { .words = DBG_WORDS("off", "now") }, { DBG_ARG_TENSOR } }, .max_words = DBG_WORDS_ANY,
      .run = cmd_dump },
    { .name = NULL },
};
