/* AdamOptimizer (com.microsoft): one Adam step on one parameter, fused over its elements.
 * Inputs R, T, weights, gradients, moment_1, moment_2 [, mixed_precision_weights, loss_scale,
 * global_gradient_norm, update_signal]; outputs new_T, new_moment_1, new_moment_2 [, new_weights, new_gradients,
 * new_mixed_precision_weights]. Every float input but the float16 copy has the weights' type (float32 or
 * float64); T int64, update_signal bool, R, T, loss_scale, global_gradient_norm, update_signal one value each.
 *   g = gradients / d  (d = n / max_norm_clip when n > s * max_norm_clip, else s; s = loss_scale or 1, n the norm)
 *   m1' = alpha m1 + (1 - alpha) g;  m2' = beta m2 + (1 - beta) g^2;  c1 = 1 - alpha^T, c2 = 1 - beta^T (1, 1
 *   without bias correction or for T < 1)
 *   mode 0: delta = -R ((m1' / c1) / (sqrt(m2' / c2) + eps) + lambda w)
 *   mode 1: u = (R sqrt(c2) / c1) m1' / (sqrt(m2') + eps);  delta = -u - R lambda (w - u)
 *   new_weights = w + delta, new_gradients = delta, new_T = T + 1, new_mixed_precision_weights = float16(new_weights)
 * update_signal false: every output is its input. Each element is computed in double and rounded once to its
 * output type (the float16 copy from the double value, correctly rounded). Elementwise: every element gets the
 * same value whatever the thread split, so results are bitwise the same at any thread count. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "call.h"

enum { IN_R, IN_T, IN_W, IN_G, IN_M1, IN_M2, IN_MP, IN_LS, IN_GN, IN_US };
enum { OUT_T, OUT_M1, OUT_M2, OUT_W, OUT_G, OUT_MP };

typedef struct {
    int32_t dtype;
    int64_t n;
    double alpha, beta, lambda, eps, max_norm;
    int64_t bias, mode;
} adam_plan;

typedef struct { /* per-call scalars, read from the inputs in exec */
    double alpha, beta, lambda, eps, eta, inv_d, a1, rc2, ss;
    int64_t mode;
} adam_k;

static double one_value(const opc_tensor *t) {
    return t->dtype == OPC_FLOAT ? (double)*(const float *)t->data : *(const double *)t->data;
}

static int32_t one_elem(opc_call *c, int32_t i) {
    char a[200];
    const opc_tensor *t = c->in[i];
    if (t && opc_numel(t) != 1)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "%s must hold exactly one value, got shape %s",
                        c->desc->input_names[i], opc_shape_str(t, a, sizeof a));
    return OPC_OK;
}

static int32_t attr_in(opc_call *c, const char *name, double dflt, double lo, double hi, double *out) {
    int32_t s;
    bool given;
    if ((s = opc_attr_float(c, name, dflt, out, &given))) return s;
    if (!(*out >= lo && *out <= hi))
        return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "%s %g must lie in [%g, %g]", name, *out, lo, hi);
    return OPC_OK;
}

