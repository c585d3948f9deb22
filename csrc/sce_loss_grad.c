/* SoftmaxCrossEntropyLossGrad: d_logits[n, c, d] = s[n, d] * (exp(log_prob[n, c, d]) - (c == label[n, d])),
 * with s = dY * w (none: dY per element; sum: the scalar dY), divided by W, the sum of the weights of the
 * elements not ignored, for mean; w = weight[label] (1 without weight). An ignored element's row is a select
 * of 0, never 0 * dY, so NaN or inf in dY or 0/0 in mean (every element ignored) never reach it.
 *
 * Every label is checked before anything is read through it: one outside [0, C) that is not ignore_index
 * fails the call with OPC_ERR_INVALID_ARGUMENT. The label pass, W (summed in double, in element order) and
 * the per-element scales run serially before the one parallel region, whose blocks come from the shapes
 * only; each output element goes through the same expression whatever the split, so results are bitwise
 * the same at any thread count. float32 and float64; float16 and bfloat16 widened to float32, rounded once. */
#include <omp.h>
#include <stdlib.h>

#include "half_blocks.h"
#include "call.h"
#include "vmath.h"

enum { SCE_NONE, SCE_SUM, SCE_MEAN };

typedef struct {
    int32_t dtype, label_dtype, reduction;
    bool has_weight, has_ignore, internal;
    int64_t ignore_index;
    int64_t n, c, d; /* log_prob as [N, C, D], D the product of the dims after the class axis */
} sce_plan;

/* internal: SoftmaxCrossEntropyLossInternalGrad, ignore_index the optional int64 scalar input 4 (read when the call
 * runs: sce_resolve) and an output_type attribute that must name the inputs' type (no mixed precision here) */
static int32_t prep_sce(opc_call *c, sce_plan *p, opc_shape *outs, bool internal) {
    int32_t s;
    if ((s = opc_require(c, 0)) || (s = opc_require(c, 1)) || (s = opc_require(c, 2))) return s;
    const opc_tensor *dy = c->in[0], *lp = c->in[1], *label = c->in[2], *w = c->in[3];
    static const int32_t FLOATS[] = {1, 0, 3};
    if ((s = opc_check_supported_dtype(c, lp->dtype)) || (s = opc_check_dtypes(c, lp->dtype, FLOATS, 3))) return s;
    if (label->dtype != OPC_INT32 && label->dtype != OPC_INT64)
        return opc_fail(c, OPC_ERR_UNSUPPORTED_DTYPE, "label has dtype %s; it must be int32 or int64",
                        opc_dtype_name(label->dtype));
    const char *reduction;
    if ((s = opc_attr_string(c, "reduction", "mean", &reduction))) return s;
    if (strcmp(reduction, "none") == 0) p->reduction = SCE_NONE;
    else if (strcmp(reduction, "sum") == 0) p->reduction = SCE_SUM;
    else if (strcmp(reduction, "mean") == 0) p->reduction = SCE_MEAN;
    else return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "reduction '%s' is not none, sum or mean", reduction);
    p->internal = internal;
    if (internal) {
        const opc_tensor *ii = c->in[4];
        p->has_ignore = ii != NULL;
        p->ignore_index = 0;
        if (ii && (ii->dtype != OPC_INT64 || ii->rank != 0))
            return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "ignore_index must be an int64 scalar, got %s of rank %d",
                            opc_dtype_name(ii->dtype), (int)ii->rank);
        int64_t out_type;
        if (opc_attr_get(c, "output_type")) {
            if ((s = opc_attr_int(c, "output_type", 0, &out_type))) return s;
            if (out_type != lp->dtype)
                return opc_fail(c, OPC_ERR_UNSUPPORTED_DTYPE, "output_type %lld differs from the inputs' %s: mixed "
                                "precision is not implemented", (long long)out_type, opc_dtype_name(lp->dtype));
        }
    } else {
        const opc_attr *ignore = opc_attr_get(c, "ignore_index");
        p->has_ignore = ignore != NULL;
        if (ignore && (s = opc_attr_int(c, "ignore_index", 0, &p->ignore_index))) return s;
    }

    char a[200], b[200];
    if (lp->rank < 2)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "log_prob has shape %s; it must be [N, C, d1..dk] (rank >= 2)",
                        opc_shape_str(lp, a, sizeof a));
    bool fits = label->rank == lp->rank - 1 && label->shape[0] == lp->shape[0];
    for (int32_t i = 1; fits && i < label->rank; i++) fits = label->shape[i] == lp->shape[i + 1];
    if (!fits)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "label shape %s is not log_prob shape %s without axis 1",
                        opc_shape_str(label, a, sizeof a), opc_shape_str(lp, b, sizeof b));
    if (w && (w->rank != 1 || w->shape[0] != lp->shape[1]))
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "weight shape %s is not [C] = [%lld]", opc_shape_str(w, a, sizeof a),
                        (long long)lp->shape[1]);
    if (p->reduction == SCE_NONE ? !opc_same_shape(dy, label) : dy->rank != 0)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "dY shape %s must be %s for reduction %s",
                        opc_shape_str(dy, a, sizeof a), p->reduction == SCE_NONE ? opc_shape_str(label, b, sizeof b) : "[]",
                        reduction);
    p->dtype = lp->dtype;
    p->label_dtype = label->dtype;
    p->has_weight = w != NULL;
    p->n = lp->shape[0];
    p->c = lp->shape[1];
    p->d = 1;
    for (int32_t i = 2; i < lp->rank; i++) p->d *= lp->shape[i];
    opc_shape_from(&outs[0], lp);
    return OPC_OK;
}

