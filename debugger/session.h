/*
 * session.h — the debugger session inside the training process.
 *
 * The engine loads the debugger (plugin.c) when TDBG is set; the session
 * attaches hooks and, at every stop, runs the command loop on the training
 * thread itself: a hook returns only when a command (continue, step, ...)
 * says training goes on. Breakpoints are checked in the op_end hook;
 * step/next/finish/until stops in the step and phase hooks.
 *
 * A stop is data first: the session keeps the last one as a dbg_stop
 * (report.c fills it, then prints the report and the `stopped:` line from
 * it), and hands it to the front end, which reads the struct, never the
 * printed text. Front ends (dbg_frontend: the CLI and batch mode built in,
 * the TUI registering itself) are picked by TDBG's value; the debugger
 * calls them through the struct and includes nothing of theirs.
 */
#ifndef TDBG_SESSION_H
#define TDBG_SESSION_H

#include "dbg.h"

#include <signal.h>
#include <stdio.h>

#define DBG_MAX_BREAKS 64
#define DBG_MAX_OPS 4096
#define DBG_TREND_STEPS 32   /* steps of statistics kept per tensor */
#define DBG_MAX_TRENDS 1024  /* tensors with a statistics history */
#define DBG_MAX_WATCH 16     /* tensors `trend` records every step */

typedef enum {
    BK_OP,        /* an op name glob */
    BK_TYPE,      /* type:TYPE */
    BK_STEP,      /* the start of step N */
    BK_NAN, BK_INF, BK_NONFINITE, /* the first op creating such a value */
    BK_OVERFLOW,  /* an op whose low-precision output rounded to +-Inf from finite inputs */
    BK_UNDERFLOW, /* an op whose finite non-zero results rounded to zero (more than `fraction` of them) */
    BK_SKIP,      /* the loss scaler is about to skip the step (the amp/unscale op found a non-finite gradient) */
    BK_DATA,      /* a batch failing a data check, before any op reads it */
} dbg_break_kind;

typedef struct dbg_break {
    int id;                 /* as the user sees it, from 1 */
    dbg_break_kind kind;
    char what[TE_NAME_MAX]; /* glob, type or step as typed */
    int64_t step;           /* BK_STEP */
    double fraction;        /* BK_UNDERFLOW: of the nonzero results; 0: any */
    te_data_check data;     /* BK_DATA: what it looks for */
    dbg_cond *cond;         /* NULL: none */
    bool enabled, temporary;
    int64_t hits, ignore;
} dbg_break;

/* An op seen in the current step (or the last one), in execution order. */
typedef struct dbg_op {
    char name[TE_NAME_MAX];
    const char *type;        /* static strings from the engine */
    te_phase phase;
    int exec;
    te_loc loc;
    int n_in, n_out;
    const te_tensor *in[8], *out[8]; /* valid while the step runs (see dbg_tensor_readable) */
    char in_name[8][TE_NAME_MAX], out_name[8][TE_NAME_MAX];
    int n_reads;             /* backward: the forward tensors its kernel reads (te_op_record.reads) */
    const te_tensor *reads[8];
    char read_name[8][TE_NAME_MAX];
    te_device in_dev[8], out_dev[8], read_dev[8]; /* where each lived (info op names all but the CPU) */
    bool has_stats;
    te_stats out_stats;     /* of output 0, when a check computed them */
    bool bad;                /* produced NaN/Inf this step */
    char kernel[128];        /* graph mode: the kernel that ran it */
    te_dtype dtype;          /* output 0's: the precision it ran in */
    int64_t overflow, underflow; /* what rounding its outputs did (te_op_record.round) */
} dbg_op;

typedef struct dbg_trend {
    char name[TE_NAME_MAX];
    int64_t step[DBG_TREND_STEPS];
    te_stats s[DBG_TREND_STEPS];
    int n, head;             /* ring buffer */
    te_tensor *prev;         /* previous step's copy, for rel_change */
    int64_t prev_step;
} dbg_trend;