int32_t opc_prep_adam(opc_call *c, void *plan_v, opc_shape *outs) {
    adam_plan *p = plan_v;
    int32_t s;
    for (int32_t i = IN_R; i <= IN_M2; i++)
        if ((s = opc_require(c, i))) return s;
    const opc_tensor *w = c->in[IN_W];
    if ((s = opc_check_supported_dtype(c, w->dtype))) return s;
    static const int32_t FL[] = {IN_W, IN_R, IN_G, IN_M1, IN_M2, IN_LS, IN_GN};
    if ((s = opc_check_dtypes(c, w->dtype, FL, OPC_COUNT(FL)))) return s;
    if (c->in[IN_T]->dtype != OPC_INT64)
        return opc_fail(c, OPC_ERR_UNSUPPORTED_DTYPE, "T has dtype %s; it must be int64", opc_dtype_name(c->in[IN_T]->dtype));
    if (c->in[IN_MP] && c->in[IN_MP]->dtype != OPC_FLOAT16)
        return opc_fail(c, OPC_ERR_UNSUPPORTED_DTYPE, "mixed_precision_weights has dtype %s; it must be float16",
                        opc_dtype_name(c->in[IN_MP]->dtype));
    if (c->in[IN_US] && c->in[IN_US]->dtype != OPC_BOOL)
        return opc_fail(c, OPC_ERR_UNSUPPORTED_DTYPE, "update_signal has dtype %s; it must be bool",
                        opc_dtype_name(c->in[IN_US]->dtype));
    static const int32_t ONE[] = {IN_R, IN_T, IN_LS, IN_GN, IN_US};
    for (int32_t k = 0; k < OPC_COUNT(ONE); k++)
        if ((s = one_elem(c, ONE[k]))) return s;
    static const int32_t SAME[] = {IN_G, IN_M1, IN_M2, IN_MP};
    char a[200], b[200];
    for (int32_t k = 0; k < OPC_COUNT(SAME); k++) {
        const opc_tensor *t = c->in[SAME[k]];
        if (t && !opc_same_shape(t, w))
            return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "%s has shape %s but weights has %s: they must be equal",
                            c->desc->input_names[SAME[k]], opc_shape_str(t, a, sizeof a), opc_shape_str(w, b, sizeof b));
    }
    if ((s = attr_in(c, "alpha", 0.9, 0.0, 1.0, &p->alpha)) || (s = attr_in(c, "beta", 0.999, 0.0, 1.0, &p->beta)) ||
        (s = attr_in(c, "lambda", 0.0, 0.0, INFINITY, &p->lambda)) ||
        (s = attr_in(c, "epsilon", 1e-8, 0.0, INFINITY, &p->eps)) ||
        (s = attr_in(c, "max_norm_clip", 1.0, 0.0, INFINITY, &p->max_norm)))
        return s;
    if ((s = opc_attr_int(c, "do_bias_correction", 1, &p->bias))) return s;
    if (p->bias != 0 && p->bias != 1)
        return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "do_bias_correction %lld must be 0 or 1", (long long)p->bias);
    if ((s = opc_attr_int(c, "weight_decay_mode", 0, &p->mode))) return s;
    if (p->mode != 0 && p->mode != 1)
        return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "weight_decay_mode %lld must be 0 or 1", (long long)p->mode);
    p->dtype = w->dtype;
    p->n = opc_numel(w);
    opc_shape_from(&outs[OUT_T], c->in[IN_T]);
    opc_shape_from(&outs[OUT_M1], w);
    opc_shape_from(&outs[OUT_M2], w);
    opc_shape_from(&outs[OUT_W], w);
    opc_shape_from(&outs[OUT_G], w);
    opc_shape_from(&outs[OUT_MP], w);
    outs[OUT_MP].dtype = OPC_FLOAT16;
    return OPC_OK;
}

/* One NaN for every NaN result: which operand's NaN an IEEE operation returns depends on the operand order, and
 * the vectorised loops' scalar peel (set by the buffers' alignment) orders them otherwise; canonical NaNs keep the
 * bits the same whatever the outputs asked for and the thread split. */
static inline double canon(double x) { return x == x ? x : NAN; }

/* one element: m1', m2', delta from w, g (already divided), m1, m2 */
#define ADAM_STEP(K, wv, gv, m1v, m2v, M1N, M2N, DELTA)                                                          \
    do {                                                                                                        \
        double g_ = (gv) * (K)->inv_d;                                                                          \
        M1N = (K)->alpha * (m1v) + (1.0 - (K)->alpha) * g_;                                                     \
        M2N = (K)->beta * (m2v) + (1.0 - (K)->beta) * g_ * g_;                                                  \
        if ((K)->mode == 0) {                                                                                   \
            DELTA = -(K)->eta * ((M1N * (K)->a1) / (sqrt(M2N * (K)->rc2) + (K)->eps) + (K)->lambda * (wv));    \
        } else {                                                                                                \
            double u_ = (K)->ss * M1N / (sqrt(M2N) + (K)->eps);                                                 \
            DELTA = -u_ - (K)->eta * (K)->lambda * ((wv) - u_);                                                 \
        }                                                                                                       \
    } while (0)

/* The tight loops (vectorised): scalars by value, every output written. mode 0 and mode 1 apart. */
#define DEFINE_ADAM_TIGHT(NAME, T)                                                                              \
    CLONES static void NAME##_m0(double alpha, double beta, double lam, double eps, double eta, double inv_d,    \
                                 double a1, double rc2, const T *restrict w, const T *restrict g,               \
                                 const T *restrict m1, const T *restrict m2, T *restrict m1o, T *restrict m2o,  \
                                 T *restrict wo, T *restrict go, int64_t n) {                                   \
        for (int64_t i = 0; i < n; i++) {                                                                       \
            double wv = (double)w[i], gv = (double)g[i] * inv_d;                                                \
            double a = alpha * (double)m1[i] + (1.0 - alpha) * gv;                                              \
            double b = beta * (double)m2[i] + (1.0 - beta) * gv * gv;                                           \
            double d = -eta * ((a * a1) / (sqrt(b * rc2) + eps) + lam * wv);                                    \
            m1o[i] = (T)canon(a);                                                                               \
            m2o[i] = (T)canon(b);                                                                               \
            wo[i] = (T)canon(wv + d);                                                                           \
            go[i] = (T)canon(d);                                                                                \
        }                                                                                                       \
    }                                                                                                           \
    CLONES static void NAME##_m1(double alpha, double beta, double lam, double eps, double eta, double inv_d,    \
                                 double ss, const T *restrict w, const T *restrict g, const T *restrict m1,     \
                                 const T *restrict m2, T *restrict m1o, T *restrict m2o, T *restrict wo,        \
                                 T *restrict go, int64_t n) {                                                   \
        for (int64_t i = 0; i < n; i++) {                                                                       \
            double wv = (double)w[i], gv = (double)g[i] * inv_d;                                                \
            double a = alpha * (double)m1[i] + (1.0 - alpha) * gv;                                              \
            double b = beta * (double)m2[i] + (1.0 - beta) * gv * gv;                                           \
            double u = ss * a / (sqrt(b) + eps);                                                                \
            double d = -u - eta * lam * (wv - u);                                                               \
            m1o[i] = (T)canon(a);                                                                               \
            m2o[i] = (T)canon(b);                                                                               \
            wo[i] = (T)canon(wv + d);                                                                           \
            go[i] = (T)canon(d);                                                                                \
        }                                                                                                       \
    }

