/*
 * log.c — the engine's logs (te_log.h, docs/logs.md).
 *
 * TDBG_LOG sets a level per component and TDBG_LOG_FILE sends the lines to
 * a file; both are read once, when the library is loaded. With neither
 * set, every component is at warn and a message is written exactly as the
 * engine wrote it before there were levels: no prefix, so the warnings
 * users (and tests) know keep their text. Once either is set, each line
 * carries the time (UTC, ms), the step, the component and the level.
 *
 * A line is formatted into one buffer and written with one write(2): lines
 * from the loader's workers, the dump writer's threads and the training
 * thread never interleave within a line (O_APPEND files and pipes take a
 * write of a line whole). TE_LOG tests the level before any argument is
 * evaluated: a message that is off costs one untaken branch.
 */
#include "te_internal.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

unsigned char te_log_levels[TE_LOG_COMPONENTS] = {
    TE_LOG_WARN, TE_LOG_WARN, TE_LOG_WARN, TE_LOG_WARN, TE_LOG_WARN,
};

static const char *const component_names[] = {
    [TE_LOG_ENGINE] = "engine",
    [TE_LOG_GRAPH] = "engine.graph",
    [TE_LOG_DATA] = "engine.data",
    [TE_LOG_DUMP] = "dump",
    [TE_LOG_DEBUGGER] = "debugger",
};
_Static_assert(sizeof component_names / sizeof *component_names == TE_LOG_COMPONENTS,
               "a name for every te_log_component");

static const char *const level_names[] = {
    [TE_LOG_OFF] = "off", [TE_LOG_ERROR] = "error", [TE_LOG_WARN] = "warn",
    [TE_LOG_INFO] = "info", [TE_LOG_DEBUG] = "debug",
};
_Static_assert(sizeof level_names / sizeof *level_names == TE_LOG_DEBUG + 1, "a name for every te_log_level");

#define LEVELS_TEXT "off, error, warn, info or debug"
#define COMPONENTS_TEXT "engine, engine.graph, engine.data, dump or debugger"

/* Where lines go (2, or file_fd), and whether they carry the prefix. */
static atomic_int out_fd = 2;
static atomic_bool prefixed;
/* The log file's descriptor once one was opened: a later file replaces it
 * in place (dup3), so a thread writing a line as the file changes writes
 * to one file or the other, never to a closed descriptor. */
static int file_fd = -1;
/* A step was seen: te_step() says 0 before the first step as well. */
static atomic_bool stepped;

const char *te_log_component_name(te_log_component c)
{
    return (unsigned)c < TE_LOG_COMPONENTS ? component_names[c] : "?";
}

const char *te_log_level_name(te_log_level l) { return (unsigned)l <= TE_LOG_DEBUG ? level_names[l] : "?"; }

/* ---- the spec ------------------------------------------------------------ */

static int level_of(const char *s, size_t len)
{
    for (int l = TE_LOG_OFF; l <= TE_LOG_DEBUG; l++)
        if (strlen(level_names[l]) == len && strncasecmp(s, level_names[l], len) == 0)
            return l;
    return -1;
}

/* Does the spec's NAME select component c: its name, or a prefix of it at a dot? */
static bool selects(const char *name, size_t len, te_log_component c)
{
    const char *cn = component_names[c];
    return strncasecmp(cn, name, len) == 0 && (cn[len] == '\0' || cn[len] == '.');
}

/* "; did you mean 'X'?" for the nearest of names, or "": the first name
 * the token begins ("engine.gr"), else one that begins the token
 * ("warning"), else one two edits away at most. */
static const char *suggest(const char *s, size_t len, const char *const *names, int n, char *buf, size_t cap)
{
    const char *best = NULL;
    size_t best_d = 3;
    char low[64]; /* the names are lower case; the token's case does not count */
    if (len >= sizeof low)
        return "";
    for (size_t k = 0; k < len; k++)
        low[k] = (char)tolower((unsigned char)s[k]);
    low[len] = '\0';
    for (int i = 0; i < n; i++) {
        size_t ln = strlen(names[i]), d = (size_t)te_edit_distance(low, names[i]);
        if (len >= 3 && ln >= 3 && strncasecmp(s, names[i], len < ln ? len : ln) == 0)
            d = len < ln ? 0 : 1;
        if (d < best_d) {
            best_d = d;
            best = names[i];
        }
    }
    if (!best)
        return "";
    snprintf(buf, cap, "; did you mean '%s'?", best);
    return buf;
}

