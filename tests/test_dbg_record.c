/*
 * test_dbg_record.c — time travel in `tdbg --batch` sessions on
 * examples/mlp: stopped at an injected NaN (step 8) and at a natural
 * overflow (SGD at --lr 5: an Inf at step 6), `rewind S-4` stops at that
 * step's start with reason rewind, and `continue` stops again at the same
 * op and step with the same values (the printed slice, the statistics and
 * every recorded step's loss and parameter checksum, text for text), the
 * replayed steps' log lines equal the first ones, in eager and graph mode;
 * `rewind` past the oldest snapshot and with nothing recorded give the
 * engine's messages; reverse-step and reverse-next land on the op and step
 * before; `replay A-B with dump` (and `with profile`) writes the past
 * steps' dump (profile) and stops at B+1; a replay made to differ (a parameter changed at the rewind's stop)
 * stops with reason diverged, and `locate` answers.
 */
#include "suites.h"
#include "testutil.h"
#include "tsession.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const MLP = "--hidden 64,64 --batch 32 --threads 2 --log-every 1 --steps 12";
static const char *const NAN8 = "--inject nan@op=fc2/linear,step=8";
/* For rewinds 8 steps back: a NaN injected at step 10, and a learning rate
 * whose overflow comes at step 9 (an Inf at fc2/linear). */
static const char *const NAN10 = "--inject nan@op=fc2/linear,step=10";
static const char *const DIVERGE9 = "--optim sgd --lr 1.8";

static char suite_dir[64];
static void suite_dir_make(void) { tu_scratch_make(suite_dir, sizeof suite_dir, "tdbg-dbgrec"); }
static void suite_dir_remove(void) { tu_scratch_remove(suite_dir); }

/* What the k-th (from 0) `(tdbg) cmd` printed, up to the next prompt,
 * into buf; fails when the command is not there k+1 times. */
static const char *output_of(const ts_session *s, const char *cmd, int k, char *buf, size_t n)
{
    char echo[256];
    snprintf(echo, sizeof echo, "(tdbg) %s\n", cmd);
    const char *p = s->out;
    for (int i = 0; p && i <= k; i++)
        if ((p = strstr(p, echo)) && i < k)
            p += strlen(echo);
    ck_assert_msg(p != NULL, "no %d-th '%s' in the session:\n%s", k, cmd, s->out);
    p += strlen(echo);
    const char *end = strstr(p, "(tdbg) ");
    snprintf(buf, n, "%.*s", (int)(end ? (size_t)(end - p) : strlen(p)), p);
    return buf;
}

/* The k-th and j-th outputs of cmd are the same text, and not empty. */
static void same_output(const ts_session *s, const char *cmd, int k, int j)
{
    static char a[65536], b[65536];
    output_of(s, cmd, k, a, sizeof a);
    output_of(s, cmd, j, b, sizeof b);
    ck_assert_msg(strlen(a) > 20, "'%s' printed little: '%s'", cmd, a);
    ck_assert_msg(strcmp(a, b) == 0, "'%s' differs after the rewind:\nfirst:\n%s\nreplayed:\n%s", cmd, a, b);
}

/* The log line of step n, the first time and replayed ("... (replayed)"). */
static void replayed_line_same(const ts_session *s, int n)
{
    char head[32], first[256], again[300];
    snprintf(head, sizeof head, "\nstep=%d loss=", n);
    const char *p = strstr(s->out, head);
    ck_assert_msg(p != NULL, "no line of step %d:\n%s", n, s->out);
    snprintf(first, sizeof first, "%.*s", (int)strcspn(p + 1, "\n"), p + 1);
    ck_assert_msg(strstr(first, "replayed") == NULL, "step %d's first line is marked: %s", n, first);
    snprintf(again, sizeof again, "\n%s (replayed)\n", first);
    ck_assert_msg(strstr(p + 1, again) != NULL, "step %d's replayed line is not '%s (replayed)':\n%s", n, first,
                  s->out);
}

/* Stopped at step S (by `brk`), rewind S-8, continue: the same stop, the
 * same values and the same recording. _i: bit 0 graph mode, bit 1 the
 * natural overflow instead of the injected NaN. */