/* The element loop: the tight loops in blocks (an unwanted new_weights / new_gradients goes to a scratch block);
 * with the float16 copy wanted, one element at a time (ADAM_STEP: the same operations in the same order). */
#define ADAM_BLOCK 512
#define DEFINE_ADAM_LOOP(NAME, T)                                                                               \
    DEFINE_ADAM_TIGHT(NAME, T)                                                                                  \
    static void NAME(const adam_k *restrict k, const T *restrict w, const T *restrict g,                        \
                     const T *restrict m1, const T *restrict m2, T *restrict m1o, T *restrict m2o,              \
                     T *restrict wo, T *restrict go, uint16_t *restrict mpo, int64_t n) {                       \
        if (mpo) {                                                                                              \
            for (int64_t i = 0; i < n; i++) {                                                                   \
                double a, b, d, wv = (double)w[i];                                                              \
                ADAM_STEP(k, wv, (double)g[i], (double)m1[i], (double)m2[i], a, b, d);                          \
                m1o[i] = (T)canon(a);                                                                           \
                m2o[i] = (T)canon(b);                                                                           \
                if (wo) wo[i] = (T)canon(wv + d);                                                               \
                if (go) go[i] = (T)canon(d);                                                                    \
                mpo[i] = opc_f64_to_f16(canon(wv + d));                                                         \
            }                                                                                                   \
            return;                                                                                             \
        }                                                                                                       \
        T wbuf[ADAM_BLOCK], gbuf[ADAM_BLOCK];                                                                   \
        for (int64_t i = 0; i < n; i += ADAM_BLOCK) {                                                           \
            int64_t nb = n - i < ADAM_BLOCK ? n - i : ADAM_BLOCK;                                               \
            T *wd = wo ? wo + i : wbuf, *gd = go ? go + i : gbuf;                                               \
            if (k->mode == 0)                                                                                   \
                NAME##_m0(k->alpha, k->beta, k->lambda, k->eps, k->eta, k->inv_d, k->a1, k->rc2, w + i, g + i,  \
                          m1 + i, m2 + i, m1o + i, m2o + i, wd, gd, nb);                                        \
            else                                                                                                \
                NAME##_m1(k->alpha, k->beta, k->lambda, k->eps, k->eta, k->inv_d, k->ss, w + i, g + i, m1 + i,  \
                          m2 + i, m1o + i, m2o + i, wd, gd, nb);                                                \
        }                                                                                                       \
    }
DEFINE_ADAM_LOOP(adam_f32, float)
DEFINE_ADAM_LOOP(adam_f64, double)

static void adam_range(const adam_plan *p, const adam_k *k, opc_call *c, opc_tensor *outs, int64_t lo, int64_t hi) {
    if (hi <= lo) return;
    int64_t n = hi - lo;
    size_t es = opc_dtype_size(p->dtype);
#define AT(t) ((t) ? (void *)((char *)(t) + lo * es) : NULL)
    const void *w = AT(c->in[IN_W]->data), *g = AT(c->in[IN_G]->data), *m1 = AT(c->in[IN_M1]->data),
               *m2 = AT(c->in[IN_M2]->data);
    void *m1o = AT(outs[OUT_M1].data), *m2o = AT(outs[OUT_M2].data), *wo = AT(outs[OUT_W].data),
         *go = AT(outs[OUT_G].data);
#undef AT
    uint16_t *mpo = outs[OUT_MP].data ? (uint16_t *)outs[OUT_MP].data + lo : NULL;
    if (p->dtype == OPC_FLOAT)
        adam_f32(k, w, g, m1, m2, m1o, m2o, wo, go, mpo, n);
    else
        adam_f64(k, w, g, m1, m2, m1o, m2o, wo, go, mpo, n);
}