/* Parses spec into levels (all warn, then each token in order); false with
 * why written, naming the bad token, when a token is neither a level nor
 * NAME=LEVEL with a known level and a NAME that selects a component. */
static bool parse(const char *spec, unsigned char *levels, char *why, size_t n)
{
    for (int c = 0; c < TE_LOG_COMPONENTS; c++)
        levels[c] = TE_LOG_WARN;
    for (const char *p = spec; p && *p;) {
        size_t len = strcspn(p, ",");
        const char *tok = p, *end = p + len;
        p = *end ? end + 1 : end;
        while (tok < end && (*tok == ' ' || *tok == '\t'))
            tok++;
        while (end > tok && (end[-1] == ' ' || end[-1] == '\t'))
            end--;
        if (tok == end)
            continue; /* "warn," or ",,": nothing there */
        const int tlen = (int)(end - tok);
        const char *eq = memchr(tok, '=', (size_t)tlen);
        char hint[64];
        if (!eq) {
            int l = level_of(tok, (size_t)tlen);
            if (l < 0) {
                snprintf(why, n, "TDBG_LOG: '%.*s': expected a level (" LEVELS_TEXT ") or NAME=LEVEL%s", tlen,
                         tok, suggest(tok, (size_t)tlen, level_names, TE_LOG_DEBUG + 1, hint, sizeof hint));
                return false;
            }
            for (int c = 0; c < TE_LOG_COMPONENTS; c++)
                levels[c] = (unsigned char)l;
            continue;
        }
        const char *val = eq + 1;
        size_t nlen = (size_t)(eq - tok), vlen = (size_t)(end - val);
        while (nlen && (tok[nlen - 1] == ' ' || tok[nlen - 1] == '\t'))
            nlen--;
        while (vlen && (*val == ' ' || *val == '\t'))
            val++, vlen--;
        bool any = false;
        for (int c = 0; c < TE_LOG_COMPONENTS && nlen; c++)
            any = any || selects(tok, nlen, (te_log_component)c);
        if (!any) {
            snprintf(why, n, "TDBG_LOG: '%.*s': no component '%.*s' (expected " COMPONENTS_TEXT ")%s", tlen, tok,
                     (int)nlen, tok, suggest(tok, nlen, component_names, TE_LOG_COMPONENTS, hint, sizeof hint));
            return false;
        }
        int l = level_of(val, vlen);
        if (l < 0) {
            snprintf(why, n, "TDBG_LOG: '%.*s': no level '%.*s' (expected " LEVELS_TEXT ")%s", tlen, tok, (int)vlen,
                     val, suggest(val, vlen, level_names, TE_LOG_DEBUG + 1, hint, sizeof hint));
            return false;
        }
        for (int c = 0; c < TE_LOG_COMPONENTS; c++)
            if (selects(tok, nlen, (te_log_component)c))
                levels[c] = (unsigned char)l;
    }
    return true;
}

/* ---- configuration --------------------------------------------------------- */