typedef enum { RUN_GO, RUN_STEP, RUN_NEXT, RUN_FINISH, RUN_UNTIL } dbg_run_mode;

typedef struct dbg_session {
    bool batch, interactive;
    const char *program;
    dbg_break breaks[DBG_MAX_BREAKS];
    int n_breaks, next_id;
    dbg_run_mode mode;
    int64_t repeat;          /* RUN_STEP, RUN_NEXT: stops still to pass (`step N`: N) */
    bool reversing;          /* RUN_STEP towards reverse-step's op: its stop's reason says so */
    int64_t until_step;
    te_phase finish_phase;
    int64_t finish_step;
    bool started;            /* `run` was given */
    bool ending;             /* the debugger ends the program (quit, script over) */
    bool in_step;
    bool attach_pause;       /* the attach's pause is still to come: it may come inside a collective's wait */
    int64_t step;
    te_phase phase;
    dbg_op *ops;             /* this step's ops */
    int n_ops;
    dbg_op *last_ops;        /* the previous step's */
    int n_last_ops;
    dbg_trend *trends;
    int n_trends;
    bool observing;          /* te_observe_add("*") is in force */
    char watch[DBG_MAX_WATCH][TE_NAME_MAX]; /* `trend` names */
    int n_watch, n_observed_watch;
    char **script;           /* batch / -ex commands still to run */
    int n_script, script_pos;
    int hook;                /* the session's engine hook (te_hook_add), -1 before */
} dbg_session;

extern dbg_session dbg;
extern volatile sig_atomic_t dbg_interrupted;
/* A rank of a job under `tdbg --mpi` (HELLO job=1): SIGTERM (mpirun ending
 * the job after a rank died) stops at the next op or collective's wait,
 * so that the flight recorder writes and the stop is reported, and the
 * rank dies of it when the session goes on (dbg_job_signals, session.c). */
void dbg_job_signals(void);
/* The program's own SIGTERM action back (detach: a rank attached to
 * and left must die of mpirun's SIGTERM as before). */
void dbg_job_signals_off(void);

/* ---- the stop ------------------------------------------------------------- */

/* Where and why training stopped, as data. Text fields are "" where the
 * `stopped:` line says "-". Pointers into the program (t, rec) are valid
 * while the stop is active, NULL after. */
typedef struct dbg_stop {
    unsigned seq;                /* 1 for the first stop of the run; 0: none yet */
    bool active;                 /* training is paused at this stop now */
    int64_t step;
    te_phase phase;              /* the op's, else the session's */
    char op[TE_NAME_MAX];        /* "" at a stop between ops (step, finish) */
    char type[TE_NAME_MAX];      /* the op's type, "MatMul" */
    te_loc loc;                  /* the program's call that made the op; file NULL without an op */
    const te_op_record *rec;     /* the op's record */
    char reason[16];             /* nan, inf, condition, breakpoint, step, finish, interrupt */
    int break_id;                /* the breakpoint stopped at, 0 if none */
    char break_what[TE_NAME_MAX]; /* its glob, type or step as typed */
    dbg_cond *cond;              /* its condition: the stop's own copy, NULL if none */
    char tensor[TE_NAME_MAX];    /* the tensor that made it stop */
    const te_tensor *t;          /* that tensor */
    int64_t index;               /* its first bad element (flat), -1 if none */
    char index_text[96];         /* the same as "[0,0,0,7]" */
    char func[16];               /* the condition's statistic that held, "abs_max" */
    double value;                /* its value for the tensor */
    dbg_origin origin;           /* created here or propagated (non-finite stops) */
    /* Precision stops (overflow, underflow) and conditions on them: what
     * rounding the hit output did, round.dtype TE_F32 when nothing. */
    te_round_stats round;
    /* skip: the scale of the step, the parameter whose gradient was
     * non-finite first, the first backward op of the step that created
     * (not inherited) a non-finite value and the tensor it is in, and the
     * same of the forward pass ("" where none was seen: none created one
     * there, or `break skip` was set after that pass ran). */
    float scale;
    char skip_param[TE_NAME_MAX];
    char skip_op[TE_NAME_MAX];
    char skip_tensor[TE_NAME_MAX];
    char skip_fwd_op[TE_NAME_MAX];
    char skip_fwd_tensor[TE_NAME_MAX];
    /* diverged: the replayed step's loss and parameter checksum beside
     * the recorded ones (cmd_record.c) */
    double rec_loss, replay_loss;
    uint64_t rec_sum, replay_sum;
    /* located: te_record_locate's answer (op and type are its op's) */
    bool has_located;
    te_record_located located;
    /* Which sample: a data stop's batch, the batch a NaN came in with, a
     * failed op's batch input. row is the first bad row of `tensor`'s
     * batch, sample its dataset index, source where it came from; -1 and
     * "" when none. batch is valid while the stop is active. */
    const te_batch *batch;
    int64_t row, sample;
    char source[256];
    char data_issue[16];         /* data stops: te_data_issue_name() of what the check found */
    int64_t bad_rows;            /* rows of the batch holding bad values */
    char error[768];             /* error stops: the op's failure, te_error()'s message */
    int signal;                  /* reason=signal in a job's rank: the signal (SIGTERM), 0 otherwise */
} dbg_stop;