int32_t opc_prep_sce_loss_grad(opc_call *c, void *plan_v, opc_shape *outs) { return prep_sce(c, plan_v, outs, false); }
int32_t opc_prep_sce_internal_grad(opc_call *c, void *plan_v, opc_shape *outs) { return prep_sce(c, plan_v, outs, true); }

/* the plan with ignore_index read from the Internal op's input */
static sce_plan sce_resolve(const opc_call *c, const sce_plan *p) {
    sce_plan q = *p;
    if (q.internal && q.has_ignore) q.ignore_index = *(const int64_t *)c->in[4]->data;
    return q;
}

/* ---- values as double ------------------------------------------------------------------------ */

static double float_at(int32_t dtype, const void *data, int64_t i) {
    switch (dtype) {
    case OPC_FLOAT: return ((const float *)data)[i];
    case OPC_DOUBLE: return ((const double *)data)[i];
    case OPC_FLOAT16: return opc_f16_to_f32(((const uint16_t *)data)[i]);
    default: return opc_bf16_to_f32(((const uint16_t *)data)[i]);
    }
}

static int64_t label_at(int32_t dtype, const void *data, int64_t i) {
    return dtype == OPC_INT32 ? ((const int32_t *)data)[i] : ((const int64_t *)data)[i];
}

/* ---- row kernels: out = keep ? s * exp(lp) : 0 ------------------------------------------------ */

/* D == 1: one scale for the C entries of a row */
CLONES static void row_f32(const float *restrict lp, float *restrict out, int64_t n, float s) {
    for (int64_t i = 0; i < n; i++) out[i] = s * opc_expf(lp[i]); /* simd: 1 */
}
/* D > 1: one class, D consecutive elements, a scale and a keep flag each */
CLONES static void col_f32(const float *restrict lp, float *restrict out, int64_t n, const float *restrict s,
                           const uint8_t *restrict keep) {
    for (int64_t i = 0; i < n; i++) { /* simd: 1 */
        float v = s[i] * opc_expf(lp[i]);
        out[i] = keep[i] ? v : 0.0f;
    }
}
static void row_f64(const double *restrict lp, double *restrict out, int64_t n, double s) {
    for (int64_t i = 0; i < n; i++) out[i] = s * exp(lp[i]);
}
static void col_f64(const double *restrict lp, double *restrict out, int64_t n, const double *restrict s,
                    const uint8_t *restrict keep) {
    for (int64_t i = 0; i < n; i++) {
        double v = s[i] * exp(lp[i]);
        out[i] = keep[i] ? v : 0.0;
    }
}

