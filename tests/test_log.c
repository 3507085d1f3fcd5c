/*
 * test_log.c — TDBG_LOG (engine/log.c, docs/logs.md): the spec's grammar
 * and its errors, filtering per component and level, the line's format,
 * the log file, whole lines from concurrent threads, the bare messages
 * when nothing is set, and examples/mlp run with and without it.
 */
#include "suites.h"
#include "te_internal.h"
#include "tsession.h"
#include "testutil.h"

#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MLP "'" TDBG_BUILDDIR "/examples/mlp' --hidden 16 --batch 8 --train-size 16 --threads 1 --steps 2 "
/* One line of the prefixed format; the message is matched separately. */
#define LINE_RE "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z step=(-|[0-9]+) " \
                "(engine|engine\\.graph|engine\\.data|dump|debugger) (error|warn|info|debug): "

static char scratch[PATH_MAX];

static void log_setup(void)
{
    tu_setup();
    tu_scratch_make(scratch, sizeof scratch, "tdbg-log");
    ck_assert_int_eq(te_log_configure(NULL, NULL), TE_OK);
}

static void log_teardown(void)
{
    te_log_configure(NULL, NULL);
    tu_scratch_remove(scratch);
    tu_teardown();
}

/* The levels of the five components as "engine,engine.graph,...": one
 * string for one assertion that quotes them all. */
static const char *levels_str(char *buf, size_t n)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int c = 0; c < TE_LOG_COMPONENTS && at < n; c++)
        at += (size_t)snprintf(buf + at, n - at, "%s%s=%s", c ? "," : "", te_log_component_name((te_log_component)c),
                               te_log_level_name((te_log_level)te_log_levels[c]));
    return buf;
}

static void levels_are(const char *spec, const char *want)
{
    char got[256];
    ck_assert_msg(te_log_configure(spec, NULL) == TE_OK, "te_log_configure(\"%s\") failed: %s", spec, te_error());
    ck_assert_msg(strcmp(levels_str(got, sizeof got), want) == 0, "TDBG_LOG=%s: levels %s, want %s", spec, got, want);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    char *s = calloc(1, 1 << 22);
    ck_assert(s != NULL);
    size_t n = fread(s, 1, (1 << 22) - 1, f);
    s[n] = '\0';
    fclose(f);
    return s;
}

/* A fresh log file under the scratch directory, lines going there. */
static const char *to_file(const char *spec, const char *name)
{
    static char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", scratch, name);
    ck_assert_msg(te_log_configure(spec, path) == TE_OK, "te_log_configure(%s, %s): %s", spec, path, te_error());
    return path;
}

static int count_of(const char *s, const char *what)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, what)); p++)
        n++;
    return n;
}

/* ---- the spec ------------------------------------------------------------ */

START_TEST(test_spec_bare_level)
{
    levels_are(NULL, "engine=warn,engine.graph=warn,engine.data=warn,dump=warn,debugger=warn");
    levels_are("debug", "engine=debug,engine.graph=debug,engine.data=debug,dump=debug,debugger=debug");
    levels_are("off", "engine=off,engine.graph=off,engine.data=off,dump=off,debugger=off");
    levels_are("ERROR", "engine=error,engine.graph=error,engine.data=error,dump=error,debugger=error");
    levels_are("", "engine=warn,engine.graph=warn,engine.data=warn,dump=warn,debugger=warn");
}
END_TEST

/* NAME sets the components it names or is a prefix of at a dot. */
START_TEST(test_spec_pairs_prefix)
{
    levels_are("engine=debug", "engine=debug,engine.graph=debug,engine.data=debug,dump=warn,debugger=warn");
    levels_are("engine.graph=debug", "engine=warn,engine.graph=debug,engine.data=warn,dump=warn,debugger=warn");
    levels_are("dump=info,debugger=error", "engine=warn,engine.graph=warn,engine.data=warn,dump=info,debugger=error");
    levels_are(" engine.data = debug , ,", "engine=warn,engine.graph=warn,engine.data=debug,dump=warn,debugger=warn");
}
END_TEST

