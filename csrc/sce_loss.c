/* The forward losses ORT's training graphs carry, ignore_index an optional int64 scalar input (absent: no label is
 * ignored) and not an attribute:
 *   SoftmaxCrossEntropyLossInternal(scores, labels, weights?, ignore_index?) -> (output, log_prob)
 *       log_prob = log_softmax(scores, axis 1); l = -log_prob[label] * weight[label]
 *   NegativeLogLikelihoodLossInternal2(input, target, weight?, ignore_index?) -> loss
 *       l = -input[target] * weight[target]
 *   NegativeLogLikelihoodLossInternal: the same op for models of ai.onnx opset 12 and earlier (same functions)
 * l is exactly 0 for an ignored element (selected, never multiplied); reduction none returns l, sum its sum, mean
 * its sum over W, the sum of the weights of the elements not ignored (0/0 = NaN when none counts).
 *
 * Tensors as [N, C, D] (D the product of the dims after the class axis), M = N * D elements. Every label is checked
 * before anything is read through it. Each element's row (C values, stride D) is computed in double in class order
 * by one thread (rows split across threads by their index only), the reductions run serially in element order in
 * double, every result is rounded once to the dtype: bitwise the same at any thread count. float32, float64, and
 * float16 / bfloat16 (widened exactly). */
#include <math.h>
#include <omp.h>
#include <stdlib.h>

#include "call.h"
#include "vmath.h"

enum { LOSS_NONE, LOSS_SUM, LOSS_MEAN };

typedef struct {
    int32_t dtype, label_dtype, reduction;
    bool has_weight, has_ignore, softmax;
    int64_t n, c, d;
} loss_plan;

static double get(int32_t dtype, const void *p, int64_t i) {
    switch (dtype) {
    case OPC_FLOAT: return ((const float *)p)[i];
    case OPC_DOUBLE: return ((const double *)p)[i];
    case OPC_FLOAT16: return opc_f16_to_f32(((const uint16_t *)p)[i]);
    default: return opc_bf16_to_f32(((const uint16_t *)p)[i]);
    }
}

static void put(int32_t dtype, void *p, int64_t i, double v) {
    switch (dtype) {
    case OPC_FLOAT: ((float *)p)[i] = (float)v; break;
    case OPC_DOUBLE: ((double *)p)[i] = v; break;
    case OPC_FLOAT16: ((uint16_t *)p)[i] = opc_f32_to_f16((float)v); break;
    default: ((uint16_t *)p)[i] = opc_f32_to_bf16((float)v); break;
    }
}

