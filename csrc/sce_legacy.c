/* ORT's legacy losses, the class axis LAST ([R rows, C classes]):
 *   SoftmaxCrossEntropy(logits, label dense)            -> Y, log_prob    l_r = -sum_c label[r, c] log_prob[r, c]
 *   SoftmaxCrossEntropyGrad(dY, log_prob, label dense)  -> d_logits = s_r (p sum_c label[r, c] - label[r, :])
 *   SparseSoftmaxCrossEntropy(logits, label, weight?)   -> Y, log_prob    l_i = -w_i log_prob[i, label_i]
 *   SparseSoftmaxCrossEntropyGrad(dY, log_prob, label, weight?) -> d_logits = s_i (p - onehot(label_i))
 * reduction none (one value per row), sum, or mean (/ R dense; / sum w or / R sparse).
 *
 * Numerically stable: log_prob = (x - max) - log(sum exp(x - max)), the max taken over the finite row (a row
 * whose max is +-inf or NaN shifts by 0, as the reference does). Each row is computed by one thread, its
 * reductions (max, sum of exponentials, the dense loss and label sum) in 16 lanes over the row in a fixed order
 * then the lanes in order, so a row's bits do not depend on the split; the per-row losses go to a double array
 * summed afterwards in row order (and the weights in element order), so every result is bitwise the same at
 * any thread count. Sparse labels are checked before anything is read through them: one outside [0, C) fails
 * the call with OPC_ERR_INVALID_ARGUMENT. float32 and float64. */
#include <omp.h>
#include <stdlib.h>

#include "call.h"
#include "vmath.h"

enum { LEG_NONE, LEG_SUM, LEG_MEAN };
#define LANES 16

typedef struct {
    int32_t dtype, label_dtype, reduction;
    bool sparse, grad, has_weight;
    int64_t rows, c;
} leg_plan;

/* ---- preparation ---------------------------------------------------------------------------------------- */

static int32_t parse_reduction(opc_call *c, int32_t *out) {
    const char *r;
    int32_t s;
    if ((s = opc_attr_string(c, "reduction", "mean", &r))) return s;
    if (strcmp(r, "none") == 0) *out = LEG_NONE;
    else if (strcmp(r, "sum") == 0) *out = LEG_SUM;
    else if (strcmp(r, "mean") == 0) *out = LEG_MEAN;
    else return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "reduction '%s' is not none, sum or mean", r);
    return OPC_OK;
}

/* x: logits or log_prob [.., C]; label dense (x's shape) or sparse (x's shape without C); weight label's shape */
static int32_t check_common(opc_call *c, leg_plan *p, const opc_tensor *x, const opc_tensor *label,
                            const opc_tensor *w, const char *xname) {
    char a[200], b[200];
    if (x->rank < 1)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "%s has shape %s; it must be [..., C] (rank >= 1)", xname,
                        opc_shape_str(x, a, sizeof a));
    if (p->sparse) {
        if (label->dtype != OPC_INT32 && label->dtype != OPC_INT64)
            return opc_fail(c, OPC_ERR_UNSUPPORTED_DTYPE, "label has dtype %s; it must be int32 or int64",
                            opc_dtype_name(label->dtype));
        bool fits = label->rank == x->rank - 1;
        for (int32_t i = 0; fits && i < label->rank; i++) fits = label->shape[i] == x->shape[i];
        if (!fits)
            return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "label shape %s is not %s shape %s without its last axis",
                            opc_shape_str(label, a, sizeof a), xname, opc_shape_str(x, b, sizeof b));
        if (w && !opc_same_shape(w, label))
            return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "weight shape %s is not label shape %s",
                            opc_shape_str(w, a, sizeof a), opc_shape_str(label, b, sizeof b));
    } else if (!opc_same_shape(label, x)) {
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "label shape %s is not %s shape %s",
                        opc_shape_str(label, a, sizeof a), xname, opc_shape_str(x, b, sizeof b));
    }
    p->dtype = x->dtype;
    p->label_dtype = label->dtype;
    p->has_weight = w != NULL;
    p->c = x->shape[x->rank - 1];
    p->rows = 1;
    for (int32_t i = 0; i < x->rank - 1; i++) p->rows *= x->shape[i];
    return OPC_OK;
}

