/* diff_lowp.c — where a low-precision run leaves rounding: each forward op
 * of the f16/bf16 run is recomputed in f32 from that run's own dumped
 * inputs (cast up) with the engine's public ops, and its dumped output is
 * compared with the recomputation. An op whose output is further from it
 * than one rounding of its output dtype (0.5 ulp) plus DIFF_LOWP_SLACK
 * diverges here; one within it only carries rounding forward, whatever the
 * other run says (docs/diff.md, "Across precisions"). */
#include "diff.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool is_low(te_dtype t) { return t == TE_F16 || t == TE_BF16; }

static bool amp_on(const diff_side *s)
{
    return s->has_run && s->meta.amp_level[0] && strcmp(s->meta.amp_level, "O0") != 0;
}

void diff_lowp_init(diff_lowp *lp, const diff_side *a, const diff_side *b)
{
    memset(lp, 0, sizeof *lp);
    lp->low = amp_on(b) && !amp_on(a) ? 1 : amp_on(a) && !amp_on(b) ? 0 : -1;
    lp->side = lp->low == 0 ? a : lp->low == 1 ? b : NULL;
    if (lp->side)
        snprintf(lp->level, sizeof lp->level, "%s %s", lp->side->meta.amp_level,
                 lp->side->meta.amp_dtype);
}

/* The op's row in the low side's run.h5 (forward), or NULL. */
static const dump_op_row *op_row(const diff_side *s, const char *op)
{
    for (int i = 0; i < s->n_ops; i++)
        if (s->ops[i].phase == TE_PHASE_FORWARD && strcmp(s->ops[i].name, op) == 0)
            return &s->ops[i];
    return NULL;
}

/* "key=value" of an attrs text, as a number; def when absent. */
static double attr(const char *attrs, const char *key, double def)
{
    const size_t n = strlen(key);
    for (const char *p = attrs; p && *p; p = strchr(p, ' '), p = p ? p + 1 : NULL)
        if (strncmp(p, key, n) == 0 && p[n] == '=')
            return strtod(p + n + 1, NULL);
    return def;
}

/* Input slot k of op in the step file as an f32 tensor (i32 stays i32), or
 * NULL; persistent (te_tensor_free it) when keep: batch norm's running
 * statistics must outlive the tape. */
static te_tensor *load(dump_step_reader *r, const char *op, int k, bool keep, char *why, size_t n)
{
    char path[DUMP_PATH_MAX];
    int i = dump_tensor_path(op, DUMP_IN, k, path, sizeof path) ? dump_step_find(r, path) : -1;
    if (i < 0)
        return NULL;
    const dump_tensor_info *ti = dump_step_tensor(r, i);
    const te_dtype dt = ti->dtype == TE_I32 ? TE_I32 : TE_F32;
    te_tensor *t = keep ? te_tensor_persistent(dt, ti->ndim, ti->shape)
                        : te_tensor_new(dt, ti->ndim, ti->shape);
    float *v = t ? malloc((size_t)(ti->numel ? ti->numel : 1) * sizeof *v) : NULL;
    bool ok = v && dump_step_read_f32(r, i, v, why, n);
    if (ok && ti->dtype == TE_I32) /* in place: an int32_t is a float's size */
        for (int64_t j = 0; j < ti->numel; j++)
            ((int32_t *)v)[j] = (int32_t)v[j];
    if (ok && ti->numel && te_tensor_write(t, 0, ti->numel, v) != TE_OK) {
        snprintf(why, n, "%s", te_error());
        ok = false;
    }
    free(v);
    if (!ok && keep)
        te_tensor_free(t);
    return ok ? t : NULL;
}

/* The op of type rebuilt on f32 inputs in[0..n_in), out the dumped output
 * (its shape for Reshape). NULL with *skip set to why when the type is not
 * rebuilt. */