START_TEST(test_rewind_replays_stop)
{
    const bool graph = _i & 1, natural = _i & 2;
    const int S = natural ? 9 : 10, back = S - 8, snap = back - back % 2;
    const char *print = "print fc2/linear:out0[0:2]", *stats = "stats fc2/linear:out0";
    char cmds[1024];
    snprintf(cmds, sizeof cmds,
             "record every 2;break %s;run;%s;%s;info record;rewind %d;continue;%s;%s;info record;quit",
             natural ? "nonfinite" : "nan", print, stats, back, print, stats);
    ts_session s = ts_tdbg("--batch", cmds, "mlp", "%s %s --mode %s", MLP, natural ? DIVERGE9 : NAN10,
                           graph ? "graph" : "eager");
    char first[512], want[512];
    ck_assert(ts_stopped_line(&s, 0, first, sizeof first) != NULL);
    snprintf(want, sizeof want, "stopped: step=%d phase=forward op=fc2/linear type=Linear reason=%s", S,
             natural ? "inf" : "nan");
    ck_assert_msg(strncmp(first, want, strlen(want)) == 0, "first stop: %s\nsession:\n%s", first, s.out);
    snprintf(want, sizeof want, "stopped: step=%d phase=forward op=- type=- reason=rewind tensor=- index=- origin=-",
             back);
    ts_stop_is(&s, 1, want);
    ts_stop_is(&s, 2, first); /* the same op, step, tensor and element */
    ck_assert(ts_stopped_line(&s, 3, want, sizeof want) == NULL);
    same_output(&s, print, 0, 1);
    same_output(&s, stats, 0, 1);
    same_output(&s, "info record", 0, 1); /* each step's loss and checksum, recorded and replayed */
    for (int n = back; n < S; n++)
        replayed_line_same(&s, n);
    char rec[8192];
    output_of(&s, "info record", 0, rec, sizeof rec);
    snprintf(want, sizeof want, "steps recorded: %d (0 to %d)", S, S - 1);
    ck_assert_msg(strstr(rec, want) != NULL, "no '%s' in:\n%s", want, rec);
    ts_has(&s, "snapshots: ");
    snprintf(want, sizeof want, "rewind: back to step %d from the snapshot of step %d\n", back, snap);
    ts_has(&s, want);
    ts_lacks(&s, "diverged");
    ts_free(&s);
}
END_TEST

/* The engine's messages, word for word: past the oldest snapshot, nothing
 * recorded; the session stays stopped where it was. */
START_TEST(test_rewind_errors)
{
    ts_session s = ts_tdbg("--batch", "record every 2 keep 2;break nan;run;info record;rewind 3;rewind 9;record off;"
                           "rewind 7;rewind;info record;quit", "mlp", "%s %s", MLP, NAN8);
    ts_has(&s, "error: rewind 3: no snapshot at or before step 3; the oldest step it can reach is 6 (a snapshot "
               "every 2 steps, the last 2 kept)\n");
    ts_has(&s, "error: rewind 9: step 9 has not run yet (the current step is 8)\n");
    ts_has(&s, "Recording stopped; its snapshots and steps are dropped.\n");
    ts_has(&s, "error: rewind 7: nothing is recorded: start recording (te_record_start, the debugger's `record`) "
               "before the steps to go back to\n");
    ts_has(&s, "error: rewind: which step? (usage: rewind STEP)\n");
    ts_has(&s, "Not recording ('record' starts it).\n");
    char rec[8192];
    output_of(&s, "info record", 0, rec, sizeof rec);
    char *steps = strstr(rec, "steps recorded: 8 (0 to 7)\n");
    ck_assert_msg(steps != NULL, "info record:\n%s", rec);
    *steps = 0; /* the snapshots' part: 6 and 8 only */
    ck_assert_msg(strstr(rec, "Recording: a snapshot every 2 steps, the last 2 kept, at most 1024.0 MB\n") &&
                      strstr(rec, "snapshots: 2,") && strstr(rec, "  step 6 ") && strstr(rec, "  step 8 ") &&
                      !strstr(rec, "  step 4 "),
                  "info record:\n%s", rec);
    ck_assert(ts_stopped_line(&s, 1, rec, sizeof rec) == NULL); /* no command resumed */
    ts_status_is(&s, 1);
    ts_free(&s);
}
END_TEST

