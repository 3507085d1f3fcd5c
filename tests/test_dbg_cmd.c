/*
 * test_dbg_cmd.c — the command layer without a running program: lookup
 * (names, aliases, unambiguous prefixes, typos), and the breakpoint
 * commands' parsing of good and malformed input, read back from the
 * session's breakpoint table and from what the commands print; the needs
 * commands declare, checked once; completion by each command's argument
 * kinds; groups and settings a front end adds. And the session in this
 * process: the stop as data (dbg_stop) that a front end is shown, beside
 * the `stopped:` line printed from it; the front-end registry.
 */
#include "cmd.h"
#include "session.h"
#include "suites.h"
#include "testutil.h"
#include "tsession.h"
#include "tui_internal.h"

#include <readline/readline.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void said(const char *want)
{
    ck_assert_msg(strstr(ts_captured, want) != NULL, "no '%s' in:\n%s", want, ts_captured);
}

static void setup(void)
{
    tu_setup();
    for (int i = 0; i < dbg.n_breaks; i++)
        dbg_cond_free(dbg.breaks[i].cond);
    memset(&dbg, 0, sizeof dbg);
    dbg.next_id = 1;
    dbg.step = -1;
}

static void teardown(void)
{
    for (int i = 0; i < dbg.n_breaks; i++)
        dbg_cond_free(dbg.breaks[i].cond);
    dbg.n_breaks = 0;
    tu_teardown();
}

START_TEST(test_lookup)
{
    ck_assert_str_eq(dbg_cmd_lookup("break")->name, "break");
    ck_assert_str_eq(dbg_cmd_lookup("b")->name, "break");      /* alias */
    ck_assert_str_eq(dbg_cmd_lookup("c")->name, "continue");   /* alias beats prefix */
    ck_assert_str_eq(dbg_cmd_lookup("tb")->name, "tbreak");    /* unique prefix */
    ck_assert_str_eq(dbg_cmd_lookup("dis")->name, "disable");
    ck_assert_str_eq(dbg_cmd_lookup("ign")->name, "ignore");
    FILE *saved = stdout, *f = fmemopen(ts_captured, sizeof ts_captured, "w");
    stdout = f;
    const dbg_cmd *amb = dbg_cmd_lookup("con");
    const dbg_cmd *typo = dbg_cmd_lookup("contniue");
    const dbg_cmd *none = dbg_cmd_lookup("xyzzy");
    fflush(f);
    stdout = saved;
    fclose(f);
    ck_assert(amb == NULL && typo == NULL && none == NULL);
    said("error: 'con' is ambiguous: continue, condition");
    said("error: unknown command 'contniue' (did you mean continue?)");
    said("error: unknown command 'xyzzy'; 'help' lists them");
}
END_TEST

START_TEST(test_break_parsing)
{
    ck_assert(!ts_exec("break nan"));
    ck_assert(!ts_exec("b   fc*/linear   if  abs_max > 1e4 and phase == forward"));
    ck_assert(!ts_exec("tbreak step 12"));
    ck_assert(!ts_exec("break type:MatMul if inputs.has_inf"));
    ck_assert(!ts_exec("break diff/if_gate"));  /* "if" inside a name is not the keyword */
    ck_assert_int_eq(dbg.n_breaks, 5);
    ck_assert_int_eq(dbg.breaks[0].kind, BK_NAN);
    ck_assert_int_eq(dbg.breaks[1].kind, BK_OP);
    ck_assert_str_eq(dbg.breaks[1].what, "fc*/linear");
    ck_assert_str_eq(dbg_cond_text(dbg.breaks[1].cond), "outputs.abs_max > 10000 and phase == forward");
    ck_assert_int_eq(dbg.breaks[2].kind, BK_STEP);
    ck_assert(dbg.breaks[2].temporary && dbg.breaks[2].step == 12);
    ck_assert_int_eq(dbg.breaks[3].kind, BK_TYPE);
    ck_assert_str_eq(dbg.breaks[3].what, "MatMul");
    ck_assert_str_eq(dbg.breaks[4].what, "diff/if_gate");
    ck_assert(dbg.breaks[4].cond == NULL);
    ck_assert(dbg.observing); /* graph mode is asked to keep every op's tensors */

    ts_exec("info breakpoints");
    said("2    op         keep  y    0      fc*/linear if outputs.abs_max > 10000 and phase == forward");
    said("3    step       del   y    0      step 12");
}
END_TEST

