/*
 * cmd_dump.c — dumps from the debugger: `dump SPEC` starts a dump session
 * from the next step (the same spec as --dump and TDBG_DUMP), `dump off`
 * stops it after writing what is queued, `info dump` says what it selects
 * and what it wrote.
 */
#include "cmd.h"
#include "dump.h"
#include "session.h"

#include <stdlib.h>
#include <string.h>

static dump_session *dumping;
static dump_spec dumping_spec;

static void stop_at_exit(void)
{
    dump_stop(dumping); /* everything queued reaches the disk */
    dumping = NULL;
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

static bool cmd_dump(const char *args)
{
    static bool registered;
    if (!args[0]) {
        dbg_error("dump: give a spec (dump dir=D;ops=GLOB;steps=0|5-8;...), or 'dump off'");
        return false;
    }
    if (strcmp(args, "off") == 0) {
        if (!dumping) {
            dbg_error("dump off: no dump is running");
            return false;
        }
        dump_flush(dumping);
        dump_status s = dump_status_get(dumping);
        dump_stop(dumping);
        dumping = NULL;
        fprintf(dbg_out, "Dump to %s stopped: ", dumping_spec.dir);
        report(&s);
        return false;
    }
    dump_spec spec;
    char err[1024];
    if (!dump_spec_parse(args, &spec, err, sizeof err)) {
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
    char text[DUMP_SPEC_TEXT_MAX];
    dump_spec_format(&spec, text, sizeof text);
    fprintf(dbg_out, "Dumping from step %lld: %s\n", (long long)dbg.step + 1, text);
    return false;
}

void dbg_dump_stopped(void) { dump_trigger(dumping); }

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
    dump_status s = dump_status_get(dumping);
    report(&s);
}

const dbg_cmd dbg_cmds_dump[] = {
    { "dump", NULL, "dump SPEC | dump off", "write tensors to HDF5 from the next step, or stop\n"
      "SPEC as for --dump: dir=D;ops=GLOB,type:T;steps=0|5-8|every:N;io=inputs|outputs|both;\n"
      "phase=forward,backward,update,params,grads;what=full|stats;max=2G;compress=gzip:N,\n"
      "or @FILE. 'info dump' shows what it selects and what it wrote.", cmd_dump },
    { NULL, NULL, NULL, NULL, NULL },
};