/* reverse-step: the op before; again: the one before that; reverse-next:
 * the previous step's start; reverse-step there: that step's last op,
 * after which `step` is the next step's first op. */
START_TEST(test_reverse)
{
    ts_session s = ts_tdbg("--batch", "record every 2;break nan;run;reverse-step;reverse-step;reverse-next;"
                           "reverse-step;step;quit", "mlp", "%s %s --mode %s", MLP, NAN8, _i ? "graph" : "eager");
    ts_stop_is(&s, 1, "stopped: step=8 phase=forward op=fc1/relu type=Relu reason=reverse-step tensor=- index=- "
                      "origin=-");
    ts_stop_is(&s, 2, "stopped: step=8 phase=forward op=fc1/linear type=Linear reason=reverse-step tensor=- "
                      "index=- origin=-");
    ts_stop_is(&s, 3, "stopped: step=7 phase=forward op=- type=- reason=reverse-next tensor=- index=- origin=-");
    ts_stop_is(&s, 4, "stopped: step=6 phase=update op=update/fc3.bias type=Adam reason=reverse-step tensor=- "
                      "index=- origin=-");
    ts_stop_is(&s, 5, "stopped: step=7 phase=forward op=fc1/linear type=Linear reason=step tensor=- index=- "
                      "origin=-");
    ts_has(&s, "reverse-next: back to step 7 from the snapshot of step 6\n");
    ts_free(&s);
}
END_TEST

/* A rewind to before Adam's first update frees the moments it made; the
 * snapshots taken after them named those tensors and go, and the replay
 * takes them again: the NaN stops at the same place, no step diverges,
 * and later rewinds and a restart of recording (which frees every
 * snapshot) touch no freed memory. */
START_TEST(test_rewind_before_first_update)
{
    ts_session s = ts_tdbg("--batch", "record every 2;break nan;run;rewind 1;c;info record;reverse-step;"
                           "record every 3;quit", "mlp", "%s %s", MLP, NAN8);
    ts_stop_is(&s, 0, "stopped: step=8 phase=forward op=fc2/linear type=Linear reason=nan tensor=fc2/linear:out0 "
                      "index=[0,0] origin=created");
    ts_stop_is(&s, 1, "stopped: step=1 phase=forward op=- type=- reason=rewind tensor=- index=- origin=-");
    ts_stop_is(&s, 2, "stopped: step=8 phase=forward op=fc2/linear type=Linear reason=nan tensor=fc2/linear:out0 "
                      "index=[0,0] origin=created");
    ts_stop_is(&s, 3, "stopped: step=8 phase=forward op=fc1/relu type=Relu reason=reverse-step tensor=- index=- "
                      "origin=-");
    ts_lacks(&s, "reason=diverged");
    char buf[4096];
    const char *info = output_of(&s, "info record", 0, buf, sizeof buf);
    for (int step = 0; step <= 8; step += 2) {
        char want[64];
        snprintf(want, sizeof want, "  step %d ", step);
        ck_assert_msg(strstr(info, want), "no snapshot of step %d after the replay:\n%s", step, info);
    }
    ts_has(&s, "Recording from the next step: a snapshot every 3 steps");
    ts_status_is(&s, 1);
    ts_free(&s);
}
END_TEST

/* replay 4-6 with a dump spec: the files of steps 4, 5 and 6 (past when
 * asked), none else, a stop at step 7's start; the breakpoint still stops
 * at the NaN after it. */