static int32_t prep_forward(opc_call *c, void *plan_v, opc_shape *outs, bool sparse) {
    leg_plan *p = plan_v;
    int32_t s;
    if ((s = opc_require(c, 0)) || (s = opc_require(c, 1))) return s;
    const opc_tensor *x = c->in[0], *label = c->in[1], *w = sparse && c->n_inputs > 2 ? c->in[2] : NULL;
    static const int32_t DENSE[] = {1}, SPARSE[] = {2};
    if ((s = opc_check_supported_dtype(c, x->dtype)) ||
        (s = opc_check_dtypes(c, x->dtype, sparse ? SPARSE : DENSE, 1)))
        return s;
    p->sparse = sparse;
    p->grad = false;
    if ((s = parse_reduction(c, &p->reduction)) || (s = check_common(c, p, x, label, w, "logits"))) return s;
    outs[0].dtype = x->dtype;
    outs[0].rank = p->reduction == LEG_NONE ? x->rank - 1 : 0;
    for (int32_t i = 0; i < outs[0].rank; i++) outs[0].shape[i] = x->shape[i];
    opc_shape_from(&outs[1], x);
    return OPC_OK;
}

static int32_t prep_grad(opc_call *c, void *plan_v, opc_shape *outs, bool sparse) {
    leg_plan *p = plan_v;
    int32_t s;
    if ((s = opc_require(c, 0)) || (s = opc_require(c, 1)) || (s = opc_require(c, 2))) return s;
    const opc_tensor *dy = c->in[0], *lp = c->in[1], *label = c->in[2], *w = sparse && c->n_inputs > 3 ? c->in[3] : NULL;
    static const int32_t DENSE[] = {0, 2}, SPARSE[] = {0, 3};
    if ((s = opc_check_supported_dtype(c, lp->dtype)) || (s = opc_check_dtypes(c, lp->dtype, sparse ? SPARSE : DENSE, 2)))
        return s;
    p->sparse = sparse;
    p->grad = true;
    if ((s = parse_reduction(c, &p->reduction)) || (s = check_common(c, p, lp, label, w, "log_prob"))) return s;
    bool ok = p->reduction == LEG_NONE ? dy->rank == lp->rank - 1 : dy->rank == 0;
    for (int32_t i = 0; ok && p->reduction == LEG_NONE && i < dy->rank; i++) ok = dy->shape[i] == lp->shape[i];
    if (!ok) {
        char a[200];
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "dY shape %s must be %s for this reduction",
                        opc_shape_str(dy, a, sizeof a),
                        p->reduction == LEG_NONE ? "log_prob's shape without its last axis" : "[] (a scalar)");
    }
    opc_shape_from(&outs[0], lp);
    return OPC_OK;
}

int32_t opc_prep_sce_legacy(opc_call *c, void *p, opc_shape *o) { return prep_forward(c, p, o, false); }
int32_t opc_prep_sparse_sce(opc_call *c, void *p, opc_shape *o) { return prep_forward(c, p, o, true); }
int32_t opc_prep_sce_legacy_grad(opc_call *c, void *p, opc_shape *o) { return prep_grad(c, p, o, false); }
int32_t opc_prep_sparse_sce_grad(opc_call *c, void *p, opc_shape *o) { return prep_grad(c, p, o, true); }

/* Sparse labels in [0, C). */
static int32_t check_labels(opc_call *c, const leg_plan *p) {
    if (!p->sparse) return OPC_OK;
    const void *label = c->in[p->grad ? 2 : 1]->data;
    int64_t at = opc_first_outside(label, p->label_dtype, p->rows, 0, p->c, false, 0, c->threads);
    if (at < 0) return OPC_OK;
    return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "label %lld at element %lld is outside [0, %lld)",
                    (long long)opc_int_at(label, p->label_dtype, at), (long long)at, (long long)p->c);
}
int32_t opc_check_sce_legacy(opc_call *c, const void *plan_v) { return check_labels(c, plan_v); }

/* ---- row kernels, one per type -------------------------------------------------------------------------- */

/* fwd_row: log_prob of one row (written when lp != NULL) and its loss: dense -sum_c y lp (y != NULL), sparse
 * -lp[lab]. grad rows: dense (p * sum(y) - y) * s, sparse (p - onehot(lab)) * s. */