static int32_t prep_loss(opc_call *c, loss_plan *p, opc_shape *outs, bool softmax) {
    int32_t s;
    if ((s = opc_require(c, 0)) || (s = opc_require(c, 1))) return s;
    const opc_tensor *x = c->in[0], *label = c->in[1], *w = c->in[2], *ii = c->in[3];
    const char *xn = softmax ? "scores" : "input", *ln = softmax ? "labels" : "target", *wn = softmax ? "weights" : "weight";
    static const int32_t FLOATS[] = {0, 2};
    if ((s = opc_check_supported_dtype(c, x->dtype)) || (s = opc_check_dtypes(c, x->dtype, FLOATS, 2))) return s;
    if (label->dtype != OPC_INT32 && label->dtype != OPC_INT64)
        return opc_fail(c, OPC_ERR_UNSUPPORTED_DTYPE, "%s has dtype %s; it must be int32 or int64", ln,
                        opc_dtype_name(label->dtype));
    if (ii && (ii->dtype != OPC_INT64 || ii->rank != 0))
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "ignore_index must be an int64 scalar, got %s of rank %d",
                        opc_dtype_name(ii->dtype), (int)ii->rank);
    const char *reduction;
    if ((s = opc_attr_string(c, "reduction", "mean", &reduction))) return s;
    if (strcmp(reduction, "none") == 0) p->reduction = LOSS_NONE;
    else if (strcmp(reduction, "sum") == 0) p->reduction = LOSS_SUM;
    else if (strcmp(reduction, "mean") == 0) p->reduction = LOSS_MEAN;
    else return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "reduction '%s' is not none, sum or mean", reduction);
    if (softmax && opc_attr_get(c, "output_type")) {
        int64_t out_type;
        if ((s = opc_attr_int(c, "output_type", 0, &out_type))) return s;
        if (out_type != x->dtype)
            return opc_fail(c, OPC_ERR_UNSUPPORTED_DTYPE, "output_type %lld differs from the inputs' %s: mixed "
                            "precision is not implemented", (long long)out_type, opc_dtype_name(x->dtype));
    }
    char a[200], b[200];
    if (x->rank < 2)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "%s has shape %s; it must be [N, C, d1..dk] (rank >= 2)", xn,
                        opc_shape_str(x, a, sizeof a));
    bool fits = label->rank == x->rank - 1 && label->shape[0] == x->shape[0];
    for (int32_t i = 1; fits && i < label->rank; i++) fits = label->shape[i] == x->shape[i + 1];
    if (!fits)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "%s shape %s is not %s shape %s without axis 1", ln,
                        opc_shape_str(label, a, sizeof a), xn, opc_shape_str(x, b, sizeof b));
    if (w && (w->rank != 1 || w->shape[0] != x->shape[1]))
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "%s shape %s is not [C] = [%lld]", wn, opc_shape_str(w, a, sizeof a),
                        (long long)x->shape[1]);
    p->dtype = x->dtype;
    p->label_dtype = label->dtype;
    p->has_weight = w != NULL;
    p->has_ignore = ii != NULL;
    p->softmax = softmax;
    p->n = x->shape[0];
    p->c = x->shape[1];
    p->d = 1;
    for (int32_t i = 2; i < x->rank; i++) p->d *= x->shape[i];
    if (p->reduction == LOSS_NONE) opc_shape_from(&outs[0], label);
    else outs[0] = (opc_shape){.dtype = x->dtype, .rank = 0};
    outs[0].dtype = x->dtype;
    if (softmax) opc_shape_from(&outs[1], x);
    return OPC_OK;
}

static int32_t prep_sce(opc_call *c, void *plan, opc_shape *outs) { return prep_loss(c, plan, outs, true); }
static int32_t prep_nll(opc_call *c, void *plan, opc_shape *outs) { return prep_loss(c, plan, outs, false); }

static int32_t check_loss(opc_call *c, const void *plan_v) {
    const loss_plan *p = plan_v;
    int64_t ignore = p->has_ignore ? *(const int64_t *)c->in[3]->data : 0;
    const void *label = c->in[1]->data;
    int64_t at = opc_first_outside(label, p->label_dtype, p->n * p->d, 0, p->c, p->has_ignore, ignore, c->threads);
    if (at < 0) return OPC_OK;
    return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "%s %lld at element %lld is outside [0, %lld)%s",
                    p->softmax ? "label" : "target", (long long)opc_int_at(label, p->label_dtype, at), (long long)at,
                    (long long)p->c, p->has_ignore ? " and not ignore_index" : " (no ignore_index given)");
}

/* element m = (n, d)'s row: log_prob over its C classes (stride D), written when wanted; returns log_prob[t] */
static double softmax_row(const loss_plan *p, const void *x, void *lp, int64_t m, int64_t t) {
    int64_t C = p->c, D = p->d, base = (m / D) * C * D + m % D;
    double top = -INFINITY, sum = 0.0;
    for (int64_t k = 0; k < C; k++) {
        double v = get(p->dtype, x, base + k * D);
        top = v > top || isnan(v) ? v : top;
    }
    if (!isfinite(top)) top = 0.0; /* a row of -inf (or with +inf or NaN) keeps the NaN/inf the math gives */
    for (int64_t k = 0; k < C; k++) sum += exp(get(p->dtype, x, base + k * D) - top);
    double lse = log(sum), picked = 0.0;
    for (int64_t k = 0; k < C; k++) {
        double v = (get(p->dtype, x, base + k * D) - top) - lse;
        if (lp) put(p->dtype, lp, base + k * D, v);
        if (k == t) picked = v;
    }
    return picked;
}