START_TEST(test_replay_dump)
{
    char dir[128], cmds[512];
    snprintf(dir, sizeof dir, "%s/replay", suite_dir);
    snprintf(cmds, sizeof cmds, "break nan;record every 2;run;replay 4-6 with dump dir=%s;ops=fc2/*;continue;quit",
             dir);
    ts_session s = ts_tdbg("--batch", cmds, "mlp", "%s %s", MLP, NAN8);
    ts_stop_is(&s, 1, "stopped: step=7 phase=forward op=- type=- reason=replay tensor=- index=- origin=-");
    ck_assert_msg(strstr(s.out, "stopped: step=8 phase=forward op=fc2/linear type=Linear reason=nan") != NULL,
                  "no NaN stop after the replay:\n%s", s.out);
    char want[512];
    snprintf(want, sizeof want, "Dump to %s stopped: 3 steps and ", dir);
    ts_has(&s, want);
    for (int n = 0; n < 12; n++) {
        char f[256];
        snprintf(f, sizeof f, "%s/step-%08d.h5", dir, n);
        ck_assert_msg((access(f, F_OK) == 0) == (n >= 4 && n <= 6), "%s %s", f,
                      access(f, F_OK) == 0 ? "written" : "missing");
    }
    ts_session ls = ts_sh("'%s/dump/tdbg-dump' ls '%s' 2>&1", TDBG_BUILDDIR, dir);
    ts_has(&ls, "fc2/linear");
    ts_free(&ls);
    char prof[160];
    snprintf(prof, sizeof prof, "%s/replay.json", suite_dir);
    snprintf(cmds, sizeof cmds, "break nan;record every 2;run;replay 4-5 with profile file=%s;quit", prof);
    ts_session p = ts_tdbg("--batch", cmds, "mlp", "%s %s", MLP, NAN8);
    ts_stop_is(&p, 1, "stopped: step=6 phase=forward op=- type=- reason=replay tensor=- index=- origin=-");
    snprintf(want, sizeof want, "Profile of steps 4-5 written to %s; 'tdbg-prof %s' reads it\n", prof, prof);
    ts_has(&p, want);
    ts_free(&p);
    ts_session pr = ts_sh("'%s/prof/tdbg-prof' '%s' 2>&1", TDBG_BUILDDIR, prof);
    snprintf(want, sizeof want, "%s: 2 steps, ", prof);
    ts_has(&pr, want);
    ts_free(&pr);
    ts_session bad = ts_tdbg("--batch", "break nan;run;replay 4-6 with dump steps=1;replay 6-4 with dump dir=x;"
                             "replay 4-6 dump dir=x;quit", "mlp", "%s %s", MLP, NAN8);
    ts_has(&bad, "error: replay: the steps are the replay's (4-6): leave steps= out of the spec\n");
    ts_has(&bad, "error: replay: expected steps A-B (A <= B) or A, got '6-4'");
    ts_has(&bad, "error: replay: expected 'with dump SPEC' or 'with profile SPEC' after the steps");
    ts_free(&bad);
    ts_free(&s);
}
END_TEST

/* A parameter changed at the rewind's stop: the replay of that step
 * differs, stops with reason diverged and both losses and checksums (the
 * recorded ones those of `info record`); `locate` replays it from its
 * snapshot (the change gone) and says it replays exactly. */
START_TEST(test_diverged_locate)
{
    ts_session s = ts_tdbg("--batch", "record every 2;break nan;run;info record;rewind 4;"
                           "set param:fc2.weight[0,0] = 1;continue;locate;quit", "mlp", "%s %s", MLP, NAN8);
    ts_stop_is(&s, 2, "stopped: step=4 phase=update op=- type=- reason=diverged tensor=- index=- origin=-");
    ts_stop_is(&s, 3, "stopped: step=4 phase=update op=- type=- reason=located tensor=- index=- origin=-");
    char rec[8192], line[256];
    output_of(&s, "info record", 0, rec, sizeof rec);
    const char *p = strstr(rec, "  step 4        loss ");
    ck_assert_msg(p != NULL, "info record:\n%s", rec);
    char loss[64], sum[32];
    ck_assert(sscanf(p, "  step 4 loss %63s checksum %31s", loss, sum) == 2);
    snprintf(line, sizeof line, "    loss      recorded %s  replayed ", loss);
    ts_has(&s, line);
    snprintf(line, sizeof line, "    checksum  recorded %s  replayed ", sum);
    ts_has(&s, line);
    ts_has(&s, "  cause: step 4 replays exactly: the same ops, loss and checksum as recorded\n");
    ts_free(&s);
}
END_TEST

/* A program that does not take part (tests/crashy registers nothing): the
 * recording stopped at its first step, and rewind and record say why. */