START_TEST(test_spec_later_wins)
{
    levels_are("warn,dump=debug", "engine=warn,engine.graph=warn,engine.data=warn,dump=debug,debugger=warn");
    levels_are("dump=debug,error", "engine=error,engine.graph=error,engine.data=error,dump=error,debugger=error");
    levels_are("engine=info,engine.data=debug",
               "engine=info,engine.graph=info,engine.data=debug,dump=warn,debugger=warn");
    levels_are("engine.data=debug,engine=info",
               "engine=info,engine.graph=info,engine.data=info,dump=warn,debugger=warn");
}
END_TEST

/* A bad token is named with what was expected, and nothing changes. */
static void rejected(const char *spec, const char *const *parts)
{
    char before[256], after[256];
    levels_str(before, sizeof before);
    te_error_clear();
    ck_assert_msg(te_log_configure(spec, NULL) == TE_ERR_ARG, "TDBG_LOG=%s accepted", spec);
    for (int i = 0; parts[i]; i++)
        ck_assert_msg(strstr(te_error(), parts[i]), "TDBG_LOG=%s: \"%s\" missing from: %s", spec, parts[i],
                      te_error());
    ck_assert_msg(strcmp(levels_str(after, sizeof after), before) == 0, "TDBG_LOG=%s changed the levels: %s -> %s",
                  spec, before, after);
}
#define REJECTED(spec, ...) rejected((spec), (const char *const[]){ __VA_ARGS__, NULL })

START_TEST(test_spec_bad_token)
{
    levels_are("info,dump=debug", "engine=info,engine.graph=info,engine.data=info,dump=debug,debugger=info");
    REJECTED("warn,engine=loud", "'engine=loud'", "no level 'loud'", "off, error, warn, info or debug");
    REJECTED("engin=debug", "'engin=debug'", "no component 'engin'", "engine, engine.graph", "did you mean 'engine'?");
    REJECTED("engine.gr=debug", "no component 'engine.gr'", "did you mean 'engine.graph'?");
    REJECTED("verbose", "'verbose'", "expected a level (off, error, warn, info or debug) or NAME=LEVEL");
    REJECTED("warning", "'warning'", "did you mean 'warn'?");
    REJECTED("dump=debgu", "no level 'debgu'", "did you mean 'debug'?");
    REJECTED("=debug", "no component ''");
    /* a bad token after good ones: none of them applies */
    REJECTED("off,dump=off,dumb=off", "'dumb=off'");
}
END_TEST

/* ---- filtering and format -------------------------------------------------- */

static int evaluated;
static int count_evaluation(void) { return ++evaluated; }

START_TEST(test_filter_component_level)
{
    const char *path = to_file("engine.graph=info", "filter.log");
    TE_LOG(TE_LOG_GRAPH, TE_LOG_DEBUG, "graph-debug %d", count_evaluation());
    TE_LOG(TE_LOG_GRAPH, TE_LOG_INFO, "graph-info");
    TE_LOG(TE_LOG_GRAPH, TE_LOG_WARN, "graph-warn");
    TE_LOG(TE_LOG_GRAPH, TE_LOG_ERROR, "graph-error");
    TE_LOG(TE_LOG_DUMP, TE_LOG_INFO, "dump-info %d", count_evaluation());
    TE_LOG(TE_LOG_DUMP, TE_LOG_WARN, "dump-warn");
    TE_LOG(TE_LOG_ENGINE, TE_LOG_DEBUG, "engine-debug");
    TE_LOG(TE_LOG_ENGINE, TE_LOG_WARN, "engine-warn");
    ck_assert_msg(evaluated == 0, "the arguments of a message that is off were evaluated (%d)", evaluated);
    ck_assert(!te_log_on(TE_LOG_GRAPH, TE_LOG_DEBUG) && te_log_on(TE_LOG_GRAPH, TE_LOG_INFO));
    char *s = slurp(path);
    static const char *const kept[] = { " engine.graph info: graph-info\n", " engine.graph warn: graph-warn\n",
                                        " engine.graph error: graph-error\n", " dump warn: dump-warn\n",
                                        " engine warn: engine-warn\n" };
    for (size_t i = 0; i < sizeof kept / sizeof *kept; i++)
        ck_assert_msg(strstr(s, kept[i]), "\"%s\" missing from the log:\n%s", kept[i], s);
    ck_assert_msg(!strstr(s, "graph-debug") && !strstr(s, "dump-info") && !strstr(s, "engine-debug"),
                  "a message below its component's level was written:\n%s", s);
    ck_assert_int_eq(count_of(s, "\n"), 5);
    free(s);
}
END_TEST

