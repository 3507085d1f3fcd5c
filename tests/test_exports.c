/* test_exports.c — what the shared libraries export, read from the built
 * files with `nm -D --defined-only`: libtdbg-engine.so exactly the functions
 * and variables te.h declares, each marked TE_API (the rest is compiled
 * hidden), and the debugger module only its entry points (start, attach). */
#include "suites.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef TDBG_NM
#define TDBG_NM "nm"
#endif

#define ENGINE_SO TDBG_BUILDDIR "/engine/.libs/libtdbg-engine.so"
#define PLUGIN_SO TDBG_BUILDDIR "/debugger/.libs/libtdbg-debugger.so"

/* A growing set of names (small: a linear search is enough). */
typedef struct names {
    int n, cap;
    char **v;
} names;

static bool names_has(const names *s, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->v[i], name) == 0)
            return true;
    return false;
}

static void names_add(names *s, const char *name, size_t len)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 64;
        s->v = realloc(s->v, (size_t)s->cap * sizeof *s->v);
        ck_assert(s->v != NULL);
    }
    s->v[s->n] = strndup(name, len);
    ck_assert(s->v[s->n] != NULL);
    s->n++;
}

static void names_free(names *s)
{
    for (int i = 0; i < s->n; i++)
        free(s->v[i]);
    free(s->v);
    *s = (names){ 0 };
}

/* The names of a that b lacks, as " x y z" into buf (returned); "" if none. */
static char *names_minus(const names *a, const names *b, char *buf, size_t n)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < a->n && len < n; i++)
        if (!names_has(b, a->v[i]))
            len += (size_t)snprintf(buf + len, n - len, " %s", a->v[i]);
    return buf;
}

/* ---- what a library exports --------------------------------------------- */

/* The dynamic symbols lib defines, less the linker's own (_init, _fini and
 * the section bounds some linkers add). */
static void exported(const char *lib, names *s)
{
    static const char *const linker[] = { "_init", "_fini", "_edata", "_end", "__bss_start" };
    char cmd[1024], line[512];
    snprintf(cmd, sizeof cmd, "%s -D --defined-only '%s' 2>&1", TDBG_NM, lib);
    FILE *p = popen(cmd, "r");
    ck_assert_msg(p != NULL, "popen %s failed", cmd);
    char out[2048] = "";
    while (fgets(line, sizeof line, p)) {
        if (strlen(out) + strlen(line) < sizeof out)
            strcat(out, line);
        char type, name[256];
        /* "0000000000012340 T te_init"; a line of another shape is an error
         * message, which the status below reports. */
        if (sscanf(line, "%*s %c %255s", &type, name) != 2)
            continue;
        /* AddressSanitizer adds an __odr_asan.NAME beside each exported variable */
        bool ours = strncmp(name, "__odr_asan", 10) != 0;
        for (size_t i = 0; i < sizeof linker / sizeof *linker; i++)
            ours = ours && strcmp(name, linker[i]) != 0;
        if (ours)
            names_add(s, name, strlen(name));
    }
    int st = pclose(p);
    ck_assert_msg(st == 0 && s->n > 0, "`%s` failed (status %d):\n%s", cmd, st, out);
}

/* ---- what te.h declares --------------------------------------------------- */

/* The identifier that ends just before end (after spaces), or NULL. */
static const char *ident_before(const char *start, const char *end, size_t *len)
{
    while (end > start && isspace((unsigned char)end[-1]))
        end--;
    const char *b = end;
    while (b > start && (isalnum((unsigned char)b[-1]) || b[-1] == '_'))
        b--;
    *len = (size_t)(end - b);
    return *len ? b : NULL;
}

/* One top-level statement: a function or variable declaration adds its name
 * to decl, and to unmarked too when it does not start with TE_API. Types,
 * structs and enums declare nothing a library exports. */