START_TEST(test_not_taking_part)
{
    ts_session s = ts_sh("'%s/debugger/tdbg' --batch -ex 'break scale/scale' -ex run -ex 'info record' -ex 'rewind 0' "
                         "-ex 'record every 2' -ex quit -- '%s/tests/crashy' null </dev/null",
                         TDBG_BUILDDIR, TDBG_BUILDDIR);
    ts_has(&s, "Not recording: this program does not take part in time travel (docs/engine.md \"Time travel\").\n");
    ts_has(&s, "error: rewind 0: this program does not take part in time travel: the engine cannot put back its "
               "loop's own state (step counter, schedule, running sums); register that state with te_record_host(), "
               "or call te_record_participate(true) if the loop keeps none (docs/engine.md \"Time travel\")\n");
    ts_has(&s, "error: record: this program does not take part in time travel");
    ts_free(&s);
}
END_TEST

/* `checkpoint save FILE` at a stop in step 3: the program writes the state
 * after step 3, and `--load FILE` resumes at step 4 with the lines of the
 * run that never stopped, bit for bit (mlp and gpt); a program that writes
 * no checkpoints on request, and bad usage, are told so. */
START_TEST(test_checkpoint_save)
{
    const bool gpt = _i;
    char dir[256], file[512], cmds[1024], args[640], want[1400];
    tu_scratch_sub(suite_dir, dir, sizeof dir);
    snprintf(file, sizeof file, "%s/c.h5", dir);
    if (gpt)
        snprintf(args, sizeof args, "--data '%s/tests/fixtures/alice.txt' --layers 2 --heads 2 --embd 32 --block 32 "
                 "--batch 8 --threads 1 --log-every 1 --steps 6 --warmup 2 --eval-every 0", TDBG_SRCDIR);
    else
        snprintf(args, sizeof args, "--hidden 32,32 --batch 16 --steps 6 --log-every 1 --threads 1");
    snprintf(cmds, sizeof cmds, "break step 3;run;checkpoint save %s;continue", file);
    ts_session s = ts_tdbg("--batch", cmds, gpt ? "gpt" : "mlp", "%s", args);
    snprintf(want, sizeof want, "Checkpoint: %s is written when step 3 ends, the state after it ('--load %s' resumes "
             "at step 4).\n", file, file);
    ts_has(&s, want);
    snprintf(want, sizeof want, "\nsaved: %s at step 4\n", file);
    ts_has(&s, want);
    ts_session r = ts_sh("'%s/examples/%s' %s --load '%s'", TDBG_BUILDDIR, gpt ? "gpt" : "mlp", args, file);
    ts_status_is(&r, 0);
    for (int n = 4; n < 6; n++) {
        char head[32], line[256];
        snprintf(head, sizeof head, "\nstep=%d loss=", n);
        const char *p = strstr(s.out, head);
        ck_assert_msg(p != NULL, "no step %d in the session:\n%s", n, s.out);
        snprintf(line, sizeof line, "%.*s\n", (int)strcspn(p + 1, "\n"), p + 1);
        ck_assert_msg(strstr(r.out, line), "the resumed run's step %d is not '%s':\n%s", n, line, r.out);
    }
    const char *fin = strstr(s.out, "final: ");
    if (fin) {
        char line[256];
        snprintf(line, sizeof line, "%.*s", (int)strcspn(fin, "\n"), fin);
        ck_assert_msg(strstr(r.out, line), "the resumed run's '%s' differs:\n%s", line, r.out);
    }
    ts_free(&r);
    ts_free(&s);
    if (gpt)
        return;
    s = ts_tdbg("--batch", "break step 1;run;checkpoint;checkpoint load x;checkpoint save;checkpoint save a b;quit", "mlp",
                "%s", args);
    ts_has(&s, "error: checkpoint: expected 'save FILE'\n");
    ts_has(&s, "error: checkpoint: expected 'save FILE', got 'load'\n");
    ts_has(&s, "error: checkpoint save: which file? (usage: checkpoint save FILE)\n");
    ts_has(&s, "error: checkpoint: unexpected argument 'b' (usage: checkpoint save FILE)\n");
    ts_free(&s);
    s = ts_sh("'%s/debugger/tdbg' --batch -ex 'break scale/scale' -ex run -ex 'checkpoint save x.h5' -ex quit -- "
              "'%s/tests/crashy' null </dev/null", TDBG_BUILDDIR, TDBG_BUILDDIR);
    ts_has(&s, "error: checkpoint save: this program writes no checkpoints on request (its loop does not call "
               "te_checkpoint_take; docs/engine.md \"Time travel\")\n");
    ts_free(&s);
}
END_TEST