/* The last stop, NULL before the first: the one record of where training
 * stopped (the session keeps no copy of its own). */
const dbg_stop *dbg_last_stop(void);
/* The op record training is paused at now: the last stop's while it is
 * active and at an op, else NULL. */
const te_op_record *dbg_stopped_at(void);
/* Fills s for a hit of b (or a step/interrupt stop with reason when b is
 * NULL), taking s's old condition copy away; the caller sets seq and
 * active. report.c. */
void dbg_stop_make(dbg_stop *s, const dbg_break *b, const char *reason, const dbg_hit *hit,
                   const te_op_record *rec);
/* Stops between ops for a reason of time travel's (rewind, reverse-next,
 * replay, diverged, located; cmd_record.c), as a breakpoint's stop does:
 * fill, when given, adds its fields to the stop before the report. */
void dbg_stop_at(const char *reason, void (*fill)(dbg_stop *s));
/* Prints s's report and its `stopped:` line on dbg_out. report.c. */
void dbg_stop_report(const dbg_stop *s);
/* s's `stopped:` line, without its newline, into buf (DBG_STOP_LINE_MAX
 * holds any). report.c. */
#define DBG_STOP_LINE_MAX (6 * TE_NAME_MAX + 256)
void dbg_stop_line(const dbg_stop *s, char *buf, size_t n);
/* Training is not paused at the last stop any more (the program ends
 * inside it): its pointers go. */
void dbg_stop_leave(void);

/* ---- front ends ----------------------------------------------------------- */

/* A terminal far away: the one `tdbg attach --tui` runs in. The run's
 * front end draws on out_fd and reads keys from in_fd, pipes whose bytes
 * travel to and from the client (remote.c). */
#define DBG_TERM_MAX 1000 /* a remote terminal's rows and cols are clamped to this (memory) */
typedef struct dbg_term {
    int in_fd, out_fd; /* the front end takes its own copies (dup) */
    char name[64];     /* the client's TERM */
    int rows, cols;
    bool utf8;         /* the client's terminal takes UTF-8 */
} dbg_term;

/* A front end: where command lines come from and where a stop is shown.
 * Output: the debugger writes to dbg_out; a front end that shows output
 * its own way points dbg_out_stream at a stream of its own in start (the
 * TUI: its output pane), and the program's stdout and stderr are its to
 * take. Optional members may be NULL. */