static void statement(const char *st, names *decl, names *unmarked)
{
    while (isspace((unsigned char)*st))
        st++;
    if (!*st || strncmp(st, "typedef", 7) == 0 || strchr(st, '{'))
        return;
    const char *paren = strchr(st, '(');
    if (!paren && (strncmp(st, "struct", 6) == 0 || strncmp(st, "enum", 4) == 0 ||
                   strncmp(st, "union", 5) == 0))
        return; /* a forward declaration */
    const char *end = paren ? paren : strchr(st, '[') ? strchr(st, '[') : st + strlen(st);
    size_t len;
    const char *name = ident_before(st, end, &len);
    ck_assert_msg(name != NULL, "te.h: no name in the declaration \"%s\"", st);
    names_add(decl, name, len);
    bool marked = strncmp(st, "TE_API", 6) == 0 && isspace((unsigned char)st[6]);
    if (!marked)
        names_add(unmarked, name, len);
}

/* The declarations of a header's text. Comments and preprocessor lines
 * (continued ones too) are dropped, and with them the `#ifdef __cplusplus`
 * blocks that open and close extern "C"; the rest is cut into statements
 * at the semicolons outside braces and parentheses. */
static void declared(const char *text, names *decl, names *unmarked)
{
    size_t cap = strlen(text) + 1, len = 0;
    char *st = malloc(cap);
    ck_assert(st != NULL);
    int depth = 0;
    bool line_start = true, in_cplusplus = false;
    for (const char *p = text; *p;) {
        if (p[0] == '/' && p[1] == '*') {
            const char *e = strstr(p + 2, "*/");
            p = e ? e + 2 : p + strlen(p);
            continue;
        }
        if (p[0] == '/' && p[1] == '/') {
            p += strcspn(p, "\n");
            continue;
        }
        if (line_start && *p == '#') {
            const char *e = p;
            while (*(e += strcspn(e, "\n")) && e[-1] == '\\')
                e++;
            if (strncmp(p, "#ifdef __cplusplus", 18) == 0)
                in_cplusplus = true;
            else if (strncmp(p, "#endif", 6) == 0)
                in_cplusplus = false;
            p = e;
            continue;
        }
        line_start = *p == '\n' || (line_start && isspace((unsigned char)*p));
        if (in_cplusplus) {
            p++;
            continue;
        }
        depth += (*p == '{' || *p == '(') - (*p == '}' || *p == ')');
        if (*p == ';' && depth == 0) {
            st[len] = '\0';
            statement(st, decl, unmarked);
            len = 0;
        } else {
            st[len++] = *p;
        }
        p++;
    }
    free(st);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    ck_assert(s != NULL);
    ck_assert(fread(s, 1, (size_t)n, f) == (size_t)n);
    s[n] = '\0';
    fclose(f);
    return s;
}

/* ---- tests ------------------------------------------------------------- */

/* The parser itself: it finds each kind of declaration te.h holds and no
 * name in comments, macros, types or the extern "C" lines, and it notices
 * a declaration without TE_API. */
START_TEST(test_parse_declarations)
{
    const char *text = "#ifdef __cplusplus\nextern \"C\" {\n#endif\n"
                       "#define two(x) \\\n  int not_a_decl(x);\n"
                       "/* int in_comment(void); */\n"
                       "typedef struct te_thing { int a; void (*cb)(int); } te_thing;\n"
                       "typedef int (*te_fn)(void *ctx);\n"
                       "enum { TE_X = 1u << 0 };\n"
                       "struct te_fwd;\n"
                       "TE_API te_thing *te_make(int n,\n"
                       "                         int m);   // two lines\n"
                       "TE_API extern int te_count;\n"
                       "TE_API extern char te_names[4][8];\n"
                       "const char *te_forgot(void);\n"
                       "#ifdef __cplusplus\n}\n#endif\n";
    names decl = { 0 }, unmarked = { 0 };
    declared(text, &decl, &unmarked);
    char got[512] = "";
    for (int i = 0; i < decl.n; i++)
        snprintf(got + strlen(got), sizeof got - strlen(got), " %s", decl.v[i]);
    ck_assert_msg(strcmp(got, " te_make te_count te_names te_forgot") == 0, "declared:%s", got);
    ck_assert_msg(unmarked.n == 1 && strcmp(unmarked.v[0], "te_forgot") == 0,
                  "unmarked: %d names, the first %s", unmarked.n, unmarked.n ? unmarked.v[0] : "-");
    names_free(&decl);
    names_free(&unmarked);
}
END_TEST