/* "2026-12-03T03:31:02.123Z step=12 engine.graph debug: MESSAGE", the time
 * in UTC now; step=- before the first step; a legacy "warning: " or
 * "tdbg: " at the message's start is dropped (the level says it). */
START_TEST(test_line_format)
{
    const char *path = to_file("debug", "format.log");
    const time_t before = time(NULL);
    TE_LOG(TE_LOG_GRAPH, TE_LOG_DEBUG, "compiled %d kernels", 12);
    te_step_begin();
    TE_LOG(TE_LOG_DATA, TE_LOG_INFO, "in step %s", "zero");
    te_step_end();
    te_step_begin();
    TE_LOG(TE_LOG_ENGINE, TE_LOG_WARN, "warning: time travel: locate: %s\n", "why");
    TE_LOG(TE_LOG_DUMP, TE_LOG_ERROR, "tdbg: dump stopped: disk full");
    te_step_end();
    char *s = slurp(path);
    regex_t re;
    ck_assert_int_eq(regcomp(&re, LINE_RE "(.*)$", REG_EXTENDED | REG_NEWLINE), 0);
    static const char *const want[][4] = {
        { "-", "engine.graph", "debug", "compiled 12 kernels" },
        { "0", "engine.data", "info", "in step zero" },
        { "1", "engine", "warn", "time travel: locate: why" },
        { "1", "dump", "error", "dump stopped: disk full" },
    };
    const char *p = s;
    for (size_t i = 0; i < 4; i++) {
        regmatch_t m[5];
        ck_assert_msg(regexec(&re, p, 5, m, 0) == 0 && m[0].rm_so == 0, "line %zu does not match the format:\n%s", i,
                      s);
        for (int g = 0; g < 4; g++) {
            const int len = (int)(m[g + 1].rm_eo - m[g + 1].rm_so);
            ck_assert_msg(len == (int)strlen(want[i][g]) && strncmp(p + m[g + 1].rm_so, want[i][g], (size_t)len) == 0,
                          "line %zu: field %d is '%.*s', want '%s':\n%s", i, g, len, p + m[g + 1].rm_so, want[i][g], s);
        }
        if (i == 0) { /* the time is now, in UTC */
            struct tm tm = { 0 };
            ck_assert_ptr_nonnull(strptime(p, "%Y-%m-%dT%H:%M:%S", &tm));
            const time_t t = timegm(&tm);
            ck_assert_msg(t >= before - 1 && t <= time(NULL) + 1, "the time %.24s is not now (UTC)", p);
        }
        p += m[0].rm_eo + 1;
    }
    ck_assert_msg(*p == '\0', "more lines than written:\n%s", s);
    regfree(&re);
    free(s);
}
END_TEST

/* TDBG_LOG_FILE: appended to, created 0600, closed on exec; a file that
 * cannot be opened leaves the output as it was. */