START_TEST(test_break_errors)
{
    static const struct {
        const char *line, *want;
    } cases[] = {
        { "break", "error: break: say where: OP_GLOB, type:TYPE, step N, nan, inf, nonfinite, overflow, underflow, skip or data" },
        { "break step x", "error: break step N: expected a whole number >= 0, got 'x'" },
        { "break step -3", "error: break step N: expected a whole number >= 0, got '-3'" },
        { "break fc1 if", "error: condition: nothing after 'if'" },
        { "break nan if abs_mx > 3", "did you mean abs_max?" },
        { "break nan if max >", "error: condition: column" },
        { "break step 3 if has_nan", "error: break step N takes no condition" },
        { "break fc1 linear", "error: break: 'fc1 linear' is not an op name" },
        { "condition 4 has_nan", "error: no breakpoint 4" },
        { "ignore x 2", "error: ignore N: expected a whole number >= 1, got 'x'" },
        { "delete x", "error: breakpoint number: expected a whole number >= 1, got 'x'" },
        { "until 5", "error: until: expected 'until step N', got '5'" },
        { "continue 0", "error: continue N: expected a whole number >= 1, got '0'" },
        { "info bogus", "error: info: expected breakpoints, ops, op [NAME], step, batch, dump, amp, profile, memory, watch or record" },
        { "print fc1/linear:out0[0", "error: print: column 18: " },
        { "set x", "error: set: expected TENSOR[INDEX] = VALUE" },
        { "set param:w[0] = abc", "error: set: 'abc' is not a number (nan and inf are)" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ck_assert_msg(!ts_exec(cases[i].line), "'%s' resumed training", cases[i].line);
        ck_assert_msg(strstr(ts_captured, cases[i].want), "'%s':\n  want %s\n  got  %s", cases[i].line,
                      cases[i].want, ts_captured);
    }
    ck_assert_int_eq(dbg.n_breaks, 0); /* nothing half-made */
}
END_TEST

/* `info memory`: the allocator's bytes, as te_mem_stats_get has them, a
 * live tensor's among them. */
static void memory_said(size_t *current, size_t *peak)
{
    ck_assert(!ts_exec("info memory"));
    const char *at = strstr(ts_captured, "memory: current ");
    unsigned long long c = 0, p = 0;
    ck_assert_msg(at && sscanf(at, "memory: current %llu bytes (%*f MiB), peak %llu bytes", &c, &p) == 2,
                  "got:\n%s", ts_captured);
    *current = (size_t)c;
    *peak = (size_t)p;
}

START_TEST(test_info_memory)
{
    size_t before, peak0, with, peak1, after, peak2;
    memory_said(&before, &peak0);
    te_tensor *t = te_tensor_persistent(TE_F32, te_shape(1000));
    ck_assert_ptr_nonnull(t);
    memory_said(&with, &peak1);
    ck_assert_msg(with >= before + 4000, "current %zu with a 4000-byte tensor, %zu without", with, before);
    ck_assert_uint_eq(with, te_mem_stats_get().current);
    ck_assert_msg(peak1 >= with && peak1 >= peak0, "peak %zu, current %zu, peak before %zu", peak1, with, peak0);
    said("requested by tensors: current ");
    said("allocations ");
    te_tensor_free(t);
    memory_said(&after, &peak2);
    ck_assert_uint_eq(after, before);
    ck_assert_uint_eq(peak2, peak1); /* the peak stays */
}
END_TEST

/* `info op`: a tensor off the CPU says where it lives; one on it reads as
 * it always has. */
START_TEST(test_info_op_device)
{
    static dbg_op ops[1];
    dbg.ops = ops;
    dbg.n_ops = 1;
    dbg_op *o = &ops[0];
    snprintf(o->name, sizeof o->name, "fc1/linear");
    o->type = "Linear";
    o->loc = (te_loc){ .file = "model.c", .line = 7 };
    o->n_in = 1;
    o->n_out = 1;
    snprintf(o->in_name[0], TE_NAME_MAX, "input:x");
    snprintf(o->out_name[0], TE_NAME_MAX, "fc1/linear:out0");
    o->out_dev[0] = TE_DEV_CUDA;
    ck_assert(!ts_exec("info op fc1/linear"));
    said("  in0  input:x  from ");
    said("  out0 fc1/linear:out0 on cuda  to ");
    o->out_dev[0] = TE_DEV_CPU;
    ck_assert(!ts_exec("info op fc1/linear"));
    said("  out0 fc1/linear:out0  to ");
    ck_assert_str_eq(dbg_on_device(TE_DEV_CPU), "");
    ck_assert_str_eq(dbg_on_device(TE_DEV_CUDA), " on cuda");
    dbg.ops = NULL;
    dbg.n_ops = 0;
}
END_TEST

START_TEST(test_manage_breaks)
{
    ts_exec("break nan");
    ts_exec("break fc1/linear");
    ts_exec("break step 3");
    ts_exec("disable 1 3");
    ck_assert(!dbg.breaks[0].enabled && dbg.breaks[1].enabled && !dbg.breaks[2].enabled);
    ts_exec("enable");
    ck_assert(dbg.breaks[0].enabled && dbg.breaks[2].enabled);
    ts_exec("ignore 2 5");
    said("Will ignore the next 5 hits of breakpoint 2.");
    ck_assert_int_eq(dbg.breaks[1].ignore, 5);
    ts_exec("condition 2 grads.l2norm > 10");
    ck_assert_str_eq(dbg_cond_text(dbg.breaks[1].cond), "grads.l2norm > 10");
    ts_exec("condition 2");
    ck_assert(dbg.breaks[1].cond == NULL);
    said("Breakpoint 2 now unconditional.");
    ts_exec("delete 2");
    ck_assert_int_eq(dbg.n_breaks, 2);
    ck_assert_int_eq(dbg.breaks[1].id, 3);
    ts_exec("delete");
    ck_assert_int_eq(dbg.n_breaks, 0);
    ck_assert(!dbg.observing);
    ts_exec("break nan");
    ck_assert_int_eq(dbg.breaks[0].id, 4); /* numbers are never reused */
}
END_TEST

START_TEST(test_running_commands)
{
    ck_assert(ts_exec("run"));
    ck_assert_int_eq(dbg.mode, RUN_GO);
    ck_assert(!ts_exec("run"));
    said("error: run: training is already running (step -1); 'continue' goes on");
    ck_assert(ts_exec("s"));
    ck_assert_int_eq(dbg.mode, RUN_STEP);
    ck_assert(ts_exec("next"));
    ck_assert_int_eq(dbg.mode, RUN_NEXT);
    ck_assert(ts_exec("until step 9"));
    ck_assert(dbg.mode == RUN_UNTIL && dbg.until_step == 9);
    ck_assert(!ts_exec("finish")); /* no step is running */
    said("error: finish: no step is running");
    ck_assert(!ts_exec("   # a comment"));
    ck_assert(!ts_exec(""));
    ck_assert(!ts_exec("help b"));
    said("usage: break WHAT [if COND] (alias b)");
    ck_assert(!ts_exec("help"));
    said("looking around:");
    said("until step N");
}
END_TEST

/* Tab completion of the last word of line as the CLI and the TUI ask for
 * it: the matches (readline's list without its common-prefix head). */
static int complete(const char *line, char **got, int max)
{
    char buf[128];
    snprintf(buf, sizeof buf, "%s", line);
    const char *space = strrchr(buf, ' ');
    int start = space ? (int)(space - buf) + 1 : 0;
    char *saved = rl_line_buffer;
    rl_line_buffer = buf;
    char **m = dbg_complete(buf + start, start, (int)strlen(buf));
    rl_line_buffer = saved;
    int n = 0;
    for (int i = m && m[1] ? 1 : 0; m && m[i]; i++)
        if (n < max)
            got[n++] = m[i];
        else
            free(m[i]);
    if (m && m[1])
        free(m[0]);
    free(m);
    return n;
}

/* complete(line) gives exactly the words of want, a space-separated list
 * in the order offered ("" for none). */
static void completes(const char *line, const char *want)
{
    char *got[64], list[1024] = "";
    int n = complete(line, got, 64);
    for (int i = 0; i < n; i++) {
        size_t used = strlen(list);
        snprintf(list + used, sizeof list - used, "%s%s", i ? " " : "", got[i]);
        free(got[i]);
    }
    ck_assert_msg(strcmp(list, want) == 0, "'%s' completes to\n  '%s', want\n  '%s'", line, list, want);
}

static dbg_op now[2], last[4];

/* Stopped two ops into a step of fc1/linear, fc1/relu, grad/fc1/linear,
 * update/fc1.weight. */
static void stopped_in_a_step(void)
{
    static const char *const names[4] = { "fc1/linear", "fc1/relu", "grad/fc1/linear", "update/fc1.weight" };
    static const char *const types[4] = { "Linear", "Relu", "LinearGrad", "SGD" };
    for (int i = 0; i < 4; i++) {
        snprintf(last[i].name, sizeof last[i].name, "%s", names[i]);
        snprintf(last[i].out_name[0], sizeof last[i].out_name[0], "%s:out0", names[i]);
        last[i].type = types[i];
        last[i].n_out = 1;
        if (i < 2)
            now[i] = last[i];
    }
    dbg.ops = now;
    dbg.n_ops = 2;
    dbg.last_ops = last;
    dbg.n_last_ops = 4;
}

/* This step's ops and the rest of the last step's (the backward and update
 * ops still to come) complete, each once: op names where the command takes
 * an op (break), tensors where it takes a tensor (print). */
START_TEST(test_complete_op_names)
{
    stopped_in_a_step();
    completes("break upd", "update/fc1.weight");
    completes("break fc1/l", "fc1/linear"); /* in both steps' lists, offered once */
    completes("print upd", "update/fc1.weight:out0");
    completes("print fc1/l", "fc1/linear:out0");
    dbg.ops = dbg.last_ops = NULL;
    dbg.n_ops = dbg.n_last_ops = 0;
}
END_TEST

/* Each command's words complete from what its entry says they name. */
START_TEST(test_complete_by_kind)
{
    stopped_in_a_step();
    te_param_new("fc1.weight", TE_F32, 2, (int64_t[]){ 4, 3 });
    ts_exec("break nan");
    ts_exec("break step 4");
    completes("he", "help");                              /* a command name */
    completes("help fi", "finish");                       /* help: command names */
    completes("break n", "nan nonfinite");                /* keywords, no op starts with n */
    completes("tbreak type:L", "type:Linear type:LinearGrad");
    completes("break fc1/relu if has_", "has_nan has_inf"); /* after WHAT: a condition */
    completes("b fc1/relu if abs_max > 3 an", "and");
    completes("info o", "ops op");
    completes("info op grad", "grad/fc1/linear");         /* an op, not its tensors */
    completes("print param:", "param:fc1.weight");
    completes("stats grad:", "grad:fc1.weight");
    completes("hist fc1/r", "fc1/relu:out0");
    completes("delete ", "1 2");                          /* breakpoint numbers, every word */
    completes("disable 1 ", "1 2");
    completes("condition 2 has_n", "has_nan");
    completes("break nan if not o", "or outputs. op=");
    completes("break nan if not op= fc1/r", "fc1/relu");       /* after op=: op names */
    completes("condition 2 has_inf and type!= Li", "Linear LinearGrad"); /* after type=: types */
    completes("ignore ", "1 2");
    completes("ignore 1 ", "");                           /* COUNT: a number */
    completes("until ", "step");
    completes("dump o", "off");
    completes("dump now fc1/l", "fc1/linear:out0");
    completes("run ", "");                                /* takes nothing */
    completes("finish fc", "");
    completes("xyzzy fc", "");                            /* no such command: nothing */
    dbg.ops = dbg.last_ops = NULL;
    dbg.n_ops = dbg.n_last_ops = 0;
}
END_TEST

/* finish needs a stop in a step: refused before `run` and between steps,
 * with the message every command with that need gives; run needs training
 * not started. */
START_TEST(test_needs)
{
    ck_assert(!ts_exec("finish"));
    said("error: finish: training has not started; 'run' starts it");
    ck_assert(!ts_exec("help finish"));
    said("Only while training is stopped in a step.");
    ck_assert(!ts_exec("help run"));
    said("Only before training starts.");
    ck_assert(ts_exec("run"));
    ck_assert(!ts_exec("finish"));
    said("error: finish: no step is running; 'next' stops at the start of the next one");
    dbg.in_step = true;
    dbg.step = 3;
    dbg.phase = TE_PHASE_BACKWARD;
    ck_assert(ts_exec("finish"));
    ck_assert(dbg.mode == RUN_FINISH && dbg.finish_step == 3 && dbg.finish_phase == TE_PHASE_BACKWARD);
    ck_assert(!ts_exec("r"));
    said("error: run: training is already running (step 3); 'continue' goes on");
}
END_TEST

/* No two commands share a name or an alias, the TUI's included, and every
 * entry has its usage, help and function. */
START_TEST(test_names_unique)
{
    char why[256];
    ck_assert_msg(tui_cmds_register(why, sizeof why), "the TUI's commands: %s", why);
    int n_groups;
    const dbg_cmd_group *g = dbg_cmd_groups(&n_groups);
    ck_assert_int_eq(n_groups, 9); /* 8 built in (data the eighth), the TUI's */
    const char *words[256];
    int n = 0, n_cmds = 0;
    for (int i = 0; i < n_groups; i++)
        for (const dbg_cmd *c = g[i].cmds; c->name; c++) {
            ck_assert_msg(c->usage && c->help && c->run, "%s lacks its usage, help or function", c->name);
            ck_assert_msg(strncmp(c->usage, c->name, strlen(c->name)) == 0, "%s's usage: %s", c->name, c->usage);
            n_cmds++;
            for (int k = 0; k < 2; k++) {
                const char *w = k ? c->alias : c->name;
                for (int j = 0; w && j < n; j++)
                    ck_assert_msg(strcmp(words[j], w) != 0, "'%s' names two commands", w);
                if (w && n < 256)
                    words[n++] = w;
            }
        }
    ck_assert_int_ge(n_cmds, 29); /* 22 built in, 7 the TUI's, as of issue 13 */
    int n_names = 0;
    for (const char *const *p = dbg_cmd_names(); *p; p++)
        n_names++;
    ck_assert_int_eq(n_names, n_cmds);
    /* the settings came with the group */
    ck_assert(!ts_exec("set highlight x"));
    said("error: set highlight: expected a positive number or off, got 'x'");
    completes("set mou", "mouse");
    /* a second time: every name clashes, and nothing is added */
    ck_assert(!tui_cmds_register(why, sizeof why));
    ck_assert_msg(strstr(why, "terminal UI: the command 'focus' (alias none) clashes with 'focus'"), "%s", why);
    dbg_cmd_groups(&n_groups);
    ck_assert_int_eq(n_groups, 9);
}
END_TEST

/* Many groups and settings: no cap, every name listed and found. */
#define MANY 40
static char many_names[MANY][4][16], many_settings[MANY][16];
static int many_set_calls;

static bool cmd_nothing(const char *args)
{
    (void)args;
    return false;
}

static bool set_count(const char *value)
{
    (void)value;
    many_set_calls++;
    return false;
}

START_TEST(test_many_groups)
{
    static dbg_cmd tables[MANY][4];
    static dbg_setting settings[MANY][2];
    static dbg_cmd_group groups[MANY];
    int before = 0;
    for (const char *const *p = dbg_cmd_names(); *p; p++)
        before++;
    char err[256];
    for (int g = 0; g < MANY; g++) {
        for (int k = 0; k < 3; k++) {
            snprintf(many_names[g][k], sizeof many_names[g][k], "zz%02dc%d", g, k);
            tables[g][k] = (dbg_cmd){ .name = many_names[g][k], .usage = many_names[g][k], .help = "h",
                                      .run = cmd_nothing };
        }
        snprintf(many_settings[g], sizeof many_settings[g], "zzset%02d", g);
        settings[g][0] = (dbg_setting){ many_settings[g], set_count };
        groups[g] = (dbg_cmd_group){ "many", tables[g], settings[g] };
        ck_assert_msg(dbg_cmd_add_group(&groups[g], err, sizeof err), "group %d: %s", g, err);
    }
    int n_names = 0;
    for (const char *const *p = dbg_cmd_names(); *p; p++)
        n_names++;
    ck_assert_int_eq(n_names, before + 3 * MANY); /* 120 more: past the old 127 */
    ck_assert_int_gt(n_names, 127);
    ck_assert_str_eq(dbg_cmd_lookup("zz39c2")->name, "zz39c2");
    ck_assert_str_eq(dbg_cmd_names()[n_names - 1], "zz39c2");
    ts_exec("set zzset39 on");
    ts_exec("set zzset00 on");
    ck_assert_int_eq(many_set_calls, 2);

    /* clashes: an alias on a name, a name on an alias, a setting; each refused whole */
    static const dbg_cmd alias_on_name[] = { { .name = "zznew", .alias = "zz00c1", .usage = "u", .help = "h",
                                               .run = cmd_nothing }, { .name = NULL } };
    static const dbg_cmd name_on_alias[] = { { .name = "zzok", .usage = "u", .help = "h", .run = cmd_nothing },
                                             { .name = "b", .usage = "u", .help = "h", .run = cmd_nothing },
                                             { .name = NULL } };
    static const dbg_cmd twice[] = { { .name = "zzt", .usage = "u", .help = "h", .run = cmd_nothing },
                                     { .name = "zzu", .alias = "zzt", .usage = "u", .help = "h", .run = cmd_nothing },
                                     { .name = NULL } };
    static const dbg_cmd no_run[] = { { .name = "zzr", .usage = "u", .help = "h" }, { .name = NULL } };
    static const dbg_setting old_setting[] = { { "zzset07", set_count }, { NULL, NULL } };
    static const dbg_cmd fine[] = { { .name = "zzfine", .usage = "u", .help = "h", .run = cmd_nothing },
                                    { .name = NULL } };
    static const struct {
        dbg_cmd_group g;
        const char *want;
    } bad[] = {
        { { "a", alias_on_name, NULL }, "a: the command 'zznew' (alias zz00c1) clashes with 'zz00c1' (alias none)" },
        { { "b", name_on_alias, NULL }, "b: the command 'b' (alias none) clashes with 'break' (alias b)" },
        { { "t", twice, NULL }, "t: the command 'zzu' (alias zzt) clashes with 'zzt' (alias none)" },
        { { "r", no_run, NULL }, "r: the command 'zzr' lacks its usage, help or function" },
        { { "s", fine, old_setting }, "s: the setting 'zzset07' exists already" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_msg(!dbg_cmd_add_group(&bad[i].g, err, sizeof err), "group %s was added", bad[i].g.title);
        ck_assert_msg(strcmp(err, bad[i].want) == 0, "got  %s\nwant %s", err, bad[i].want);
    }
    n_names = 0;
    for (const char *const *p = dbg_cmd_names(); *p; p++)
        n_names++;
    ck_assert_int_eq(n_names, before + 3 * MANY);
    ck_assert(dbg_cmd_find("zzok") == NULL && dbg_cmd_find("zzfine") == NULL);
}
END_TEST

/* ---- the stop as data, and front ends ---------------------------------------------- */

static dbg_stop shown;        /* what the test front end was shown, copied */
static char shown_cond[128];
static int n_shown, n_read;
static bool shown_live;       /* the pointers were live and agreed with the names */
static int hook = -1;
static char out[16384];
static FILE *out_f;

static void fe_show(const dbg_stop *s)
{
    n_shown++;
    shown = *s;
    shown.cond = NULL; /* the stop's own; its text is kept below */
    snprintf(shown_cond, sizeof shown_cond, "%s", s->cond ? dbg_cond_text(s->cond) : "");
    shown_live = s == dbg_last_stop() && s->active && s->rec && strcmp(s->rec->name, s->op) == 0 &&
                 (!s->tensor[0] || (s->t && strcmp(s->t->name, s->tensor) == 0));
}

/* What the test front end answers at a stop, line by line, then "continue". */
static const char *const *fe_lines;
static int fe_next;

static char *fe_read(const char *prompt)
{
    (void)prompt;
    n_read++;
    return strdup(fe_lines && fe_lines[fe_next] ? fe_lines[fe_next++] : "continue");
}

static const dbg_frontend fe_test = { .name = "test-stop", .read_line = fe_read, .show_stop = fe_show };

static void stop_setup(void)
{
    setup();
    dbg.ops = calloc(DBG_MAX_OPS, sizeof *dbg.ops);
    dbg.last_ops = calloc(DBG_MAX_OPS, sizeof *dbg.last_ops);
    dbg.trends = calloc(DBG_MAX_TRENDS, sizeof *dbg.trends);
    ck_assert(dbg.ops && dbg.last_ops && dbg.trends);
    dbg.interactive = true;
    dbg.started = true;
    dbg_frontend_active = &fe_test;
    hook = te_hook_add(&(te_hooks){ .step_begin = dbg_on_step_begin, .step_end = dbg_on_step_end,
                                    .phase_begin = dbg_on_phase, .op_end = dbg_on_op_end },
                       NULL);
    ck_assert(hook >= 0);
    memset(out, 0, sizeof out);
    out_f = fmemopen(out, sizeof out, "w");
    ck_assert(out_f != NULL);
    dbg_out_stream = out_f;
    n_shown = n_read = 0;
    fe_lines = NULL;
    fe_next = 0;
}

static void stop_teardown(void)
{
    te_hook_remove(hook);
    dbg_out_stream = NULL;
    fclose(out_f);
    dbg_frontend_active = NULL;
    free(dbg.ops);
    free(dbg.last_ops);
    free(dbg.trends);
    teardown();
}

/* One step: sqrt over x [2,4] under the scope "a b=c" (a name no
 * "key=value" parser survives); returns the line of the sqrt call. */
static int sqrt_step(const float *x8)
{
    te_step_begin();
    te_tensor *x = te_tensor_from(TE_F32, te_shape(2, 4), x8);
    ck_assert(x != NULL);
    snprintf(x->name, sizeof x->name, "data:x");
    te_scope_push("a b=c");
    int line = __LINE__ + 1;
    te_tensor *y = te_sqrt(x);
    te_scope_pop();
    ck_assert(y != NULL);
    te_step_end();
    fflush(out_f);
    return line;
}

START_TEST(test_stop_as_data)
{
    const dbg_stop *before = dbg_last_stop();
    unsigned seq0 = before ? before->seq : 0;
    ck_assert(!dbg_execute("break nan"));
    int line = sqrt_step((const float[]){ 1, 4, 9, 16, 25, -1, 49, 64 }); /* sqrt(-1) at [1,1] */
    ck_assert_int_eq(n_shown, 1);
    ck_assert_int_eq(n_read, 1); /* the command loop asked the front end, which said continue */
    ck_assert_msg(shown_live, "the stop's pointers were not live while stopped");
    ck_assert_uint_eq(shown.seq, seq0 + 1);
    ck_assert(shown.active);
    ck_assert_int_eq(shown.step, 0);
    ck_assert_int_eq(shown.phase, TE_PHASE_FORWARD);
    ck_assert_str_eq(shown.op, "a b=c/sqrt");
    ck_assert_str_eq(shown.type, "Sqrt");
    ck_assert_int_eq(shown.loc.line, line);
    ck_assert_msg(shown.loc.file && strstr(shown.loc.file, "test_dbg_cmd.c"), "loc.file %s", shown.loc.file);
    ck_assert_str_eq(shown.reason, "nan");
    ck_assert_int_eq(shown.break_id, 1);
    ck_assert_str_eq(shown.break_what, "nan");
    ck_assert_str_eq(shown_cond, "");
    ck_assert_str_eq(shown.tensor, "a b=c/sqrt:out0");
    ck_assert_int_eq(shown.index, 5);
    ck_assert_str_eq(shown.index_text, "[1,1]");
    ck_assert_str_eq(shown.func, "has_nan");
    ck_assert_int_eq(shown.origin.kind, DBG_ORIGIN_CREATED);
    /* the line scripts read, printed from the same struct */
    const char *want = "\nstopped: step=0 phase=forward op=a b=c/sqrt type=Sqrt reason=nan tensor=a b=c/sqrt:out0 "
                       "index=[1,1] origin=created\n";
    ck_assert_msg(strstr(out, want), "no '%s' in:\n%s", want + 1, out);
    /* training went on: the stop stays, its pointers into the step do not */
    const dbg_stop *after = dbg_last_stop();
    ck_assert(after != NULL && after->seq == shown.seq);
    ck_assert(!after->active && after->t == NULL && after->rec == NULL);
    ck_assert_str_eq(after->op, "a b=c/sqrt");
}
END_TEST

START_TEST(test_stop_condition_outlives_tbreak)
{
    ck_assert(!dbg_execute("tbreak a?b=c/sqrt if in0.abs_max > 50"));
    sqrt_step((const float[]){ 1, 4, 9, 16, 25, 36, 49, 64 });
    ck_assert_int_eq(n_shown, 1);
    ck_assert_msg(shown_live, "the stop's pointers were not live while stopped");
    ck_assert_str_eq(shown.reason, "condition");
    ck_assert_str_eq(shown.break_what, "a?b=c/sqrt");
    ck_assert_str_eq(shown.tensor, "data:x");
    ck_assert_str_eq(shown.func, "abs_max");
    ck_assert_msg(shown.value == 64, "value %g", shown.value);
    ck_assert_int_eq(shown.index, -1);
    ck_assert_str_eq(shown.index_text, "");
    ck_assert_int_eq(shown.origin.kind, DBG_ORIGIN_NONE);
    ck_assert_str_eq(shown_cond, "in0.abs_max > 50");
    ck_assert_int_eq(dbg.n_breaks, 0); /* the tbreak is gone... */
    const dbg_stop *s = dbg_last_stop();
    ck_assert(s && s->cond); /* ...its condition stays with the stop, whole */
    ck_assert_str_eq(dbg_cond_text(s->cond), "in0.abs_max > 50");
    dbg_pred p[2];
    ck_assert_int_eq(dbg_cond_preds(s->cond, p, 2), 1);
    ck_assert(p[0].scope == DBG_SCOPE_INPUTS && p[0].slot == 0 && p[0].func == DBG_FN_ABS_MAX && p[0].number == 50);
    const char *want = "stopped: step=0 phase=forward op=a b=c/sqrt type=Sqrt reason=condition tensor=data:x "
                       "index=- origin=-\n";
    ck_assert_msg(strstr(out, want), "no '%s' in:\n%s", want, out);
    ck_assert_msg(strstr(out, "Breakpoint 1 (a?b=c/sqrt if in0.abs_max > 50), step 0, forward, a b=c/sqrt (Sqrt) at "),
                  "no breakpoint header in:\n%s", out);
}
END_TEST

/* `continue N` counts the hits of the breakpoint stopped at: there it
 * lets N-1 pass; at a stop no breakpoint made, after its tbreak went, or
 * with training not stopped, it is refused with why and nothing resumes. */
START_TEST(test_continue_n)
{
    static const float ok[8] = { 1, 4, 9, 16, 25, 36, 49, 64 };
    ck_assert(!dbg_execute("continue 3")); /* running, between stops */
    fflush(out_f);
    ck_assert_msg(strstr(out, "error: continue N: training is running, not stopped at a breakpoint; N counts a "
                              "breakpoint's hits"), "%s", out);

    /* a step stop: refused, the next line (continue) goes on */
    dbg.mode = RUN_STEP;
    fe_lines = (const char *const[]){ "continue 3", NULL };
    sqrt_step(ok);
    ck_assert_int_eq(n_shown, 1);
    ck_assert_int_eq(n_read, 2);
    ck_assert_str_eq(shown.reason, "step");
    ck_assert_int_eq(shown.break_id, 0);
    ck_assert_msg(strstr(out, "error: continue N: stopped by step, not at a breakpoint; N counts a breakpoint's "
                              "hits"), "%s", out);

    /* a breakpoint's stop: its next two hits pass, the third stops */
    ck_assert(!dbg_execute("break a?b=c/sqrt"));
    fe_lines = (const char *const[]){ "continue 3", NULL };
    fe_next = n_shown = n_read = 0;
    for (int i = 0; i < 4; i++)
        sqrt_step(ok);
    ck_assert_int_eq(n_shown, 2);
    ck_assert_int_eq(n_read, 2);
    ck_assert_int_eq(shown.step, 4); /* the step stop was step 0: stops at 1, then 4 */
    ck_assert_int_eq(dbg.breaks[0].hits, 4);
    ck_assert_int_eq(dbg.breaks[0].ignore, 0);
    ck_assert_msg(strstr(out, "Will ignore the next 2 hits of breakpoint 1.\n"), "%s", out);

    /* a tbreak's stop: the breakpoint is gone, N has nothing to count */
    ck_assert(!dbg_execute("delete"));
    ck_assert(!dbg_execute("tbreak a?b=c/sqrt"));
    fe_lines = (const char *const[]){ "continue 2", NULL };
    fe_next = n_shown = n_read = 0;
    sqrt_step(ok);
    ck_assert_int_eq(n_shown, 1);
    ck_assert_int_eq(n_read, 2);
    ck_assert_int_eq(shown.break_id, 2);
    ck_assert_msg(strstr(out, "error: continue N: breakpoint 2 is deleted (a tbreak goes once it stopped); N counts "
                              "a breakpoint's hits"), "%s", out);
    ck_assert_msg(!strstr(out, "Will ignore the next 1 hits"), "%s", out);
}
END_TEST

/* A command that reads the last stop (DBG_CMD_EVER_STOPPED, as the TUI's
 * jump) is refused before the first stop, with one message, and runs
 * once training stopped, also after it went on. */
static int n_last_runs;

static bool cmd_last(const char *args)
{
    (void)args;
    n_last_runs++;
    return false;
}

START_TEST(test_needs_ever_stopped)
{
    static const dbg_cmd last_cmds[] = { { .name = "zzlast", .usage = "zzlast", .help = "h",
                                           .needs = DBG_CMD_EVER_STOPPED, .run = cmd_last },
                                         { .name = NULL } };
    static const dbg_cmd_group last_group = { "last", last_cmds, NULL };
    char err[256];
    ck_assert_msg(dbg_cmd_add_group(&last_group, err, sizeof err), "%s", err);
    ck_assert_msg(tui_cmds_register(err, sizeof err), "the TUI's commands: %s", err);
    ck_assert_uint_eq(dbg_cmd_find("jump")->needs, DBG_CMD_EVER_STOPPED);
    n_last_runs = 0;
    if (!dbg_last_stop()) { /* this process has not stopped yet (Check forks each case) */
        ck_assert(!dbg_execute("zzlast"));
        ck_assert(!dbg_execute("jump")); /* refused before the TUI is asked */
        fflush(out_f);
        ck_assert_int_eq(n_last_runs, 0);
        ck_assert_msg(strstr(out, "error: zzlast: training has not stopped yet; a breakpoint, 'step' or Ctrl-C "
                                  "stops it\nerror: jump: training has not stopped yet"), "%s", out);
    }
    ck_assert(!dbg_execute("help jump"));
    fflush(out_f);
    ck_assert_msg(strstr(out, "Only once training has stopped (the last stop, also after the program's end)."), "%s",
                  out);
    dbg.mode = RUN_STEP;
    fe_lines = (const char *const[]){ "zzlast", NULL };
    sqrt_step((const float[]){ 1, 4, 9, 16, 25, 36, 49, 64 });
    ck_assert_int_eq(n_last_runs, 1); /* at the stop */
    ck_assert(!dbg_last_stop()->active);
    ck_assert(!dbg_execute("zzlast"));
    ck_assert_int_eq(n_last_runs, 2); /* the stop is over, not gone */
}
END_TEST

/* The entries that go on with training, or end it, say so: the running
 * group's and time travel's that go back (all but `record` and
 * `checkpoint`), and no other built-in one's. */
START_TEST(test_resumes_declared)
{
    int n_groups;
    const dbg_cmd_group *g = dbg_cmd_groups(&n_groups);
    int n_resume = 0;
    for (int i = 0; i < n_groups; i++)
        for (const dbg_cmd *c = g[i].cmds; c->name; c++) {
            const bool goes_back = g[i].cmds == dbg_cmds_record && strcmp(c->name, "record") != 0 &&
                                   strcmp(c->name, "checkpoint") != 0;
            ck_assert_msg(c->resumes == (g[i].cmds == dbg_cmds_exec || goes_back), "%s: resumes %d", c->name,
                          c->resumes);
            n_resume += c->resumes;
        }
    ck_assert_int_eq(n_resume, 13); /* run continue step next finish until quit detach, rewind reverse-step
                                      * reverse-next replay locate */
    ck_assert(dbg_cmd_find("continue")->resumes && dbg_cmd_find("quit")->resumes);
    ck_assert(!dbg_cmd_find("print")->resumes && !dbg_cmd_find("break")->resumes);
}
END_TEST

static char *fe_none(const char *prompt)
{
    (void)prompt;
    return NULL;
}

START_TEST(test_frontend_registry)
{
    ck_assert(dbg_frontend_find("cli") == &dbg_frontend_cli);
    ck_assert(dbg_frontend_find("batch") == &dbg_frontend_batch);
    ck_assert(dbg_frontend_find("nope") == NULL);
    static const dbg_frontend mine = { .name = "test-reg", .read_line = fe_none };
    static const dbg_frontend taken = { .name = "cli", .read_line = fe_none };
    static const dbg_frontend nameless = { .read_line = fe_none };
    ck_assert_int_eq(dbg_frontend_register(&mine), 0);
    ck_assert(dbg_frontend_find("test-reg") == &mine);
    ck_assert_int_eq(dbg_frontend_register(&taken), -1);
    ck_assert(dbg_frontend_find("cli") == &dbg_frontend_cli);
    ck_assert_int_eq(dbg_frontend_register(&nameless), -1);
    char names[256];
    dbg_frontend_names(names, sizeof names);
    ck_assert_msg(strncmp(names, "cli, batch, ", 12) == 0 && strstr(names, "test-reg") &&
                  strstr(names, " or "), "names: %s", names);
    /* the table has an end, said at registration */
    static dbg_frontend many[DBG_MAX_FRONTENDS];
    static char fe_names[DBG_MAX_FRONTENDS][16];
    int ok = 0;
    for (int i = 0; i < DBG_MAX_FRONTENDS; i++) {
        snprintf(fe_names[i], sizeof fe_names[i], "fe%d", i);
        many[i] = (dbg_frontend){ .name = fe_names[i], .read_line = fe_none };
        ok += dbg_frontend_register(&many[i]) == 0;
    }
    ck_assert_msg(ok > 0 && ok < DBG_MAX_FRONTENDS, "%d registered", ok);
}
END_TEST

Suite *suite_dbg_cmd(void)
{
    Suite *s = suite_create("dbg_cmd");
    TCase *tc = tcase_create("commands");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_lookup);
    tcase_add_test(tc, test_break_parsing);
    tcase_add_test(tc, test_break_errors);
    tcase_add_test(tc, test_manage_breaks);
    tcase_add_test(tc, test_info_memory);
    tcase_add_test(tc, test_info_op_device);
    tcase_add_test(tc, test_running_commands);
    tcase_add_test(tc, test_complete_op_names);
    tcase_add_test(tc, test_complete_by_kind);
    tcase_add_test(tc, test_needs);
    tcase_add_test(tc, test_names_unique);
    tcase_add_test(tc, test_many_groups);
    tcase_add_test(tc, test_resumes_declared);
    suite_add_tcase(s, tc);
    TCase *st = tcase_create("stop");
    tcase_add_checked_fixture(st, stop_setup, stop_teardown);
    tcase_add_test(st, test_stop_as_data);
    tcase_add_test(st, test_stop_condition_outlives_tbreak);
    tcase_add_test(st, test_continue_n);
    tcase_add_test(st, test_needs_ever_stopped);
    tcase_add_test(st, test_frontend_registry);
    suite_add_tcase(s, st);
    return s;
}