#define LEG_ROWS(SFX, ST, EXP, LOG)                                                                           \
    CLONES static ST rowmax_##SFX(const ST *restrict x, int64_t C) {                                         \
        ST m[LANES];                                                                                          \
        for (int j = 0; j < LANES; j++) m[j] = -INFINITY;                                                     \
        int64_t i = 0;                                                                                        \
        for (; i + LANES <= C; i += LANES)                                                                    \
            for (int j = 0; j < LANES; j++) m[j] = x[i + j] > m[j] ? x[i + j] : m[j];                         \
        for (int j = 0; i < C; i++, j++) m[j] = x[i] > m[j] ? x[i] : m[j];                                     \
        ST r = m[0];                                                                                          \
        for (int j = 1; j < LANES; j++) r = m[j] > r ? m[j] : r;                                              \
        return isfinite(r) ? r : (ST)0;                                                                       \
    }                                                                                                         \
    CLONES static ST sumexp_##SFX(const ST *restrict x, int64_t C, ST top) {                                 \
        ST a[LANES] = {0};                                                                                    \
        int64_t i = 0;                                                                                        \
        for (; i + LANES <= C; i += LANES)                                                                    \
            for (int j = 0; j < LANES; j++) a[j] += EXP(x[i + j] - top);                                      \
        for (int j = 0; i < C; i++, j++) a[j] += EXP(x[i] - top);                                             \
        ST r = a[0];                                                                                          \
        for (int j = 1; j < LANES; j++) r += a[j];                                                            \
        return r;                                                                                             \
    }                                                                                                         \
    CLONES static ST sum_##SFX(const ST *restrict y, int64_t C) {                                            \
        ST a[LANES] = {0};                                                                                    \
        int64_t i = 0;                                                                                        \
        for (; i + LANES <= C; i += LANES)                                                                    \
            for (int j = 0; j < LANES; j++) a[j] += y[i + j];                                                 \
        for (int j = 0; i < C; i++, j++) a[j] += y[i];                                                        \
        ST r = a[0];                                                                                          \
        for (int j = 1; j < LANES; j++) r += a[j];                                                            \
        return r;                                                                                             \
    }                                                                                                         \
    CLONES static void writelp_##SFX(const ST *restrict x, ST *restrict lp, int64_t C, ST top, ST lse) {     \
        for (int64_t i = 0; i < C; i++) lp[i] = (x[i] - top) - lse;                                           \
    }                                                                                                         \
    /* sum_c y (x - top - lse), lanes in order */                                                             \
    CLONES static ST dot_##SFX(const ST *restrict x, const ST *restrict y, int64_t C, ST top, ST lse) {      \
        ST a[LANES] = {0};                                                                                    \
        int64_t i = 0;                                                                                        \
        for (; i + LANES <= C; i += LANES)                                                                    \
            for (int j = 0; j < LANES; j++) a[j] += y[i + j] * ((x[i + j] - top) - lse);                      \
        for (int j = 0; i < C; i++, j++) a[j] += y[i] * ((x[i] - top) - lse);                                 \
        ST r = a[0];                                                                                          \
        for (int j = 1; j < LANES; j++) r += a[j];                                                            \
        return r;                                                                                             \
    }                                                                                                         \
    static double fwd_row_##SFX(const ST *x, const ST *y, int64_t lab, ST *lp, int64_t C) {                  \
        if (C == 0) return 0.0;                                                                               \
        ST top = rowmax_##SFX(x, C);                                                                          \
        ST lse = LOG(sumexp_##SFX(x, C, top));                                                                \
        if (lp) writelp_##SFX(x, lp, C, top, lse);                                                            \
        if (y) return -(double)dot_##SFX(x, y, C, top, lse);                                                  \
        return -(double)((x[lab] - top) - lse);                                                               \
    }                                                                                                         \
    CLONES static void grad_dense_##SFX(const ST *restrict lp, const ST *restrict y, ST *restrict out,      \
                                        int64_t C, ST s) {                                                    \
        ST ys = sum_##SFX(y, C);                                                                              \
        for (int64_t i = 0; i < C; i++) out[i] = (EXP(lp[i]) * ys - y[i]) * s;                                \
    }                                                                                                         \
    CLONES static void grad_sparse_##SFX(const ST *restrict lp, ST *restrict out, int64_t C, int64_t lab,   \
                                         ST s) {                                                              \
        for (int64_t i = 0; i < C; i++) out[i] = EXP(lp[i]) * s;                                              \
        out[lab] = (EXP(lp[lab]) - (ST)1) * s;                                                                \
    }

LEG_ROWS(f32, float, opc_expf, logf)
LEG_ROWS(f64, double, exp, log)