START_TEST(test_log_file)
{
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/run.log", scratch);
    FILE *f = fopen(path, "w");
    ck_assert(f != NULL);
    fputs("an earlier run\n", f);
    fclose(f);
    chmod(path, 0644);
    ck_assert_int_eq(te_log_configure(NULL, path), TE_OK);
    TE_LOG(TE_LOG_ENGINE, TE_LOG_WARN, "first");
    TE_LOG(TE_LOG_ENGINE, TE_LOG_INFO, "not at warn");
    char *s = slurp(path);
    ck_assert_msg(strncmp(s, "an earlier run\n", 15) == 0 && strstr(s, " engine warn: first\n") &&
                      count_of(s, "\n") == 2, "not appended with the prefix:\n%s", s);
    free(s);
    /* the descriptor is close-on-exec */
    int seen = 0;
    for (int fd = 3; fd < 1024; fd++) {
        char link[64], target[PATH_MAX];
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        ssize_t n = readlink(link, target, sizeof target - 1);
        if (n <= 0)
            continue;
        target[n] = '\0';
        if (strstr(target, "/run.log")) {
            seen++;
            ck_assert_msg(fcntl(fd, F_GETFD) & FD_CLOEXEC, "the log's fd %d is not close-on-exec", fd);
        }
    }
    ck_assert_int_eq(seen, 1);
    /* a new file is made 0600 whatever the umask allows */
    mode_t old = umask(0);
    const char *fresh = to_file("info", "fresh.log");
    umask(old);
    struct stat st;
    ck_assert_int_eq(stat(fresh, &st), 0);
    ck_assert_msg((st.st_mode & 0777) == 0600, "the log file was made %o", (unsigned)(st.st_mode & 0777));
    TE_LOG(TE_LOG_ENGINE, TE_LOG_INFO, "to the fresh one");
    s = slurp(path);
    ck_assert_msg(!strstr(s, "fresh"), "a line went to the old file:\n%s", s);
    free(s);
    s = slurp(fresh);
    ck_assert_msg(strstr(s, " engine info: to the fresh one\n"), "the new file lacks the line:\n%s", s);
    free(s);
    /* a file that cannot be opened */
    char bad[PATH_MAX + 32];
    snprintf(bad, sizeof bad, "%s/no/such/dir.log", scratch);
    ck_assert_int_eq(te_log_configure("debug", bad), TE_ERR_IO);
    ck_assert_msg(strstr(te_error(), bad) && strstr(te_error(), "No such file"), "te_error: %s", te_error());
    ck_assert_int_eq(te_log_levels[TE_LOG_ENGINE], TE_LOG_INFO);
    TE_LOG(TE_LOG_ENGINE, TE_LOG_INFO, "still the fresh one");
    s = slurp(fresh);
    ck_assert_msg(strstr(s, "still the fresh one"), "the output moved:\n%s", s);
    free(s);
}
END_TEST

/* Threads logging at once (the loader's workers, the dump writer's two)
 * give whole lines. */
#define THREADS 8
#define LINES 400

static void *log_lines(void *arg)
{
    const int id = (int)(intptr_t)arg;
    char pad[301];
    memset(pad, 'a' + id, 300);
    pad[300] = '\0';
    for (int i = 0; i < LINES; i++)
        TE_LOG(TE_LOG_DATA, TE_LOG_DEBUG, "thread %d line %d %s end", id, i, pad);
    return NULL;
}

START_TEST(test_threads_whole_lines)
{
    const char *path = to_file("engine.data=debug", "threads.log");
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, log_lines, (void *)(intptr_t)i), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    char *s = slurp(path);
    regex_t re;
    ck_assert_int_eq(regcomp(&re, LINE_RE "thread ([0-9]) line ([0-9]+) ([a-h]{300}) end$", REG_EXTENDED), 0);
    int next[THREADS] = { 0 }, lines = 0;
    for (char *line = s, *nl; *line; line = nl + 1) {
        ck_assert_msg((nl = strchr(line, '\n')) != NULL, "the log ends inside a line");
        *nl = '\0';
        regmatch_t m[7];
        ck_assert_msg(regexec(&re, line, 7, m, 0) == 0, "line %d is not whole: %.200s", lines, line);
        const int id = atoi(line + m[4].rm_so), n = atoi(line + m[5].rm_so);
        ck_assert_msg(id < THREADS && n == next[id] && line[m[6].rm_so] == 'a' + id,
                      "line %d: thread %d line %d out of order or mixed: %.200s", lines, id, n, line);
        next[id]++;
        lines++;
    }
    ck_assert_int_eq(lines, THREADS * LINES);
    regfree(&re);
    free(s);
}
END_TEST