static te_tensor *rebuild(const char *type, const char *at, te_tensor **in, int n_in,
                          const dump_tensor_info *out, const char **skip)
{
    te_loc l = { "tdbg-diff", 0 };
    te_tensor *x = in[0], *y = n_in > 1 ? in[1] : NULL, *z = n_in > 2 ? in[2] : NULL;
    const int axis = (int)attr(at, "axis", -1);
#define IS(s) (strcmp(type, s) == 0)
    if (IS("MatMul") && y)
        return te_matmul_t_at(l, x, y, attr(at, "trans_a", 0) != 0, attr(at, "trans_b", 0) != 0);
    if (IS("Linear") && y)
        return te_linear_at(l, x, y, z);
    if (IS("Conv2D") && y)
        return te_conv2d_at(l, x, y, z, (int)attr(at, "stride", 1), (int)attr(at, "pad", 0));
    if ((IS("Add") || IS("Sub") || IS("Mul") || IS("Div")) && y)
        return (IS("Add") ? te_add_at : IS("Sub") ? te_sub_at : IS("Mul") ? te_mul_at : te_div_at)(l, x, y);
    if (IS("Scale"))
        return te_scale_at(l, x, (float)attr(at, "scale", 1));
    if (IS("Relu")) return te_relu_at(l, x);
    if (IS("Gelu")) return te_gelu_at(l, x);
    if (IS("Tanh")) return te_tanh_at(l, x);
    if (IS("Sigmoid")) return te_sigmoid_at(l, x);
    if (IS("Exp")) return te_exp_at(l, x);
    if (IS("Log")) return te_log_at(l, x);
    if (IS("Sqrt")) return te_sqrt_at(l, x);
    if (IS("Softmax")) return te_softmax_at(l, x, axis);
    if (IS("LogSoftmax")) return te_log_softmax_at(l, x, axis);
    if (IS("CrossEntropy") && y) return te_cross_entropy_at(l, x, y);
    if (IS("MSE") && y) return te_mse_at(l, x, y);
    if (IS("MaxPool2D") || IS("AvgPool2D"))
        return (IS("MaxPool2D") ? te_maxpool2d_at : te_avgpool2d_at)(
            l, x, (int)attr(at, "kernel", 2), (int)attr(at, "stride", 2), (int)attr(at, "pad", 0));
    if (IS("GlobalAvgPool")) return te_global_avgpool_at(l, x);
    if (IS("LayerNorm")) return te_layernorm_at(l, x, y, z, (float)attr(at, "eps", 1e-5));
    if (IS("BatchNorm") && n_in > 4) {
        te_set_training(attr(at, "training", 1) != 0);
        return te_batchnorm_at(l, x, y, z, in[3], in[4], (float)attr(at, "momentum", 0.1),
                               (float)attr(at, "eps", 1e-5));
    }
    if (IS("Dropout")) {   /* identity unless it drew a mask: that is random */
        if (attr(at, "training", 1) == 0 || attr(at, "p", 1) == 0)
            return te_scale_at(l, x, 1);
        *skip = "random";
        return NULL;
    }
    if (IS("Reshape") || IS("Flatten")) return te_reshape_at(l, x, out->ndim, out->shape);
    if (IS("Transpose")) return te_transpose_at(l, x, (int)attr(at, "dim0", 0), (int)attr(at, "dim1", 1));
    if (IS("Sum") || IS("Mean"))
        return (IS("Sum") ? te_sum_at : te_mean_at)(l, x, (int)attr(at, "axis", TE_ALL),
                                                   attr(at, "keepdim", 0) != 0);
    if (IS("Embedding") && y) return te_embedding_at(l, x, y);
    if (IS("Cast")) return te_cast_at(l, x, TE_F32);
    if (IS("MaskedFill") && y) return te_masked_fill_at(l, x, y, (float)attr(at, "value", 0));
#undef IS
    *skip = "";
    return NULL;
}

/* The dumped output o (dtype dt) against the recomputation ref, into res:
 * the largest distance (absolute, and in ulps of dt element by element), the
 * bound, the elements beyond it and the largest distance among them in ulps
 * of dt (f32: of the slack). */
static void judge(const float *o, const float *ref, int64_t n, te_dtype dt, diff_lowp_res *res)
{
    double big = 0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(ref[i]))
            big = fmax(big, fabs(ref[i]));
    res->slack = DIFF_LOWP_SLACK * big;
    res->bound_ulp = is_low(dt) ? 0.5 : 0;
    res->max_ulp = is_low(dt) ? 0 : NAN;
    res->max_abs = res->ulp = 0;
    res->n_over = 0;
    for (int64_t i = 0; i < n; i++) {
        const double a = ref[i], b = o[i];
        if ((isnan(a) && isnan(b)) || (isinf(a) && a == b))
            continue;
        const double u = is_low(dt) ? diff_ulp_low(dt, a) : 0;
        double d = fabs(b - a);
        if (!isfinite(d)) {   /* NaN or an overflow: no rounding makes these */
            res->n_over += 1;
            res->ulp = res->max_abs = INFINITY;
            if (is_low(dt))
                res->max_ulp = INFINITY;
            continue;
        }
        res->max_abs = fmax(res->max_abs, d);
        if (u > 0)
            res->max_ulp = fmax(res->max_ulp, d / u);
        if (d > res->bound_ulp * u + res->slack) {
            res->n_over += 1;
            res->ulp = fmax(res->ulp, d / (u > 0 ? u : fmax(res->slack, 1e-45)));
        }
    }
}