static double fval(int32_t dtype, const void *data, int64_t i) {
    return dtype == OPC_DOUBLE ? ((const double *)data)[i] : ((const float *)data)[i];
}

/* threads for rows x C elements of work: below ~32k elements a thread costs more than it saves */
static int leg_threads(const opc_call *c, const leg_plan *p) {
    int64_t want = p->rows * (p->c ? p->c : 1) / opc_grain(32768) + 1;
    if (want > p->rows) want = p->rows;
    int nt = (int)(want < c->threads ? want : c->threads);
    return nt > 1 ? nt : 1;
}

/* ---- forward -------------------------------------------------------------------------------------------- */

static int32_t exec_forward(opc_call *c, const void *plan_v, opc_tensor *outs) {
    const leg_plan *p = plan_v;
    int32_t s;
    if ((s = check_labels(c, p))) return s;
    int64_t R = p->rows, C = p->c;
    bool f64 = p->dtype == OPC_DOUBLE;
    const void *x = c->in[0]->data, *label = c->in[1]->data;
    const void *w = p->sparse && p->has_weight ? c->in[2]->data : NULL;
    void *Y = outs[0].data, *LP = outs[1].data;
    if (!Y && !LP) return OPC_OK;
    double *loss = malloc((size_t)(R ? R : 1) * sizeof(double));
    if (!loss) return opc_fail(c, OPC_ERR_OUT_OF_MEMORY, "no memory for %lld row losses", (long long)R);
    int nt = leg_threads(c, p);
    size_t es = f64 ? sizeof(double) : sizeof(float);
#pragma omp parallel num_threads(nt)
    {
        int64_t lo, hi;
        opc_split(R, omp_get_num_threads(), omp_get_thread_num(), 1, &lo, &hi);
        for (int64_t r = lo; r < hi; r++) {
            const char *xr = (const char *)x + (size_t)(r * C) * es;
            const char *yr = p->sparse ? NULL : (const char *)label + (size_t)(r * C) * es;
            int64_t lab = p->sparse ? opc_int_at(label, p->label_dtype, r) : -1;
            char *lpr = LP ? (char *)LP + (size_t)(r * C) * es : NULL;
            double l = f64 ? fwd_row_f64((const double *)xr, (const double *)yr, lab, (double *)lpr, C)
                           : fwd_row_f32((const float *)xr, (const float *)yr, lab, (float *)lpr, C);
            loss[r] = w ? l * fval(p->dtype, w, r) : l;
        }
    }
    if (Y) {
        if (p->reduction == LEG_NONE) {
            for (int64_t r = 0; r < R; r++) {
                if (f64) ((double *)Y)[r] = loss[r];
                else ((float *)Y)[r] = (float)loss[r];
            }
        } else {
            double total = 0.0, denom = (double)R;
            for (int64_t r = 0; r < R; r++) total += loss[r];
            if (w) {
                denom = 0.0;
                for (int64_t r = 0; r < R; r++) denom += fval(p->dtype, w, r);
            }
            double v = p->reduction == LEG_SUM ? total : total / denom; /* 0/0 = NaN, as the math */
            if (f64) *(double *)Y = v;
            else *(float *)Y = (float)v;
        }
    }
    free(loss);
    return OPC_OK;
}

/* ---- gradients ------------------------------------------------------------------------------------------ */