/* float32 rows of contiguous classes (D = 1), vectorised: max and exp in float32 (opc_expf, a few ulp), the exps
 * summed in 16 float32 lanes per block of SCE_BLK, the blocks in double, all in a fixed order; log_prob = (x - top) -
 * log(sum) in float32 (two roundings); the loss from the same values in double */
#define SCE_BLK 512
/* the row's largest non-NaN value in 16 lanes (a NaN anywhere makes the row NaN through its exp, as the math) */
CLONES static float row_max_f32(const float *restrict x, int64_t n) {
    float m[16];
    for (int l = 0; l < 16; l++) m[l] = -INFINITY;
    for (int64_t i = 0; i + 16 <= n; i += 16)
        for (int l = 0; l < 16; l++) m[l] = x[i + l] > m[l] ? x[i + l] : m[l];
    for (int64_t i = n - n % 16; i < n; i++) m[i % 16] = x[i] > m[i % 16] ? x[i] : m[i % 16];
    float top = m[0];
    for (int l = 1; l < 16; l++) top = m[l] > top ? m[l] : top;
    return top;
}
CLONES static void exp_shift_f32(const float *restrict x, float *restrict e, int64_t n, float top) {
    for (int64_t i = 0; i < n; i++) e[i] = opc_expf(x[i] - top); /* simd: 1 */
}
CLONES static void lp_store_f32(const float *restrict x, float *restrict lp, int64_t n, float top, float lse) {
    for (int64_t i = 0; i < n; i++) lp[i] = (x[i] - top) - lse; /* simd: 1 */
}
/* 16 float lanes of a block (at most SCE_BLK terms each way: a few float32 roundings), in a fixed order */
CLONES static void lanes_f32(const float *restrict e, int64_t n, float *restrict acc) {
    for (int64_t i = 0; i + 16 <= n; i += 16)
        for (int l = 0; l < 16; l++) acc[l] += e[i + l];
    for (int64_t i = n - n % 16; i < n; i++) acc[i % 16] += e[i];
}
static double softmax_row_f32(const float *x, float *lp, int64_t C, int64_t t) {
    float top = row_max_f32(x, C);
    if (!isfinite(top)) top = 0.0f; /* as softmax_row: rows of -inf, or with +inf, keep what the math gives */
    double sum = 0.0;
    float e[SCE_BLK];
    for (int64_t j = 0; j < C; j += SCE_BLK) {
        int64_t k = C - j < SCE_BLK ? C - j : SCE_BLK;
        float acc[16] = {0};
        exp_shift_f32(x + j, e, k, top);
        lanes_f32(e, k, acc);
        double b = 0.0;
        for (int l = 0; l < 16; l++) b += acc[l];
        sum += b;
    }
    double lse = log(sum);
    if (lp) lp_store_f32(x, lp, C, top, (float)lse);
    return t >= 0 ? ((double)x[t] - top) - lse : 0.0;
}

