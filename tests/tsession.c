/*
 * tsession.c — tdbg sessions for the suites: run, read, assert (see
 * tsession.h).
 */
#include "tsession.h"

#include "h5file.h"
#include "session.h"
#include "testutil.h"

#include <check.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { CMD_MAX = 8000 }; /* tu_shell takes 8191 bytes; the wrapper around the command fits in the rest */

static ts_session sh_line(const char *cmd)
{
    ts_session s = { .out = calloc(1, TS_OUT_MAX) };
    ck_assert(s.out != NULL);
    /* a newline, not ';': the command may end in '&' or a comment */
    s.status = tu_shell(s.out, TS_OUT_MAX, "{ %s\n} 2>&1", cmd);
    return s;
}

ts_session ts_sh(const char *fmt, ...)
{
    char cmd[CMD_MAX];
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    ck_assert_msg(len >= 0 && len < CMD_MAX, "a command of %d bytes: %.200s...", len, cmd);
    return sh_line(cmd);
}

ts_session ts_tdbg(const char *flags, const char *cmds, const char *prog, const char *fmt, ...)
{
    char args[1024], ex[4096] = "", cmd[CMD_MAX];
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    ck_assert_msg(len >= 0 && (size_t)len < sizeof args, "arguments of %d bytes: %s", len, args);
    char *copy = strdup(cmds), *save = NULL;
    ck_assert(copy != NULL);
    size_t used = 0;
    for (char *c = strtok_r(copy, ";", &save); c; c = strtok_r(NULL, ";", &save)) {
        len = snprintf(ex + used, sizeof ex - used, " -ex '%s'", c + strspn(c, " "));
        ck_assert_msg(len >= 0 && (size_t)len < sizeof ex - used, "commands too long: %s", cmds);
        used += (size_t)len;
    }
    free(copy);
    len = snprintf(cmd, sizeof cmd, "'%s/debugger/tdbg' %s%s -- '%s/examples/%s' %s </dev/null", TDBG_BUILDDIR,
                   flags, ex, TDBG_BUILDDIR, prog, args);
    ck_assert_msg(len >= 0 && len < CMD_MAX, "a command of %d bytes: %.200s...", len, cmd);
    return sh_line(cmd);
}

void ts_free(ts_session *s)
{
    free(s->out);
    s->out = NULL;
}

void ts_has(const ts_session *s, const char *want)
{
    ck_assert_msg(strstr(s->out, want) != NULL, "no '%s' in the session:\n%s", want, s->out);
}

void ts_lacks(const ts_session *s, const char *unwanted)
{
    ck_assert_msg(strstr(s->out, unwanted) == NULL, "'%s' in the session:\n%s", unwanted, s->out);
}

void ts_status_is(const ts_session *s, int want)
{
    ck_assert_msg(s->status == want, "exit status %d, want %d; the session:\n%s", s->status, want, s->out);
}

int ts_count(const ts_session *s, const char *what)
{
    int n = 0;
    for (const char *p = s->out; (p = strstr(p, what)) != NULL; p++)
        n++;
    return n;
}

const char *ts_stopped_line(const ts_session *s, int k, char *buf, size_t n)
{
    int i = 0;
    for (const char *p = s->out; (p = strstr(p, "stopped: ")) != NULL; p++) {
        if (p != s->out && p[-1] != '\n')
            continue;
        if (i++ == k) {
            snprintf(buf, n, "%.*s", (int)strcspn(p, "\n"), p);
            return buf;
        }
    }
    return NULL;
}

void ts_stop_is(const ts_session *s, int k, const char *want)
{
    char buf[1024];
    const char *got = ts_stopped_line(s, k, buf, sizeof buf);
    ck_assert_msg(got && strcmp(got, want) == 0, "stop %d:\n  want %s\n  got  %s\nsession:\n%s", k, want,
                  got ? got : "(none)", s->out);
}

char ts_captured[8192];

bool ts_exec(const char *line)
{
    fflush(stdout);
    FILE *f = fmemopen(ts_captured, sizeof ts_captured, "w");
    ck_assert(f != NULL);
    FILE *saved = stdout;
    stdout = f;
    bool resume = dbg_execute(line);
    fflush(f);
    stdout = saved;
    fclose(f);
    return resume;
}

/* ---- printed values against dumped ones ---------------------------------------- */

float *ts_dumped(const char *dir, const char *path, int64_t *n)
{
    char file[512], err[1024];
    snprintf(file, sizeof file, "%s/step-00000000.h5", dir);
    dump_step_reader *r = dump_step_open(file, err, sizeof err);
    ck_assert_msg(r != NULL, "%s", err);
    int i = dump_step_find(r, path);
    ck_assert_msg(i >= 0, "%s lacks %s", file, path);
    *n = dump_step_tensor(r, i)->numel;
    float *v = malloc((size_t)*n * sizeof *v);
    ck_assert(v && dump_step_read_f32(r, i, v, err, sizeof err));
    dump_step_close(r);
    return v;
}

void ts_printed(const ts_session *s, const char *header, float *v, int n)
{
    const char *p = strstr(s->out, header);
    ck_assert_msg(p != NULL, "no '%s' in the session:\n%s", header, s->out);
    p = strchr(p, '\n');
    for (int i = 0; i < n; i++) {
        p += strspn(p, " \n[]");
        char *end;
        v[i] = strtof(p, &end);
        ck_assert_msg(end != p, "number %d after '%s' unreadable: %.40s", i, header, p);
        p = end;
    }
}

void ts_assert_printed(const char *what, double got, double want)
{
    ck_assert_msg(fabs(got - want) <= 1e-5 * fabs(want) + 1e-9, "%s: printed %.9g, the dump's %.9g", what, got,
                  want);
}