static int32_t exec_grad(opc_call *c, const void *plan_v, opc_tensor *outs) {
    const leg_plan *p = plan_v;
    int32_t s;
    if ((s = check_labels(c, p))) return s;
    int64_t R = p->rows, C = p->c;
    if (!outs[0].data || R == 0 || C == 0) return OPC_OK;
    bool f64 = p->dtype == OPC_DOUBLE;
    const void *dy = c->in[0]->data, *lp = c->in[1]->data, *label = c->in[2]->data;
    const void *w = p->sparse && p->has_weight ? c->in[3]->data : NULL;
    /* mean's denominator: R, or the weights summed in element order (double) */
    double denom = (double)R;
    if (w) {
        denom = 0.0;
        for (int64_t r = 0; r < R; r++) denom += fval(p->dtype, w, r);
    }
    double dy0 = p->reduction == LEG_NONE ? 0.0 : fval(p->dtype, dy, 0);
    size_t es = f64 ? sizeof(double) : sizeof(float);
    int nt = leg_threads(c, p);
#pragma omp parallel num_threads(nt)
    {
        int64_t lo, hi;
        opc_split(R, omp_get_num_threads(), omp_get_thread_num(), 1, &lo, &hi);
        for (int64_t r = lo; r < hi; r++) {
            double sc = p->reduction == LEG_NONE ? fval(p->dtype, dy, r) : dy0;
            if (w) sc *= fval(p->dtype, w, r);
            if (p->reduction == LEG_MEAN) sc /= denom;
            const char *lpr = (const char *)lp + (size_t)(r * C) * es;
            char *out = (char *)outs[0].data + (size_t)(r * C) * es;
            if (p->sparse) {
                int64_t lab = opc_int_at(label, p->label_dtype, r);
                if (f64) grad_sparse_f64((const double *)lpr, (double *)out, C, lab, sc);
                else grad_sparse_f32((const float *)lpr, (float *)out, C, lab, (float)sc);
            } else {
                const char *yr = (const char *)label + (size_t)(r * C) * es;
                if (f64) grad_dense_f64((const double *)lpr, (const double *)yr, (double *)out, C, sc);
                else grad_dense_f32((const float *)lpr, (const float *)yr, (float *)out, C, (float)sc);
            }
        }
    }
    return OPC_OK;
}

/* ---- registry entries (listed in ops.def; held against the specs by tests/openmp/test_descriptors.py) ---- */

static const int32_t DT_LEG[] = {OPC_FLOAT, OPC_DOUBLE};
static const char *const RED_ATTR[] = {"reduction"};
static const char *const FWD_OUT[] = {"Y", "log_prob"};
static const char *const GRAD_OUT[] = {"d_logits"};
static const char *const SCE_IN[] = {"logits", "label"};
static const uint8_t SCE_OPT[] = {0, 0};
static const char *const SSCE_IN[] = {"logits", "label", "weight"};
static const uint8_t SSCE_OPT[] = {0, 0, 1};
static const char *const SCEG_IN[] = {"dY", "log_prob", "label"};
static const uint8_t SCEG_OPT[] = {0, 0, 0};
static const char *const SSCEG_IN[] = {"dY", "log_prob", "label", "weight"};
static const uint8_t SSCEG_OPT[] = {0, 0, 0, 1};

OPC_DEFINE_OP(SoftmaxCrossEntropy) = {
    .desc = {.name = "SoftmaxCrossEntropy", OPC_INPUTS(SCE_IN, SCE_OPT), OPC_OUTPUTS(FWD_OUT), OPC_DTYPES(DT_LEG),
             OPC_ATTRS(RED_ATTR),
             .notes = "logits and label [..., C] (class axis last); row losses in double, summed in row order"},
    .prepare = opc_prep_sce_legacy, .exec = exec_forward};
OPC_DEFINE_OP(SoftmaxCrossEntropyGrad) = {
    .desc = {.name = "SoftmaxCrossEntropyGrad", OPC_INPUTS(SCEG_IN, SCEG_OPT), OPC_OUTPUTS(GRAD_OUT),
             OPC_DTYPES(DT_LEG), OPC_ATTRS(RED_ATTR),
             .notes = "log_prob and label [..., C]; d_logits = s (p sum(label) - label), exact for any label"},
    .prepare = opc_prep_sce_legacy_grad, .exec = exec_grad};
OPC_DEFINE_OP(SparseSoftmaxCrossEntropy) = {
    .desc = {.name = "SparseSoftmaxCrossEntropy", OPC_INPUTS(SSCE_IN, SSCE_OPT), OPC_OUTPUTS(FWD_OUT),
             OPC_DTYPES(DT_LEG), OPC_ATTRS(RED_ATTR),
             .notes = "logits [..., C], label (int32/int64, in [0, C): checked) and per-element weight [...]"},
    .prepare = opc_prep_sparse_sce, .exec = exec_forward, .check = opc_check_sce_legacy};
OPC_DEFINE_OP(SparseSoftmaxCrossEntropyGrad) = {
    .desc = {.name = "SparseSoftmaxCrossEntropyGrad", OPC_INPUTS(SSCEG_IN, SSCEG_OPT), OPC_OUTPUTS(GRAD_OUT),
             OPC_DTYPES(DT_LEG), OPC_ATTRS(RED_ATTR),
             .notes = "log_prob [..., C], label in [0, C) (checked), per-element weight; mean's weight sum in double"},
    .prepare = opc_prep_sparse_sce_grad, .exec = exec_grad, .check = opc_check_sce_legacy};