/* Nothing set: warn everywhere, and a message on stderr exactly as the
 * engine printed it before it had levels. */
START_TEST(test_nothing_set_bare)
{
    ck_assert_int_eq(te_log_configure("debug", NULL), TE_OK);
    ck_assert_int_eq(te_log_configure(NULL, NULL), TE_OK); /* back to nothing set */
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/stderr", scratch);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600), saved = dup(2);
    ck_assert(fd >= 0 && saved >= 0);
    fflush(stderr);
    dup2(fd, 2);
    TE_LOG(TE_LOG_GRAPH, TE_LOG_WARN, "tdbg: TDBG_GRAPH_DISABLE: no pass '%s'", "x");
    TE_LOG(TE_LOG_ENGINE, TE_LOG_WARN, "warning: %s\n", "a glob matched nothing");
    TE_LOG(TE_LOG_DUMP, TE_LOG_ERROR, "tdbg: dump stopped: %s", "full");
    TE_LOG(TE_LOG_GRAPH, TE_LOG_INFO, "not at warn");
    TE_LOG(TE_LOG_DUMP, TE_LOG_DEBUG, "not at warn");
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(fd);
    char *s = slurp(path);
    ck_assert_str_eq(s, "tdbg: TDBG_GRAPH_DISABLE: no pass 'x'\n"
                        "warning: a glob matched nothing\n"
                        "tdbg: dump stopped: full\n");
    free(s);
}
END_TEST

/* ---- examples/mlp ------------------------------------------------------------ */

/* engine.graph=debug in graph mode with a dump running: the compile and the
 * memory plan are logged, the dump's queue (at warn) is not; dump=debug
 * logs the queue. */
START_TEST(test_mlp_graph_debug)
{
    ts_session r = ts_sh("env -u TDBG_LOG_FILE TDBG_LOG=engine.graph=debug " MLP
                         "--mode graph --dump 'dir=%s/d1' 2>&1 >/dev/null", scratch);
    ck_assert_int_eq(r.status, 0);
    ts_has(&r, " step=0 engine.graph info: graph train: plan 1 compiled for in0 f32[8,784], in1 i32[8] (training");
    ts_has(&r, " step=0 engine.graph debug: graph train: plan 1: ");
    ts_has(&r, " step=0 engine.graph debug: graph train: pass dce: ");
    ts_has(&r, " step=0 engine.graph debug: graph memory: ");
    ts_lacks(&r, " dump ");
    ts_lacks(&r, " engine ");
    regex_t re;
    ck_assert_int_eq(regcomp(&re, LINE_RE, REG_EXTENDED | REG_NOSUB), 0);
    for (char *line = r.out, *nl; line && *line; line = nl ? nl + 1 : NULL) {
        nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        ck_assert_msg(regexec(&re, line, 0, NULL, 0) == 0, "not a log line on stderr: %s", line);
    }
    regfree(&re);
    ts_free(&r);
    r = ts_sh("env -u TDBG_LOG_FILE TDBG_LOG=dump=debug " MLP "--mode graph --dump 'dir=%s/d2' 2>&1 >/dev/null",
              scratch);
    ck_assert_int_eq(r.status, 0);
    ts_has(&r, " step=- dump info: writing to ");
    ts_has(&r, " step=0 dump debug: enqueued tensor of step 0 (");
    ts_has(&r, " dump debug: dequeued tensor of step 0 (");
    ts_has(&r, " dump debug: syncer: step 1 fsynced and renamed in ");
    ts_has(&r, " dump info: stopped: 2 steps, ");
    ts_lacks(&r, "engine.graph");
    ts_free(&r);
}
END_TEST