/* Recomputes op (the low side's tensor infos in r) and judges its out0. */
static void recompute(diff_ctx *c, diff_lowp *lp, dump_step_reader *r, const dump_tensor_info *out,
                      diff_lowp_res *res)
{
    const dump_op_row *row = op_row(lp->side, out->op);
    const char *at = row ? row->attrs : "", *skip = NULL;
    char why[DIFF_WHY_MAX] = "";
    te_tensor *in[8] = { 0 };
    const int first_kept = strcmp(out->op_type, "BatchNorm") == 0 ? 3 : 8;   /* running stats */
    int n_in = 0;
    while (n_in < 8 && (in[n_in] = load(r, out->op, n_in, n_in >= first_kept, why, sizeof why)))
        n_in++;
    res->state = DIFF_LOWP_SKIP;
    if (why[0]) {
        diff_complain(c, DIFF_RC_SAME, "%s: recomputing %s: %s", out->path, out->op, why);
        snprintf(res->skip, sizeof res->skip, "%s: inputs unreadable", out->op_type);
    } else if (n_in == 0) {
        snprintf(res->skip, sizeof res->skip, "%s: inputs not dumped", out->op_type);
    } else if (!lp->side->meta.lists_attrs && (strcmp(out->op_type, "MatMul") == 0 ||
                                               strcmp(out->op_type, "Conv2D") == 0)) {
        snprintf(res->skip, sizeof res->skip, "%s: no attributes in run.h5", out->op_type);
    } else {
        te_tensor *ref = rebuild(out->op_type, at, in, n_in, out, &skip);
        if (!ref || ref->numel != out->numel) {
            snprintf(res->skip, sizeof res->skip, "%s%s%s", out->op_type, skip && skip[0] ? ": " : "",
                     skip ? skip : ": rebuilt with another shape");
        } else {
            float *o = malloc((size_t)(out->numel ? out->numel : 1) * sizeof *o);
            float *rf = malloc((size_t)(ref->numel ? ref->numel : 1) * sizeof *rf);
            int idx = dump_step_find(r, out->path);
            if (o && rf && idx >= 0 && dump_step_read_f32(r, idx, o, why, sizeof why)) {
                te_tensor_read_f32(ref, 0, ref->numel, rf); /* f16/bf16 widened exactly */
                judge(o, rf, out->numel, out->dtype, res);
                res->state = res->n_over ? DIFF_LOWP_OVER : DIFF_LOWP_OK;
            } else {
                snprintf(res->skip, sizeof res->skip, "%s: output unreadable", out->op_type);
            }
            free(o);
            free(rf);
        }
    }
    te_error_clear();
    te_set_training(true);
    te_tape_reset();
    for (int k = first_kept; k < n_in; k++)
        te_tensor_free(in[k]);
}

/* The low side's info of a row. */
static const dump_tensor_info *low_info(const diff_lowp *lp, const diff_row *r)
{
    return lp->low == 0 ? r->a : r->b;
}

void diff_lowp_step(diff_ctx *c, diff_lowp *lp, dump_step_reader *ra, dump_step_reader *rb,
                    diff_row *rows, int n_rows)
{
    if (lp->low < 0)
        return;
    if (!lp->engine) {
        te_init(&(te_config){ .seed = 1, .threads = 1 });
        lp->engine = true;
    }
    dump_step_reader *r = lp->low == 0 ? ra : rb;
    for (int i = 0; i < n_rows; i++) {
        const dump_tensor_info *t = low_info(lp, &rows[i]);
        if (!t || t->io != DUMP_OUT || t->slot != 0 || t->phase != TE_PHASE_FORWARD)
            continue;
        diff_lowp_op op = { .step = rows[i].step };
        diff_lowp_res *res = &op.res;
        snprintf(op.op, sizeof op.op, "%s", t->op);
        snprintf(op.type, sizeof op.type, "%s", t->op_type);
        op.dtype = t->dtype;
        recompute(c, lp, r, t, res);
        if (res->state == DIFF_LOWP_SKIP) {
            lp->n_skipped++;
            if (!strstr(lp->skipped, res->skip) && strlen(lp->skipped) + strlen(res->skip) + 3 < sizeof lp->skipped)
                snprintf(lp->skipped + strlen(lp->skipped), sizeof lp->skipped - strlen(lp->skipped),
                         "%s%s", lp->skipped[0] ? ", " : "", res->skip);
        } else {
            lp->recomputed++;
            lp->over += res->state == DIFF_LOWP_OVER;
            if (res->state == DIFF_LOWP_OVER && !lp->has_first) {
                res->first = true;
                lp->first = op;
                lp->has_first = true;
            }
        }
        /* The op's rows of this step take the verdict the recomputation gives. */
        for (int j = 0; j < n_rows; j++) {
            const dump_tensor_info *u = rows[j].info;
            if (strcmp(rows[j].op, rows[i].op) != 0 || u->phase != TE_PHASE_FORWARD)
                continue;
            rows[j].lowp = *res;
            if (u->io == DUMP_OUT && rows[j].differs && res->state == DIFF_LOWP_OK) {
                rows[j].verdict = DIFF_INHERITED;   /* it only carries rounding forward */
                rows[j].unchecked_inputs = false;
            }
            else if (u->io == DUMP_OUT && res->state == DIFF_LOWP_OVER)
                rows[j].verdict = DIFF_ROOT;
        }
    }
}

void diff_lowp_end(diff_lowp *lp)
{
    if (lp->engine)
        te_shutdown();
    lp->engine = false;
}