static int32_t exec_loss(opc_call *c, const void *plan_v, opc_tensor *outs) {
    const loss_plan *p = plan_v;
    int32_t s;
    if ((s = check_loss(c, plan_v))) return s;
    int64_t M = p->n * p->d, C = p->c, D = p->d;
    const void *x = c->in[0]->data, *label = c->in[1]->data, *w = p->has_weight ? c->in[2]->data : NULL;
    int64_t ignore = p->has_ignore ? *(const int64_t *)c->in[3]->data : 0;
    void *lp = p->softmax ? outs[1].data : NULL;
    double *loss = malloc((size_t)(M > 0 ? M : 1) * sizeof(double));
    if (!loss) return opc_fail(c, OPC_ERR_OUT_OF_MEMORY, "no memory for %lld per-element losses", (long long)M);
    int64_t want = M * (C > 0 ? C : 1) / opc_grain(32768) + 1;
    int nt = (int)(want < c->threads ? want : c->threads);
    if (nt > M) nt = (int)(M > 0 ? M : 1);
#pragma omp parallel num_threads(nt > 1 ? nt : 1)
    {
        int64_t lo, hi;
        opc_split(M, omp_get_num_threads(), omp_get_thread_num(), 1, &lo, &hi);
        for (int64_t m = lo; m < hi; m++) {
            int64_t t = opc_int_at(label, p->label_dtype, m);
            bool ignored = p->has_ignore && t == ignore;
            double v;
            if (p->softmax && p->dtype == OPC_FLOAT && D == 1)
                v = softmax_row_f32((const float *)x + m * C, lp ? (float *)lp + m * C : NULL, C, ignored ? -1 : t);
            else if (p->softmax) v = softmax_row(p, x, lp, m, ignored ? -1 : t);
            else v = ignored ? 0.0 : get(p->dtype, x, ((m / D) * C + t) * D + m % D);
            loss[m] = ignored ? 0.0 : -v * (w ? get(p->dtype, w, t) : 1.0);
        }
    }
    if (outs[0].data) {
        if (p->reduction == LOSS_NONE) {
            for (int64_t m = 0; m < M; m++) put(p->dtype, outs[0].data, m, loss[m]);
        } else {
            double total = 0.0, W = 0.0;
            for (int64_t m = 0; m < M; m++) {
                int64_t t = opc_int_at(label, p->label_dtype, m);
                if (p->has_ignore && t == ignore) continue;
                total += loss[m];
                W += w ? get(p->dtype, w, t) : 1.0;
            }
            put(p->dtype, outs[0].data, 0, p->reduction == LOSS_SUM ? total : total / W); /* W = 0: 0/0 or x/0 */
        }
    }
    free(loss);
    return OPC_OK;
}

/* ---- registry entries (listed in ops.def; held against the specs by tests/openmp/test_descriptors.py) ---- */

static const int32_t DT_LOSS[] = {OPC_FLOAT, OPC_DOUBLE, OPC_FLOAT16, OPC_BFLOAT16};
static const uint8_t LOSS_OPT[] = {0, 0, 1, 1};
static const char *const SCE_FWD_IN[] = {"scores", "labels", "weights", "ignore_index"};
static const char *const SCE_FWD_OUT[] = {"output", "log_prob"};
static const char *const SCE_FWD_ATTR[] = {"reduction", "output_type"};
static const char *const NLL_IN[] = {"input", "target", "weight", "ignore_index"};
static const char *const NLL_OUT[] = {"loss"};
static const char *const NLL_ATTR[] = {"reduction"};

OPC_DEFINE_OP(SoftmaxCrossEntropyLossInternal) = {
    .desc = {.name = "SoftmaxCrossEntropyLossInternal", OPC_INPUTS(SCE_FWD_IN, LOSS_OPT), OPC_OUTPUTS(SCE_FWD_OUT),
             OPC_DTYPES(DT_LOSS), OPC_ATTRS(SCE_FWD_ATTR),
             .notes = "scores [N, C, d1..dk], labels [N, d1..dk] each in [0, C) or ignore_index (checked; absent, none "
                      "ignored); rows in double; sums in double, in element order; output_type must name the inputs' type"},
    .prepare = prep_sce, .exec = exec_loss, .check = check_loss};

OPC_DEFINE_OP(NegativeLogLikelihoodLossInternal2) = {
    .desc = {.name = "NegativeLogLikelihoodLossInternal2", OPC_INPUTS(NLL_IN, LOSS_OPT), OPC_OUTPUTS(NLL_OUT),
             OPC_DTYPES(DT_LOSS), OPC_ATTRS(NLL_ATTR),
             .notes = "input [N, C, d1..dk], target [N, d1..dk] each in [0, C) or ignore_index (checked; absent, none "
                      "ignored); sums in double, in element order"},
    .prepare = prep_nll, .exec = exec_loss, .check = check_loss};

OPC_DEFINE_OP(NegativeLogLikelihoodLossInternal) = {
    .desc = {.name = "NegativeLogLikelihoodLossInternal", OPC_INPUTS(NLL_IN, LOSS_OPT), OPC_OUTPUTS(NLL_OUT),
             OPC_DTYPES(DT_LOSS), OPC_ATTRS(NLL_ATTR),
             .notes = "NegativeLogLikelihoodLossInternal2's kernel (the op ai.onnx opset 12 models carry)"},
    .prepare = prep_nll, .exec = exec_loss, .check = check_loss};