/* 16-bit types go through the float32 kernel in blocks of this many elements (half_blocks.h); along D > 1
 * the work items are (n, block) pairs of the same length */
#define SCE_BLOCK 512

/* ---- one block: element rows [m0, m1) of one n when D > 1, or whole rows n in [m0, m1) when D == 1 ---- */

typedef struct {
    const sce_plan *p;
    const void *lp, *label;
    void *out;
    const float *sf;  /* per-element scale (float32 and 16-bit types), 0 where ignored */
    const double *sd; /* per-element scale (float64) */
    const uint8_t *keep;
} sce_args;

/* The label entry: s * (exp(lp) - 1), the same exp as the vector loop (bitwise, -ffp-contract=off) */
static void fix_label_f32(float *out, const float *lp, float s) { *out = s * (opc_expf(*lp) - 1.0f); }

static void block_rows(const sce_args *a, int64_t r0, int64_t r1) { /* D == 1 */
    const sce_plan *p = a->p;
    int64_t C = p->c;
    bool half = p->dtype == OPC_FLOAT16 || p->dtype == OPC_BFLOAT16, bf16 = p->dtype == OPC_BFLOAT16;
    size_t es = opc_dtype_size(p->dtype);
    for (int64_t r = r0; r < r1; r++) {
        char *out = (char *)a->out + (size_t)(r * C) * es;
        if (!a->keep[r]) {
            memset(out, 0, (size_t)C * es);
            continue;
        }
        int64_t t = label_at(p->label_dtype, a->label, r);
        const char *lp = (const char *)a->lp + (size_t)(r * C) * es;
        if (p->dtype == OPC_DOUBLE) {
            row_f64((const double *)lp, (double *)out, C, a->sd[r]);
            ((double *)out)[t] = a->sd[r] * (exp(((const double *)lp)[t]) - 1.0);
        } else if (!half) {
            row_f32((const float *)lp, (float *)out, C, a->sf[r]);
            fix_label_f32((float *)out + t, (const float *)lp + t, a->sf[r]);
        } else {
            float g[SCE_BLOCK], o[SCE_BLOCK];
            for (int64_t j = 0; j < C; j += SCE_BLOCK) {
                int64_t k = C - j < SCE_BLOCK ? C - j : SCE_BLOCK;
                widen_half(bf16, (const uint16_t *)lp + j, g, k);
                row_f32(g, o, k, a->sf[r]);
                if (t >= j && t < j + k) fix_label_f32(o + (t - j), g + (t - j), a->sf[r]);
                narrow_half(bf16, o, (uint16_t *)out + j, k);
            }
        }
    }
}