static void copy_out(const opc_tensor *in, opc_tensor *out, size_t bytes) {
    if (out->data && in && bytes) memcpy(out->data, in->data, bytes);
}

int32_t opc_exec_adam(opc_call *c, const void *plan_v, opc_tensor *outs) {
    const adam_plan *p = plan_v;
    int64_t step = *(const int64_t *)c->in[IN_T]->data;
    size_t bytes = (size_t)p->n * opc_dtype_size(p->dtype);
    if (c->in[IN_US] && !*(const uint8_t *)c->in[IN_US]->data) { /* skip: every output is its input */
        if (outs[OUT_T].data) *(int64_t *)outs[OUT_T].data = step;
        copy_out(c->in[IN_M1], &outs[OUT_M1], bytes);
        copy_out(c->in[IN_M2], &outs[OUT_M2], bytes);
        copy_out(c->in[IN_W], &outs[OUT_W], bytes);
        copy_out(c->in[IN_G], &outs[OUT_G], bytes);
        if (outs[OUT_MP].data) {
            if (c->in[IN_MP])
                copy_out(c->in[IN_MP], &outs[OUT_MP], (size_t)p->n * 2);
            else /* no copy given: the weights in float16, as after a step */
                for (int64_t i = 0; i < p->n; i++)
                    ((uint16_t *)outs[OUT_MP].data)[i] =
                        opc_f64_to_f16(p->dtype == OPC_FLOAT ? (double)((const float *)c->in[IN_W]->data)[i]
                                                         : ((const double *)c->in[IN_W]->data)[i]);
        }
        return OPC_OK;
    }
    if (outs[OUT_T].data) *(int64_t *)outs[OUT_T].data = step + 1;
    adam_k k = {.alpha = p->alpha, .beta = p->beta, .lambda = p->lambda, .eps = p->eps, .mode = p->mode};
    k.eta = one_value(c->in[IN_R]);
    double sc = c->in[IN_LS] ? one_value(c->in[IN_LS]) : 1.0, d = sc;
    if (c->in[IN_GN]) {
        double nrm = one_value(c->in[IN_GN]);
        if (nrm > sc * p->max_norm) d = nrm / p->max_norm;
    }
    k.inv_d = 1.0 / d;
    double c1 = 1.0, c2 = 1.0;
    if (p->bias && step > 0) {
        c1 = 1.0 - pow(p->alpha, (double)step);
        c2 = 1.0 - pow(p->beta, (double)step);
    }
    k.a1 = 1.0 / c1;
    k.rc2 = 1.0 / c2;
    k.ss = k.eta * sqrt(c2) / c1;
    if (p->n == 0) return OPC_OK;
    /* memory-bound: below ~32k elements per thread, thread start-up costs more than it saves */
    int64_t want = p->n / opc_grain(32768) + 1;
    int nt = (int)(want < c->threads ? want : c->threads);
    if (nt <= 1) {
        adam_range(p, &k, c, outs, 0, p->n);
        return OPC_OK;
    }
#pragma omp parallel num_threads(nt)
    {
        int64_t lo, hi;
        opc_split(p->n, omp_get_num_threads(), omp_get_thread_num(), opc_grain(64), &lo, &hi);
        adam_range(p, &k, c, outs, lo, hi);
    }
    return OPC_OK;
}

static const int32_t DT_ADAM[] = {OPC_FLOAT, OPC_DOUBLE};
static const char *const ADAM_IN[] = {"R", "T", "weights", "gradients", "moment_1", "moment_2",
                                      "mixed_precision_weights", "loss_scale", "global_gradient_norm", "update_signal"};
static const uint8_t ADAM_OPT[] = {0, 0, 0, 0, 0, 0, 1, 1, 1, 1};
static const char *const ADAM_OUT[] = {"new_T", "new_moment_1", "new_moment_2", "new_weights", "new_gradients",
                                       "new_mixed_precision_weights"};
static const char *const ADAM_ATTR[] = {"alpha", "beta", "lambda", "epsilon", "max_norm_clip", "do_bias_correction",
                                        "weight_decay_mode"};

OPC_DEFINE_OP(AdamOptimizer) = {
    .desc = {.name = "AdamOptimizer", OPC_INPUTS(ADAM_IN, ADAM_OPT), OPC_OUTPUTS(ADAM_OUT), OPC_DTYPES(DT_ADAM),
             OPC_ATTRS(ADAM_ATTR),
             .notes = "one fused Adam step (weight_decay_mode 0: torch AdamW; 1: transformers' former AdamW) with "
                      "loss-scale unscaling, global-norm clipping and the update_signal skip; float32 or float64, the "
                      "mixed-precision copy float16"},
    .prepare = opc_prep_adam, .exec = opc_exec_adam};