typedef struct dbg_frontend {
    const char *name;  /* TDBG's value that picks it: "cli", "batch", "tui" */
    /* optional: takes over; 0, or -1 with why written and nothing changed
     * (no terminal): the command line is used instead. */
    int (*start)(char *why, size_t n);
    /* The next command line (malloc'd), NULL at the end of input. Lines of
     * the -ex script come first, without asking the front end. */
    char *(*read_line)(const char *prompt);
    /* optional: a stop, reported on dbg_out already; s is dbg_last_stop(). */
    void (*show_stop)(const dbg_stop *s);
    /* optional: the program ends (a last look, then the terminal back). */
    void (*finish)(void);
    /* optional: as start, on the terminal of an attached client (the TUI
     * of `tdbg attach --tui`), not this process's. */
    int (*start_on)(const dbg_term *t, char *why, size_t n);
    /* optional: that terminal's new size; called from any thread. */
    void (*resize)(int rows, int cols);
    /* optional: the session ends now (detach): the terminal back, no last look. */
    void (*leave)(void);
    /* optional: a fatal signal (SIGSEGV, SIGABRT, SIGTERM, SIGHUP, ...),
     * from the debugger's handler: async-signal-safe calls only. The TUI
     * gives the terminal back here. */
    void (*fatal_signal)(int sig);
} dbg_frontend;

#define DBG_MAX_FRONTENDS 8
/* Adds f (which must live as long as the program) to the choices; a front
 * end linked into the debugger registers from a constructor. -1 with a
 * message on stderr when the name is taken or the table is full. */
int dbg_frontend_register(const dbg_frontend *f);
/* The front end TDBG=name picks, or NULL. */
const dbg_frontend *dbg_frontend_find(const char *name);
/* "cli, batch or tui": the registered names, for a message. */
void dbg_frontend_names(char *buf, size_t n);
/* The built-in ones (cli.c). */
extern const dbg_frontend dbg_frontend_cli, dbg_frontend_batch;
/* The one in use; set by plugin.c before the first command. */
extern const dbg_frontend *dbg_frontend_active;
/* Catches the fatal signals: the active front end's fatal_signal runs,
 * then the signal's old action (the program still dies of it). */
void dbg_fatal_handlers_install(void);

/* ---- an attached session (attach.c, remote.c; docs/attach.md) -------------
 * A listening run (TDBG_LISTEN) hands a front end's connection to
 * dbg_plugin_attach, which sets the session up over it with the remote
 * front end and pauses at the next op; `detach`, `quit` in batch mode, BYE
 * or a lost connection take everything the session set in the engine away
 * again (dbg_detach) and training goes on as if it had never attached. */
extern const dbg_frontend dbg_frontend_remote;
/* Starts the remote front end on fd (its output stream, its reader
 * thread); false with why, fd untouched. */
bool dbg_remote_open(int fd, char *why, size_t n);
/* For `tdbg attach --tui`: the pipes of a terminal far away. t->in_fd
 * gets the KEYS the client sends, what is written to t->out_fd goes to
 * it as TERM frames (a forwarder thread), RESIZE frames call resize.
 * Close both fds once the front end has its copies: the session reads
 * the end of the screen's pipe as the front end's leave. false with why. */
bool dbg_remote_term_open(dbg_term *t, void (*resize)(int rows, int cols), char *why, size_t n);
/* Waits for the screen's last bytes to go out (every copy of out_fd
 * closed) and stops the forwarder; harmless when none runs. */
void dbg_remote_term_close(void);
/* A front end is attached. */
bool dbg_remote_on(void);
/* Why the client is gone (BYE, closed, malformed), NULL while it is there. */
const char *dbg_remote_gone(void);
/* Sends END why (when the client can still read it), stops the reader,
 * closes the fd and tells the engine (te_listen_detached). */
void dbg_remote_close(const char *why);
/* Ends an attached session: the session's hooks, breakpoints, observed
 * tensors, dump, profile and recording go, END why goes to the client,
 * the state is reset for the next attach. Training resumes when the
 * caller returns. attach.c. */
void dbg_detach(const char *why);
/* At an op or step boundary: detaches when the client is gone (true). */
bool dbg_detach_if_gone(void);
/* Back to a session never started (keeps the ops' arrays). session.c. */
/* The session's tables (ops, last step's ops, trends), allocated the first
 * time and kept across attaches; false when out of memory. */
bool dbg_session_tables(void);
/* Adds the session's hook (every dbg_on_* callback) to the engine:
 * dbg.hook, or -1 with te_error() set. */