te_status te_log_configure(const char *spec, const char *file)
{
    unsigned char levels[TE_LOG_COMPONENTS];
    char why[512];
    if (!parse(spec, levels, why, sizeof why)) {
        te_set_error(TE_ERR_ARG, "%s", why);
        return TE_ERR_ARG;
    }
    const bool to_file = file && *file;
    if (to_file) {
        int fd = open(file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        if (fd < 0) {
            te_set_error(TE_ERR_IO, "TDBG_LOG_FILE: cannot open %s: %s", file, strerror(errno));
            return TE_ERR_IO;
        }
        if (file_fd < 0) {
            file_fd = fd;
        } else {
            dup3(fd, file_fd, O_CLOEXEC);
            close(fd);
        }
        atomic_store(&out_fd, file_fd);
    } else {
        atomic_store(&out_fd, 2);
        if (file_fd >= 0)
            dup3(2, file_fd, O_CLOEXEC); /* the file closes; a line under way goes to stderr */
    }
    memcpy(te_log_levels, levels, sizeof levels);
    atomic_store(&prefixed, (spec && *spec) || to_file);
    return TE_OK;
}

/* At load: TDBG_LOG and TDBG_LOG_FILE. A bad spec or a file that cannot be
 * opened is said in one line on stderr, and the rest applies: the run goes
 * on with the default levels, or with its logs on stderr. */
__attribute__((constructor)) static void log_from_env(void)
{
    const char *spec = getenv("TDBG_LOG"), *file = getenv("TDBG_LOG_FILE");
    if ((!spec || !*spec) && (!file || !*file))
        return;
    te_status st = te_log_configure(spec, file);
    if (st == TE_ERR_ARG) { /* "...; did you mean 'engine'?" or "... or debug)" */
        const char *why = te_error();
        fprintf(stderr, "tdbg: %s%s Logging stays at the defaults.\n", why, why[strlen(why) - 1] == '?' ? "" : ".");
        spec = NULL;
        st = te_log_configure(NULL, file);
    }
    if (st == TE_ERR_IO) {
        fprintf(stderr, "tdbg: %s. Logging goes to stderr.\n", te_error());
        te_log_configure(spec, NULL);
    }
    te_error_clear();
}

/* ---- lines ------------------------------------------------------------------- */

/* "2026-12-03T03:31:02.123Z step=12 engine.graph debug: " into buf. */
static size_t prefix(char *buf, size_t n, te_log_component c, te_log_level l)
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t at = strftime(buf, n, "%Y-%m-%dT%H:%M:%S", &tm);
    int64_t step = te_step();
    bool in = te_in_step();
    if (in || step > 0)
        atomic_store(&stepped, true);
    char step_text[24] = "-";
    if (in || step > 0 || atomic_load(&stepped))
        snprintf(step_text, sizeof step_text, "%lld", (long long)step);
    at += (size_t)snprintf(buf + at, n - at, ".%03ldZ step=%s %s %s: ", ts.tv_nsec / 1000000, step_text,
                           te_log_component_name(c), te_log_level_name(l));
    return at < n ? at : n - 1;
}

/* The words the engine's messages began with before they had a level:
 * with the prefix, the level says as much. */
static const char *const legacy[] = { "tdbg: ", "warning: ", "error: " };

static void write_all(int fd, const char *p, size_t len)
{
    while (len) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return; /* nowhere to say it */
        p += w;
        len -= (size_t)w;
    }
}

void te_log_write(te_log_component c, te_log_level l, const char *fmt, ...)
{
    char small[2048], *buf = small;
    const bool pre = atomic_load(&prefixed);
    size_t at = pre ? prefix(small, sizeof small, c, l) : 0;
    va_list ap, again;
    va_start(ap, fmt);
    va_copy(again, ap);
    int len = vsnprintf(small + at, sizeof small - at - 1, fmt, ap);
    va_end(ap);
    if (len < 0)
        len = 0;
    if ((size_t)len >= sizeof small - at - 1) { /* a long one: on the heap, else cut */
        char *big = malloc(at + (size_t)len + 2);
        if (big) {
            memcpy(big, small, at);
            vsnprintf(big + at, (size_t)len + 1, fmt, again);
            buf = big;
        } else {
            len = (int)(sizeof small - at - 2);
        }
    }
    va_end(again);
    char *msg = buf + at;
    size_t mlen = (size_t)len;
    if (mlen && msg[mlen - 1] == '\n') /* the line's end is ours */
        mlen--;
    if (pre)
        for (size_t i = 0; i < sizeof legacy / sizeof *legacy; i++) {
            size_t ll = strlen(legacy[i]);
            if (mlen >= ll && strncmp(msg, legacy[i], ll) == 0) {
                memmove(msg, msg + ll, mlen - ll);
                mlen -= ll;
                break;
            }
        }
    msg[mlen] = '\n';
    const int fd = atomic_load(&out_fd);
    if (fd == 2)
        fflush(stderr); /* after what the program put in stderr's buffer, if it has one */
    write_all(fd, buf, at + mlen + 1);
    if (buf != small)
        free(buf);
}