static void block_cols(const sce_args *a, int64_t n, int64_t d0, int64_t d1) { /* D > 1: elements (n, d0..d1) */
    const sce_plan *p = a->p;
    int64_t C = p->c, D = p->d, k = d1 - d0, m0 = n * D + d0;
    bool half = p->dtype == OPC_FLOAT16 || p->dtype == OPC_BFLOAT16, bf16 = p->dtype == OPC_BFLOAT16;
    size_t es = opc_dtype_size(p->dtype);
    float g[SCE_BLOCK], o[SCE_BLOCK];
    for (int64_t cl = 0; cl < C; cl++) {
        size_t at = (size_t)((n * C + cl) * D + d0);
        const char *lp = (const char *)a->lp + at * es;
        char *out = (char *)a->out + at * es;
        if (p->dtype == OPC_DOUBLE) col_f64((const double *)lp, (double *)out, k, a->sd + m0, a->keep + m0);
        else if (!half) col_f32((const float *)lp, (float *)out, k, a->sf + m0, a->keep + m0);
        else { /* k <= SCE_BLOCK: the caller's blocks are that long at most */
            widen_half(bf16, (const uint16_t *)lp, g, k);
            col_f32(g, o, k, a->sf + m0, a->keep + m0);
            for (int64_t i = 0; i < k; i++) {
                int64_t m = m0 + i;
                if (a->keep[m] && label_at(p->label_dtype, a->label, m) == cl) fix_label_f32(o + i, g + i, a->sf[m]);
            }
            narrow_half(bf16, o, (uint16_t *)out, k);
        }
    }
    if (half) return;
    for (int64_t i = 0; i < k; i++) { /* the label entries */
        int64_t m = m0 + i;
        if (!a->keep[m]) continue;
        size_t at = (size_t)((n * C + label_at(p->label_dtype, a->label, m)) * D + d0 + i);
        if (p->dtype == OPC_DOUBLE)
            ((double *)a->out)[at] = a->sd[m] * (exp(((const double *)a->lp)[at]) - 1.0);
        else
            fix_label_f32((float *)a->out + at, (const float *)a->lp + at, a->sf[m]);
    }
}

/* Every label in [0, C) or ignore_index. */
int32_t opc_check_sce_loss_grad(opc_call *c, const void *plan_v) {
    const sce_plan q = sce_resolve(c, plan_v), *p = &q;
    const void *label = c->in[2]->data;
    int64_t at = opc_first_outside(label, p->label_dtype, p->n * p->d, 0, p->c, p->has_ignore, p->ignore_index,
                                   c->threads);
    if (at < 0) return OPC_OK;
    return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "label %lld at element %lld is outside [0, %lld)%s",
                    (long long)label_at(p->label_dtype, label, at), (long long)at, (long long)p->c,
                    p->has_ignore ? " and not ignore_index" : " (no ignore_index given)");
}

int32_t opc_exec_sce_loss_grad(opc_call *c, const void *plan_v, opc_tensor *outs) {
    const sce_plan q = sce_resolve(c, plan_v), *p = &q;
    int64_t M = p->n * p->d, C = p->c;
    if (!outs[0].data || M == 0) return OPC_OK; /* with C = 0 the labels are still checked: none can be a class */
    const void *dy = c->in[0]->data, *label = c->in[2]->data, *w = p->has_weight ? c->in[3]->data : NULL;

    /* labels checked (an offender gets the error a call without outputs gets), W summed in element order
     * (double), before any thread starts */
    double W = 0.0;
    for (int64_t m = 0; m < M; m++) {
        int64_t t = label_at(p->label_dtype, label, m);
        if (p->has_ignore && t == p->ignore_index) continue;
        if (t < 0 || t >= C) {
            int32_t s = opc_check_sce_loss_grad(c, plan_v); /* resolves ignore_index again */
            return s ? s : opc_fail(c, OPC_ERR_INTERNAL, "a label was out of range but none is on a second look");
        }
        W += w ? float_at(p->dtype, w, t) : 1.0;
    }
    if (C == 0) return OPC_OK; /* every label ignored: nothing to write */
    bool f64 = p->dtype == OPC_DOUBLE;
    uint8_t *keep = malloc((size_t)M);
    void *scale = malloc((size_t)M * (f64 ? sizeof(double) : sizeof(float)));
    if (!keep || !scale) {
        free(keep);
        free(scale);
        return opc_fail(c, OPC_ERR_OUT_OF_MEMORY, "no memory for %lld per-element scales", (long long)M);
    }
    double dy0 = p->reduction == SCE_NONE ? 0.0 : float_at(p->dtype, dy, 0);
    for (int64_t m = 0; m < M; m++) {
        int64_t t = label_at(p->label_dtype, label, m);
        keep[m] = !(p->has_ignore && t == p->ignore_index);
        double s = 0.0;
        if (keep[m]) {
            s = (p->reduction == SCE_NONE ? float_at(p->dtype, dy, m) : dy0) * (w ? float_at(p->dtype, w, t) : 1.0);
            if (p->reduction == SCE_MEAN) s /= W; /* W = 0 here: 0/0 or x/0, as the loss */
        }
        if (f64) ((double *)scale)[m] = s;
        else ((float *)scale)[m] = (float)s;
    }
    sce_args a = {p, c->in[1]->data, label, outs[0].data, f64 ? NULL : scale, f64 ? scale : NULL, keep};

    /* work items: whole rows (D == 1) or (n, block of SCE_BLOCK elements along D) */
    int64_t per_n = p->d == 1 ? 1 : (p->d + SCE_BLOCK - 1) / SCE_BLOCK;
    int64_t items = p->d == 1 ? p->n : p->n * per_n;
    int64_t want = M * C / opc_grain(32768) + 1; /* below ~32k elements a thread costs more than it saves */
    int nt = (int)(want < c->threads ? want : c->threads);
    if (nt > items) nt = (int)items;
#pragma omp parallel num_threads(nt > 1 ? nt : 1)
    {
        int64_t lo, hi;
        opc_split(items, omp_get_num_threads(), omp_get_thread_num(), 1, &lo, &hi);
        if (p->d == 1) block_rows(&a, lo, hi);
        else
            for (int64_t it = lo; it < hi; it++) {
                int64_t n = it / per_n, d0 = (it % per_n) * SCE_BLOCK;
                block_cols(&a, n, d0, d0 + SCE_BLOCK < p->d ? d0 + SCE_BLOCK : p->d);
            }
    }
    free(keep);
    free(scale);
    return OPC_OK;
}