int dbg_session_hook_add(void);
void dbg_session_reset(void);
/* What detach takes away, by their modules. */
void dbg_breaks_clear(void);
void dbg_trends_clear(void);
void dbg_prof_detach(void);
void dbg_record_detach(bool was_recording);

/* ---- mixed precision (amp.c) ------------------------------------------------
 * What the debugger keeps of the loss scaler across steps, for `info amp`
 * and `break skip`: the scale's changes and every skipped step with its
 * reason. Fed from the session's hooks. */
#define DBG_AMP_OP "amp/unscale"   /* the scaler's op record: found_inf is known there */
#define DBG_AMP_MAX_HISTORY 256    /* scale changes kept (the newest) */
#define DBG_AMP_MAX_SKIPS 256      /* skipped steps kept (the newest) */
typedef struct dbg_amp_skip {
    int64_t step;
    float scale;                    /* the scale of that step's loss */
    char param[TE_NAME_MAX];        /* whose gradient went non-finite first */
    char op[TE_NAME_MAX];           /* the first backward op creating a non-finite value, else the
                                     * forward one; "" unknown */
    bool backward;                  /* op is the backward's */
    char tensor[TE_NAME_MAX];       /* the tensor it is in */
} dbg_amp_skip;
typedef struct dbg_amp_change {
    int64_t step;                   /* the first step with this scale */
    float scale;
} dbg_amp_change;
void dbg_amp_step_begin(int64_t step);
void dbg_amp_step_end(int64_t step);
/* Every op record: the first forward and the first backward op of the
 * step creating a non-finite value are noted while track is set (`break
 * skip` armed). */
void dbg_amp_op(const te_op_record *r, bool track);
/* That op of this step's backward (else forward) pass and its tensor;
 * false when none was seen. */
bool dbg_amp_first_bad(bool backward, const char **op, const char **tensor);
/* The history, oldest first; returns how many (*total: ever, when more
 * were than are kept). */
int dbg_amp_changes(const dbg_amp_change **c, int64_t *total);
int dbg_amp_skips(const dbg_amp_skip **s, int64_t *total);
void dbg_amp_reset(void);

/* The hooks plugin.c attaches, and its SIGINT handler. */
void dbg_on_step_begin(int64_t step, void *user);
/* The last finished step's wall time less its time stopped at the prompt;
 * -1 before one finished. */
double dbg_last_step_ms(void);
void dbg_on_step_end(int64_t step, void *user);
void dbg_on_phase(int64_t step, te_phase p, void *user);
void dbg_on_op_end(const te_op_record *r, void *user);
void dbg_on_batch(const te_batch *b, void *user);
void dbg_on_waiting(const te_op_record *rec, void *user);
void dbg_on_op_failed(const te_op_record *rec, te_status code, const char *message, void *user);
void dbg_on_sigint(int sig);

/* ---- which sample did it (provenance.c, cmd_data.c) -------------------------
 * The batches the engine published (te_batch_*): which rows of a batch
 * tensor hold bad values (non-finite floats, labels outside the dataset's
 * classes), and the lines that name them by row, sample and source. */
/* The rows of t, a batch's x or y, holding bad values: the first max into
 * rows; returns how many there are in all. */
int64_t dbg_batch_bad_rows(const te_batch *b, const te_tensor *t, int64_t *rows, int max);
/* "row 5: sample 1234, data.csv:77 (byte 2231)" for each of rows, indented. */
void dbg_describe_rows(const te_batch *b, const int64_t *rows, int n, int64_t total);
/* A stop's sample: the first batch tensor among rec's inputs and reads
 * holding bad values (or, with t given, t's batch), into s. */
void dbg_stop_sample(dbg_stop *s, const te_op_record *rec, const te_tensor *t);
/* `break data if CHECKS`: the checks (nonfinite, label, empty, constant,
 * max > N, min < N, abs_max > N, joined by `or`; empty text: the first
 * four) into c, or false with err. Their text back, canonical, into buf. */
