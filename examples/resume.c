/*
 * resume.c — the examples' checkpoints: --load read before the engine
 * starts (the seed is the file's) and applied before the first step,
 * --save and --save-every written at step boundaries (checkpoint.h has the
 * format). What a resumed step depends on, and where each part lives:
 *
 *   parameters, batch norm's statistics,     the file's /params, /buffers,
 *   optimizer state and steps, loss scaler   /optim, /scaler (ckpt_load)
 *   the step number (keys dropout, inject)   te_step_resume(/step)
 *   the RNG                                  counter-based: /rng/seed alone
 *   the data                                 /data/position: the loop's own
 *                                            (ex_train seeks its loader there)
 *   the loop's host state                    its step and data position;
 *                                            the learning rate is a function
 *                                            of the step and the flags
 */
#include "common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const ex_program *prog;

static _Noreturn void refuse(const char *why)
{
    fprintf(stderr, "%s: %s\n", prog->name, why);
    exit(2);
}

int ex_last_step(const ex_opts *o) { return o->stop_at && o->stop_at < o->steps ? o->stop_at : o->steps; }

ckpt_model ex_ckpt_model(const ex_opts *o, te_optim *opt, te_tensor *const *buffers, int n_buffers,
                         ckpt_attr *attrs)
{
    return (ckpt_model){ .program = prog->name, .attrs = attrs,
                         .n_attrs = prog->ckpt_attrs ? prog->ckpt_attrs(prog->cfg, o, attrs) : 0,
                         .opt = opt, .optim_kind = ex_optim_name(o), .buffers = buffers,
                         .n_buffers = n_buffers };
}

int ex_loader_attrs(const ex_opts *o, ckpt_attr *out)
{
    out[0] = (ckpt_attr){ "batch", "--batch", o->batch, NULL };
    out[1] = (ckpt_attr){ "train_size", "--train-size", o->train_size, NULL };
    return 2;
}

void ex_resume_read(const ex_program *p, ex_opts *o)
{
    prog = p;
    if (!o->load)
        return;
    char why[1536];
    ckpt_attr attrs[EX_MAX_CKPT_ATTRS];
    const ckpt_model m = ex_ckpt_model(o, NULL, NULL, 0, attrs);
    if (!ckpt_read_info(o->load, &m, &o->resume, why, sizeof why))
        refuse(why);
    if (o->resume.step >= o->steps) {
        snprintf(why, sizeof why, "checkpoint %s is at step %lld: nothing left of --steps %d", o->load,
                 (long long)o->resume.step, o->steps);
        refuse(why);
    }
    if (o->stop_at && o->stop_at <= o->resume.step) {
        snprintf(why, sizeof why, "checkpoint %s is at step %lld: --stop-at %d is behind it", o->load,
                 (long long)o->resume.step, o->stop_at);
        refuse(why);
    }
    o->seed = o->resume.seed; /* the RNG's state: init, dropout masks, data order and windows */
}

int ex_resume(const ex_opts *o, const ckpt_model *m)
{
    char why[1536];
    if (!ckpt_load(o->load, m, why, sizeof why)) {
        fprintf(stderr, "%s: %s\n", prog->name, why);
        return 2;
    }
    if (te_step_resume(o->resume.step) != TE_OK)
        return ex_fail("cannot resume");
    printf("resumed: %s at step %lld, data position %lld\n", o->load, (long long)o->resume.step,
           (long long)o->resume.data_position);
    return 0;
}

bool ex_save_due(const ex_opts *o, int done)
{
    return o->save && o->save_every > 0 && done % o->save_every == 0 && done < ex_last_step(o);
}

static int save_to(const char *file, const ckpt_model *m, const ckpt_info *info)
{
    char why[1536];
    if (!ckpt_save(file, m, info, why, sizeof why)) {
        fprintf(stderr, "%s: %s\n", prog->name, why);
        return 2;
    }
    printf("saved: %s at step %lld\n", file, (long long)info->step);
    fflush(stdout); /* said, whatever happens next */
    return 0;
}

int ex_save(const ex_opts *o, const ckpt_model *m, const ckpt_info *info) { return save_to(o->save, m, info); }

void ex_save_requested(const ckpt_model *m, const ckpt_info *info)
{
    char file[4096];
    if (te_checkpoint_take(file, sizeof file))
        save_to(file, m, info); /* a failure is said; training goes on */
}