/* Every example, eager and graph, f32 and mixed precision (O2 bf16 with
 * its loss scaler): rewind 3 from step 6's start, back to step 6, the same
 * recording and lines. mlp: Adam; cnn: batch norm's running statistics;
 * gpt: its schedule and text position in the loop's region, dropout.
 * _i: the program (mlp, cnn, gpt), then graph mode, then the AMP. */
START_TEST(test_every_example)
{
    static const char *const progs[] = { "mlp", "cnn", "gpt" };
    const char *prog = progs[_i % 3];
    const bool graph = (_i / 3) & 1, amp = (_i / 6) & 1;
    char args[640];
    int n;
    if (_i % 3 == 2)
        n = snprintf(args, sizeof args, "--data '%s/tests/fixtures/alice.txt' --layers 2 --heads 2 --embd 32 "
                     "--block 32 --batch 8 --threads 1 --log-every 1 --steps 8 --warmup 2 --eval-every 0", TDBG_SRCDIR);
    else if (_i % 3 == 1)
        n = snprintf(args, sizeof args, "--channels 4,4,4 --batch 8 --train-size 64 --steps 8 --log-every 1 --threads 1");
    else
        n = snprintf(args, sizeof args, "--hidden 32,32 --batch 16 --steps 8 --log-every 1 --threads 1");
    snprintf(args + n, sizeof args - (size_t)n, " --mode %s%s", graph ? "graph" : "eager",
             amp ? " --amp O2 --amp-dtype bf16" : "");
    ts_session s = ts_tdbg("--batch", "record every 2;until step 6;info record;rewind 3;until step 6;info record;quit",
                           prog, "%s", args);
    ts_stop_is(&s, 1, "stopped: step=3 phase=forward op=- type=- reason=rewind tensor=- index=- origin=-");
    ts_stop_is(&s, 2, "stopped: step=6 phase=forward op=- type=- reason=step tensor=- index=- origin=-");
    same_output(&s, "info record", 0, 1);
    ts_has(&s, "steps recorded: 6 (0 to 5)");
    for (int k = 3; k < 6; k++)
        replayed_line_same(&s, k);
    ts_lacks(&s, "diverged");
    ts_free(&s);
}
END_TEST

START_TEST(test_help)
{
    ts_session s = ts_tdbg("--batch", "help rewind;help replay;help;record every 0;record often 3;quit", "mlp", "%s",
                           MLP);
    ts_has(&s, "usage: rewind STEP\n");
    ts_has(&s, "usage: replay A-B with dump SPEC|profile SPEC\n");
    ts_has(&s, "time travel:\n");
    ts_has(&s, "error: every: expected a whole number >= 1, got '0'\n");
    ts_has(&s, "error: record: unknown 'often'; expected every, keep or budget");
    ts_free(&s);
}
END_TEST

Suite *suite_dbg_record(void)
{
    Suite *s = suite_create("dbg_record");
    TCase *tc = tcase_create("record");
    tcase_add_unchecked_fixture(tc, suite_dir_make, suite_dir_remove);
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_rewind_replays_stop, 0, 4);
    tcase_add_test(tc, test_rewind_errors);
    tcase_add_loop_test(tc, test_reverse, 0, 2);
    tcase_add_test(tc, test_rewind_before_first_update);
    tcase_add_test(tc, test_replay_dump);
    tcase_add_test(tc, test_diverged_locate);
    tcase_add_test(tc, test_not_taking_part);
    tcase_add_loop_test(tc, test_every_example, 0, 12);
    tcase_add_loop_test(tc, test_checkpoint_save, 0, 2);
    tcase_add_test(tc, test_help);
    suite_add_tcase(s, tc);
    return s;
}