bool dbg_data_check_parse(const char *text, te_data_check *c, char *err, size_t n);
void dbg_data_check_text(const te_data_check *c, char *buf, size_t n);
/* The union of the enabled data breakpoints' checks, for the engine. */
void dbg_data_checks_changed(void);
/* `info batch`. */
void dbg_info_batch(void);

/* ---- time travel (cmd_record.c) -------------------------------------------
 * Recording starts at the engine's defaults when the debugger starts and
 * stops at the first step when the program does not take part. The
 * engine's rewound, diverged and located hooks; a step's begin asks what a
 * rewind's arrival does: a stop's reason (rewind, reverse-next, replay),
 * NULL for none (reverse-step sets the session to step to its op). */
void dbg_record_setup(void);
void dbg_on_rewound(int64_t step, void *user);
void dbg_on_diverged(int64_t step, double recorded_loss, double replayed_loss, uint64_t recorded_sum,
                     uint64_t replayed_sum, void *user);
void dbg_on_located(const te_record_located *r, void *user);
const char *dbg_record_step_begin(int64_t step);

/* The command loop: returns when a command resumes training. */
void dbg_command_loop(void);
/* Runs one command line; returns true when training should resume. */
bool dbg_execute(const char *line);
/* Reads the next command line (the script's, else the front end's); NULL at the end. */
char *dbg_read_line(const char *prompt);
/* The -x/-ex commands the launcher passed in TDBG_SCRIPT (or an attached
 * TUI's client sent), run first; and those left over at the end, named
 * with why they did not run, and freed. cli.c. */
void dbg_script_load(void);
bool dbg_script_add(const char *line, size_t n);
void dbg_script_free(const char *why);

/* Did an op of this step produce t (an output of a recorded op)? */
bool dbg_made_this_step(const te_tensor *t);
/* The dump the debugger runs (cmd_dump.c): is one running; start one from
 * spec text (one running is replaced), saying it writes from step `from`;
 * stop it, saying what it wrote. false after an error printed (what names
 * the command). */
bool dbg_dump_running(void);
bool dbg_dump_begin(const char *spec, int64_t from);
bool dbg_dump_off(const char *what);
/* Training stopped: a flight-recorder dump (when=break) writes its steps. */
void dbg_dump_stopped(void);
/* Training stopped, at a breakpoint's hit or not: a profile the debugger
 * started with when=break writes its ring (cmd_prof.c). */
void dbg_prof_stopped(bool by_breakpoint);
/* A step begins: notes a profile the engine ended after its range. */
void dbg_prof_step_begin(void);
/* Removes breakpoint id if it still exists (a tbreak after its hit). */
void dbg_break_remove(int id);
/* Breakpoints changed: keeps the engine observing what they need. */
void dbg_breaks_changed(void);

/* Tensors by the names users type: "OP:out0", "OP:in1", "param:NAME",
 * "grad:NAME". NULL with err naming what is wrong (and a suggestion). */
const te_tensor *dbg_tensor_find(const char *name, char *err, size_t errlen);
/* "examples/mlp.c" for a build's absolute source path. */
const char *dbg_short_path(const char *file);
/* The names of this step's and the last step's ops into names (room for
 * 2 * DBG_MAX_OPS); returns how many. */
int dbg_op_names(const char **names);
/* An op of the current (else the last) step by exact name. */
const dbg_op *dbg_op_find(const char *name);
/* A tensor's statistics history, made on first use. */
dbg_trend *dbg_trend_get(const char *name, bool create);
void dbg_trend_add(const char *name, int64_t step, const te_stats *s);

/* Command output goes here: stdout, unless a front end (the TUI) set
 * dbg_out_stream to a stream of its own. */
extern FILE *dbg_out_stream;
#define dbg_out (dbg_out_stream ? dbg_out_stream : stdout)
void dbg_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The CLI's readline completion (commands, then op and tensor names) and
 * its history file, for a front end that drives readline itself: set up
 * by dbg_readline_setup() (word breaks, ~/.tdbg_history). */
void dbg_readline_setup(void);
char **dbg_complete(const char *text, int start, int end);
void dbg_history_add(const char *line);

#endif