/* ---- registry entries (listed in ops.def; held against the specs by tests/openmp/test_descriptors.py) ---- */

/* label int32 or int64; 16-bit types computed in float32 */
static const int32_t DT_SCE[] = {OPC_FLOAT, OPC_DOUBLE, OPC_FLOAT16, OPC_BFLOAT16};
static const char *const SCE_IN[] = {"dY", "log_prob", "label", "weight"};
static const uint8_t SCE_OPT[] = {0, 0, 0, 1};
static const char *const SCE_OUT[] = {"d_logits"};
static const char *const SCE_ATTR[] = {"reduction", "ignore_index"};

OPC_DEFINE_OP(SoftmaxCrossEntropyLossGrad) = {
    .desc = {.name = "SoftmaxCrossEntropyLossGrad", OPC_INPUTS(SCE_IN, SCE_OPT), OPC_OUTPUTS(SCE_OUT),
             OPC_DTYPES(DT_SCE), OPC_ATTRS(SCE_ATTR),
             .notes = "log_prob [N, C, d1..dk], label [N, d1..dk] each in [0, C) or ignore_index (checked), weight "
                      "[C]; reduction none, sum or mean (default); mean's weight sum in double, in element order"},
    .prepare = opc_prep_sce_loss_grad, .exec = opc_exec_sce_loss_grad, .check = opc_check_sce_loss_grad};

static const char *const SCEI_IN[] = {"dY", "log_prob", "label", "weight", "ignore_index"};
static const uint8_t SCEI_OPT[] = {0, 0, 0, 1, 1};
static const char *const SCEI_ATTR[] = {"reduction", "output_type"};

OPC_DEFINE_OP(SoftmaxCrossEntropyLossInternalGrad) = {
    .desc = {.name = "SoftmaxCrossEntropyLossInternalGrad", OPC_INPUTS(SCEI_IN, SCEI_OPT), OPC_OUTPUTS(SCE_OUT),
             OPC_DTYPES(DT_SCE), OPC_ATTRS(SCEI_ATTR),
             .notes = "SoftmaxCrossEntropyLossGrad with ignore_index an optional int64 scalar input (absent: none "
                      "ignored); output_type, when given, must name the inputs' type; the schema's bias input is not "
                      "taken (no spec input)"},
    .prepare = opc_prep_sce_internal_grad, .exec = opc_exec_sce_loss_grad, .check = opc_check_sce_loss_grad};