/* libtdbg-engine.so exports what te.h declares, nothing more (no cpu_*,
 * tg_*, te_node_*: te_internal.h stays inside) and nothing less. */
START_TEST(test_engine_exports_te_h)
{
    char *te_h = slurp(TDBG_SRCDIR "/engine/te.h"), *log_h = slurp(TDBG_SRCDIR "/engine/te_log.h"),
         *dist_h = slurp(TDBG_SRCDIR "/engine/te_dist.h");
    names decl = { 0 }, unmarked = { 0 }, exp = { 0 };
    declared(te_h, &decl, &unmarked);
    declared(log_h, &decl, &unmarked); /* te.h includes them: the same API */
    declared(dist_h, &decl, &unmarked);
    free(te_h);
    free(log_h);
    free(dist_h);
    /* The parser saw the header: its first, a two-line and its last declaration. */
    ck_assert_msg(names_has(&decl, "te_status_str") && names_has(&decl, "te_batchnorm_at") &&
                      names_has(&decl, "te_loader_free"),
                  "te.h parsed into %d declarations, some expected ones missing", decl.n);
    exported(ENGINE_SO, &exp);
    static char extra[8192], missing[8192], bare[8192];
    names_minus(&exp, &decl, extra, sizeof extra);
    names_minus(&decl, &exp, missing, sizeof missing);
    names_minus(&unmarked, &(names){ 0 }, bare, sizeof bare);
    ck_assert_msg(!extra[0] && !missing[0] && !bare[0],
                  "libtdbg-engine.so exports what te.h does not declare:%s\n"
                  "te.h declares what libtdbg-engine.so does not export:%s\n"
                  "te.h declares without TE_API:%s",
                  extra[0] ? extra : " (none)", missing[0] ? missing : " (none)", bare[0] ? bare : " (none)");
    names_free(&decl);
    names_free(&unmarked);
    names_free(&exp);
}
END_TEST

/* The debugger module, loaded RTLD_LOCAL into the training program, exports
 * its entry points alone (start; attach, for a listening run): no other
 * dbg_*, no dump_*, tui_*. */
START_TEST(test_plugin_exports_entry_point)
{
    names exp = { 0 };
    exported(PLUGIN_SO, &exp);
    static char extra[8192];
    names_minus(&exp, &(names){ .n = 2, .v = (char *[]){ "dbg_plugin_start", "dbg_plugin_attach" } }, extra,
                sizeof extra);
    ck_assert_msg(!extra[0], "libtdbg-debugger.so exports more than dbg_plugin_start and dbg_plugin_attach:%s", extra);
    ck_assert_msg(names_has(&exp, "dbg_plugin_start"), "libtdbg-debugger.so does not export dbg_plugin_start");
    ck_assert_msg(names_has(&exp, "dbg_plugin_attach"), "libtdbg-debugger.so does not export dbg_plugin_attach");
    names_free(&exp);
}
END_TEST

Suite *suite_exports(void)
{
    Suite *s = suite_create("exports");
    TCase *tc = tcase_create("symbols");
    tcase_add_test(tc, test_parse_declarations);
    tcase_add_test(tc, test_engine_exports_te_h);
    tcase_add_test(tc, test_plugin_exports_entry_point);
    suite_add_tcase(s, tc);
    return s;
}