/* TDBG_LOG unset: stderr is the run's warnings exactly as they were, no
 * log line; TDBG_LOG=warn: the same warnings, as log lines. */
START_TEST(test_mlp_unset_unchanged)
{
    const char *run = "TDBG_GRAPH_DISABLE=bogus " MLP "--mode graph --dump 'dir=%s/%s;ops=nosuch/*' 2>&1 >/dev/null";
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "env -u TDBG_LOG -u TDBG_LOG_FILE %s", run);
    ts_session r = ts_sh(cmd, scratch, "d1");
    ck_assert_int_eq(r.status, 0);
    ck_assert_str_eq(r.out, "tdbg: TDBG_GRAPH_DISABLE: no pass 'bogus' (dce, fold, cse, bn-fold, fuse-act, fuse-ew, "
                            "fuse-attn, fuse-sum, recompute, layout, capture, all)\n"
                            "tdbg: dump warning: dump selection ops=nosuch/* matched none of the 12 ops of step 0; "
                            "the closest op names: fc1/relu, fc1/linear, fc2/linear\n");
    ts_free(&r);
    snprintf(cmd, sizeof cmd, "env -u TDBG_LOG_FILE TDBG_LOG=warn %s", run);
    r = ts_sh(cmd, scratch, "d2");
    ck_assert_int_eq(r.status, 0);
    ts_has(&r, "Z step=0 engine.graph warn: TDBG_GRAPH_DISABLE: no pass 'bogus' (dce,");
    ts_has(&r, " dump warn: dump warning: dump selection ops=nosuch/* matched none of the 12 ops of step 0");
    ck_assert_int_eq(ts_count(&r, "\n"), 2);
    ts_free(&r);
}
END_TEST

/* TDBG_LOG_FILE: the lines go to the file, stderr keeps nothing of them;
 * a bad TDBG_LOG: one line naming the token, and the run goes on. */
START_TEST(test_mlp_env)
{
    ts_session r = ts_sh("TDBG_LOG=engine.graph=info TDBG_LOG_FILE='%s/mlp.log' " MLP "--mode graph 2>&1 >/dev/null",
                         scratch);
    ck_assert_int_eq(r.status, 0);
    ck_assert_str_eq(r.out, "");
    ts_free(&r);
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/mlp.log", scratch);
    char *s = slurp(path);
    ck_assert_msg(strstr(s, " engine.graph info: graph train: plan 1 compiled for ") &&
                      !strstr(s, " debug: "), "the log file:\n%s", s);
    free(s);
    r = ts_sh("env -u TDBG_LOG_FILE TDBG_LOG=engin=debug " MLP "2>&1 >/dev/null");
    ck_assert_int_eq(r.status, 0);
    ck_assert_str_eq(r.out, "tdbg: TDBG_LOG: 'engin=debug': no component 'engin' (expected engine, engine.graph, "
                            "engine.data, dump or debugger); did you mean 'engine'? Logging stays at the defaults.\n");
    ts_free(&r);
}
END_TEST

Suite *suite_log(void)
{
    Suite *s = suite_create("log");
    TCase *tc = tcase_create("log");
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, log_setup, log_teardown);
    tcase_add_test(tc, test_spec_bare_level);
    tcase_add_test(tc, test_spec_pairs_prefix);
    tcase_add_test(tc, test_spec_later_wins);
    tcase_add_test(tc, test_spec_bad_token);
    tcase_add_test(tc, test_filter_component_level);
    tcase_add_test(tc, test_line_format);
    tcase_add_test(tc, test_log_file);
    tcase_add_test(tc, test_threads_whole_lines);
    tcase_add_test(tc, test_nothing_set_bare);
    tcase_add_test(tc, test_mlp_graph_debug);
    tcase_add_test(tc, test_mlp_unset_unchanged);
    tcase_add_test(tc, test_mlp_env);
    suite_add_tcase(s, tc);
    return s;
}
