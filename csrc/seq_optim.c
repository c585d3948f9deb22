/* The sequence optimizers, com.microsoft AdamWOptimizer, SGDOptimizerV2 and InplaceClipGradNorm: ops of the table
 * whose parameter lists are sequences (opconform_kernels.h, OPC_SEQUENCE; reference/ops/{adamw,sgd_v2,
 * clip_grad_norm}.py are the semantics). Each is one fused kernel over the whole list, computed out of place: the
 * inputs are read and the outputs (separate sequences the caller allocated from opc_infer, each element possibly
 * the very memory of the input element it mirrors) written, the same memory traffic as an in-place update. So no
 * `restrict` between an input and its output: the loops are vectorised with `omp simd` (element i reads its inputs
 * at i before writing its outputs at i, so an output that IS its input is safe).
 *
 * The clip, and SGD and AdamW for float16 and float64, compute in double and round once when stored (float16 through
 * blocks widened to float32, half_blocks.h). SGD's and AdamW's float32 updates are float32 arithmetic, as torch's SGD
 * and fused AdamW and ORT's kernels compute them: in double, AdamW's conversions, square root and division made it
 * compute-bound (250 ms a step for BERT-base's 110 M values where torch's float32 kernel took 145-160 ms and 4 reads +
 * 3 writes of plain float32 took 120 ms, one AVX-512 core, 2026-11-28), and SGD's conversions cost a fifth of its
 * time. Each of their few operations rounds once in float32 (tests/openmp/test_omp_adamw.py and test_omp_sgd_v2.py
 * bound the error by a few float32 roundings of the terms; the spec's float32 tolerance holds it). The list's tensors are
 * laid end to end as one virtual range [0, total); each thread takes an even, 16-aligned slice of it (opc_split) and
 * walks the tensors its slice overlaps. The updates are elementwise, so the split changes no bit. The clip norm:
 * every tensor is cut into fixed NORM_BLOCK-element blocks (independent of the thread count); each block's sum of
 * squares is taken in double with 8 interleaved partial sums combined in a fixed order; the block sums are then added
 * in list order by one thread: the same bits at any thread count.
 *
 * update_signal false: the flag is false and every wanted output is a copy of its input. An empty list is refused by
 * AdamWOptimizer and SGDOptimizerV2 (as ORT and the reference do) and valid for InplaceClipGradNorm. */
#include <omp.h>
#include <stdlib.h>

#include "call.h"
#include "half_blocks.h"

#define NORM_BLOCK 16384
#define PIECE 1024 /* the block of an update whose outputs are not all wanted (the others go to scratch) */

/* ---- lists -------------------------------------------------------------------------------------------------- */

static int64_t elems(const opc_tensor *seq, int64_t i) { return opc_numel(opc_seq_at(seq, i)); }
static const void *el_in(const opc_tensor *seq, int64_t i) { return opc_seq_at(seq, i)->data; }
static void *el_out(const opc_tensor *seq, int64_t i) { return ((opc_tensor *)seq->data)[i].data; }

/* The sequences idx[0..n) (present): one count (>= min_count), one dtype (a supported one), the same shape at each
 * index, at most OPC_MAX_ELEMS elements in all (*total). */
static int32_t same_lists(opc_call *c, const int32_t *idx, int32_t n, int64_t min_count, int64_t *total) {
    const opc_tensor *first = c->in[idx[0]];
    const char *name0 = c->desc->input_names[idx[0]];
    int32_t s;
    if ((s = opc_check_supported_dtype(c, first->dtype))) return s;
    const int64_t count = opc_seq_count(first);
    if (count < min_count)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "%s is an empty sequence; at least one tensor is required", name0);
    for (int32_t k = 1; k < n; k++) {
        const opc_tensor *t = c->in[idx[k]];
        const char *name = c->desc->input_names[idx[k]];
        if (t->dtype != first->dtype)
            return opc_fail(c, OPC_ERR_UNSUPPORTED_DTYPE, "%s is a sequence of %s but %s of %s: they must be equal",
                            name, opc_dtype_name(t->dtype), name0, opc_dtype_name(first->dtype));
        if (opc_seq_count(t) != count)
            return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "%s has %lld tensors, %s has %lld", name,
                            (long long)opc_seq_count(t), name0, (long long)count);
    }
    char a[200], b[200];
    int64_t sum = 0;
    for (int64_t i = 0; i < count; i++) {
        const opc_tensor *x = opc_seq_at(first, i);
        for (int32_t k = 1; k < n; k++) {
            const opc_tensor *y = opc_seq_at(c->in[idx[k]], i);
            if (!opc_same_shape(x, y))
                return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "%s[%lld] has shape %s, %s[%lld] has %s",
                                c->desc->input_names[idx[k]], (long long)i, opc_shape_str(y, a, sizeof a), name0,
                                (long long)i, opc_shape_str(x, b, sizeof b));
        }
        sum += opc_numel(x); /* each <= 2^48 and the sum checked at every step: no overflow */
        if (sum > OPC_MAX_ELEMS)
            return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "%s holds more than 2^48 elements in all", name0);
    }
    *total = sum;
    return OPC_OK;
}

/* A scalar input: exactly one value. */
static int32_t one_value(opc_call *c, int32_t i, int32_t dt1, int32_t dt2) {
    const opc_tensor *t = c->in[i];
    char a[200];
    if (!t) return OPC_OK;
    if (t->dtype != dt1 && t->dtype != dt2)
        return opc_fail(c, OPC_ERR_UNSUPPORTED_DTYPE, "%s has dtype %s; it must be %s%s%s", c->desc->input_names[i],
                        opc_dtype_name(t->dtype), opc_dtype_name(dt1), dt2 != dt1 ? " or " : "",
                        dt2 != dt1 ? opc_dtype_name(dt2) : "");
    if (opc_numel(t) != 1)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "%s must hold exactly one value, got shape %s",
                        c->desc->input_names[i], opc_shape_str(t, a, sizeof a));
    return OPC_OK;
}

static double real_value(const opc_tensor *t) {
    return t->dtype == OPC_FLOAT ? (double)*(const float *)t->data : *(const double *)t->data;
}

/* update_signal absent or true */
static bool signal_on(const opc_tensor *t) { return !t || *(const uint8_t *)t->data != 0; }

/* offsets[i] = elements before tensor i of seq (offsets[count] = total) */
static int32_t offsets(opc_call *c, const opc_tensor *seq, int64_t **out) {
    const int64_t count = opc_seq_count(seq);
    int64_t *off = malloc((size_t)(count + 1) * sizeof *off);
    if (!off) return opc_fail(c, OPC_ERR_OUT_OF_MEMORY, "out of memory for %lld offsets", (long long)count);
    off[0] = 0;
    for (int64_t i = 0; i < count; i++) off[i + 1] = off[i] + elems(seq, i);
    *out = off;
    return OPC_OK;
}

/* the first tensor whose range ends after `pos` (off non-decreasing, off[0] = 0, pos < off[count]) */
static int64_t first_tensor(const int64_t *off, int64_t count, int64_t pos) {
    int64_t lo = 0, hi = count - 1;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (off[mid + 1] > pos)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

static int thread_count(int32_t threads, int64_t total, int64_t grain) {
    int64_t want = total / opc_grain(grain) + 1;
    return (int)(want < threads ? want : threads);
}

/* Runs BODY over the pieces [a, b) (element indices within tensor i) of every thread's slice. */
#define FOR_SLICES(total, off, count, nt, BODY)                                                                   \
    do {                                                                                                          \
        _Pragma("omp parallel num_threads(nt)") {                                                                 \
            int64_t lo_, hi_;                                                                                     \
            opc_split((total), omp_get_num_threads(), omp_get_thread_num(), 16, &lo_, &hi_);                       \
            if (lo_ < hi_) {                                                                                      \
                for (int64_t i = first_tensor((off), (count), lo_); i < (count) && (off)[i] < hi_; i++) {         \
                    int64_t a = lo_ > (off)[i] ? lo_ - (off)[i] : 0;                                              \
                    int64_t b = (hi_ < (off)[i + 1] ? hi_ : (off)[i + 1]) - (off)[i];                             \
                    if (a < b) { BODY; }                                                                          \
                }                                                                                                 \
            }                                                                                                     \
        }                                                                                                         \
    } while (0)

/* out[i] = in[i] element by element for each wanted output sequence outs[k] of input ins[k] (no copy onto itself) */
static int32_t copy_lists(opc_call *c, const opc_tensor *const *ins, opc_tensor *const *outs, int32_t n) {
    const opc_tensor *ref = ins[0];
    const int64_t count = opc_seq_count(ref);
    const size_t es = opc_dtype_size(ref->dtype);
    int64_t *off;
    int32_t s;
    if ((s = offsets(c, ref, &off))) return s;
    const int64_t total = off[count];
    int nt = thread_count(c->threads, total, 1 << 18);
    if (total > 0)
        FOR_SLICES(total, off, count, nt, {
            for (int32_t k = 0; k < n; k++) {
                if (!outs[k] || !outs[k]->data) continue;
                const char *src = (const char *)el_in(ins[k], i) + (size_t)a * es;
                char *dst = (char *)el_out(outs[k], i) + (size_t)a * es;
                if (dst != src) memmove(dst, src, (size_t)(b - a) * es);
            }
        });
    free(off);
    return OPC_OK;
}

/* ---- AdamWOptimizer ----------------------------------------------------------------------------------------- */

enum { AW_LR, AW_STEP, AW_W, AW_G, AW_M1, AW_M2, AW_US };
enum { AW_FLAG, AW_UW, AW_UM1, AW_UM2 };

typedef struct {
    int32_t dtype;
    int64_t total;
    double alpha, beta, eps, wd;
    int64_t mode, bias;
} adamw_plan;

typedef struct {
    double a, b, eps, lwd;   /* lwd = lr * weight_decay */
    double step_size;        /* mode 0: lr / c1; mode 1: lr * sqrt(c2) / c1 (lr without correction) */
    double inv_sqrt_c2;      /* mode 0: 1 / sqrt(c2) */
    double one_a, one_b;     /* 1 - alpha, 1 - beta */
} adamw_k;

#define ADAMW_LOOPS(T, SUF)                                                                                       \
    CLONES static void adamw0_##SUF(const T *w, const T *g, const T *m1, const T *m2, T *ow, T *om1, T *om2,     \
                                    int64_t n, const adamw_k *k) {                                                \
        const double a = k->a, b = k->b, oa = k->one_a, ob = k->one_b, eps = k->eps, lwd = k->lwd;               \
        const double ss = k->step_size, r2 = k->inv_sqrt_c2;                                                      \
        _Pragma("omp simd")                                                                                       \
        for (int64_t i = 0; i < n; i++) {                                                                         \
            double gi = (double)g[i], wi = (double)w[i];                                                          \
            double n1 = a * (double)m1[i] + oa * gi;                                                              \
            double n2 = b * (double)m2[i] + ob * gi * gi;                                                         \
            wi = wi - lwd * wi;                                                                                   \
            wi = wi - ss * n1 / (sqrt(n2) * r2 + eps);                                                            \
            om1[i] = (T)n1;                                                                                       \
            om2[i] = (T)n2;                                                                                       \
            ow[i] = (T)wi;                                                                                        \
        }                                                                                                         \
    }                                                                                                             \
    CLONES static void adamw1_##SUF(const T *w, const T *g, const T *m1, const T *m2, T *ow, T *om1, T *om2,     \
                                    int64_t n, const adamw_k *k) {                                                \
        const double a = k->a, b = k->b, oa = k->one_a, ob = k->one_b, eps = k->eps, lwd = k->lwd;               \
        const double ss = k->step_size;                                                                           \
        _Pragma("omp simd")                                                                                       \
        for (int64_t i = 0; i < n; i++) {                                                                         \
            double gi = (double)g[i], wi = (double)w[i];                                                          \
            double n1 = a * (double)m1[i] + oa * gi;                                                              \
            double n2 = b * (double)m2[i] + ob * gi * gi;                                                         \
            wi = wi - ss * n1 / (sqrt(n2) + eps);                                                                 \
            wi = wi - lwd * wi;                                                                                   \
            om1[i] = (T)n1;                                                                                       \
            om2[i] = (T)n2;                                                                                       \
            ow[i] = (T)wi;                                                                                        \
        }                                                                                                         \
    }                                                                                                             \
    /* one piece; outputs not wanted (NULL) are written to scratch, PIECE elements at a time */                   \
    static void adamw_piece_##SUF(int64_t mode, const T *w, const T *g, const T *m1, const T *m2, T *ow, T *om1, \
                                  T *om2, int64_t n, const adamw_k *k) {                                          \
        void (*f)(const T *, const T *, const T *, const T *, T *, T *, T *, int64_t, const adamw_k *) =          \
            mode == 0 ? adamw0_##SUF : adamw1_##SUF;                                                              \
        if (ow && om1 && om2) {                                                                                   \
            f(w, g, m1, m2, ow, om1, om2, n, k);                                                                  \
            return;                                                                                               \
        }                                                                                                         \
        T scratch[3][PIECE];                                                                                      \
        for (int64_t p = 0; p < n; p += PIECE) {                                                                  \
            int64_t m = n - p < PIECE ? n - p : PIECE;                                                            \
            f(w + p, g + p, m1 + p, m2 + p, ow ? ow + p : scratch[0], om1 ? om1 + p : scratch[1],                 \
              om2 ? om2 + p : scratch[2], m, k);                                                                  \
        }                                                                                                         \
    }
ADAMW_LOOPS(double, f64) /* simd: 2 */

/* float32: the same two updates in float32 arithmetic (the file's comment says why) */
CLONES static void adamw0_f32(const float *w, const float *g, const float *m1, const float *m2, float *ow, float *om1,
                              float *om2, int64_t n, const adamw_k *k) {
    const float a = (float)k->a, b = (float)k->b, oa = (float)k->one_a, ob = (float)k->one_b, eps = (float)k->eps;
    const float lwd = (float)k->lwd, ss = (float)k->step_size, r2 = (float)k->inv_sqrt_c2;
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        const float gi = g[i]; /* simd: 1 */
        const float n1 = a * m1[i] + oa * gi, n2 = b * m2[i] + ob * gi * gi;
        const float wi = w[i] - lwd * w[i]; /* not w * (1 - lwd): an infinite weight decays to NaN, as the math's */
        om1[i] = n1;
        om2[i] = n2;
        ow[i] = wi - ss * n1 / (sqrtf(n2) * r2 + eps);
    }
}
CLONES static void adamw1_f32(const float *w, const float *g, const float *m1, const float *m2, float *ow, float *om1,
                              float *om2, int64_t n, const adamw_k *k) {
    const float a = (float)k->a, b = (float)k->b, oa = (float)k->one_a, ob = (float)k->one_b, eps = (float)k->eps;
    const float lwd = (float)k->lwd, ss = (float)k->step_size;
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        const float gi = g[i]; /* simd: 1 */
        const float n1 = a * m1[i] + oa * gi, n2 = b * m2[i] + ob * gi * gi;
        const float u = w[i] - ss * n1 / (sqrtf(n2) + eps);
        om1[i] = n1;
        om2[i] = n2;
        ow[i] = u - lwd * u;
    }
}
static void adamw_piece_f32(int64_t mode, const float *w, const float *g, const float *m1, const float *m2, float *ow,
                            float *om1, float *om2, int64_t n, const adamw_k *k) {
    void (*f)(const float *, const float *, const float *, const float *, float *, float *, float *, int64_t,
              const adamw_k *) = mode == 0 ? adamw0_f32 : adamw1_f32;
    if (ow && om1 && om2) {
        f(w, g, m1, m2, ow, om1, om2, n, k);
        return;
    }
    float scratch[3][PIECE];
    for (int64_t p = 0; p < n; p += PIECE) {
        int64_t m = n - p < PIECE ? n - p : PIECE;
        f(w + p, g + p, m1 + p, m2 + p, ow ? ow + p : scratch[0], om1 ? om1 + p : scratch[1],
          om2 ? om2 + p : scratch[2], m, k);
    }
}

/* float16: blocks of HALF_BLOCK inputs widened to float (exactly) before any output of the block is written (an
 * output may be its input), then the double update of the loops above, each result rounded once to float16. */
static void adamw_piece_f16(int64_t mode, const uint16_t *w, const uint16_t *g, const uint16_t *m1, const uint16_t *m2,
                            uint16_t *ow, uint16_t *om1, uint16_t *om2, int64_t n, const adamw_k *k) {
    const double a = k->a, b = k->b, oa = k->one_a, ob = k->one_b, eps = k->eps, lwd = k->lwd;
    const double ss = k->step_size, r2 = k->inv_sqrt_c2;
    float fw[HALF_BLOCK], fg[HALF_BLOCK], f1[HALF_BLOCK], f2[HALF_BLOCK];
    for (int64_t p = 0; p < n; p += HALF_BLOCK) {
        const int64_t m = n - p < HALF_BLOCK ? n - p : HALF_BLOCK;
        widen_f16(w + p, fw, m);
        widen_f16(g + p, fg, m);
        widen_f16(m1 + p, f1, m);
        widen_f16(m2 + p, f2, m);
        for (int64_t i = 0; i < m; i++) {
            double gi = (double)fg[i], wi = (double)fw[i];
            double n1 = a * (double)f1[i] + oa * gi;
            double n2 = b * (double)f2[i] + ob * gi * gi;
            if (mode == 0) {
                wi = wi - lwd * wi;
                wi = wi - ss * n1 / (sqrt(n2) * r2 + eps);
            } else {
                wi = wi - ss * n1 / (sqrt(n2) + eps);
                wi = wi - lwd * wi;
            }
            if (om1) om1[p + i] = opc_f64_to_f16(n1);
            if (om2) om2[p + i] = opc_f64_to_f16(n2);
            if (ow) ow[p + i] = opc_f64_to_f16(wi);
        }
    }
}

static int32_t prep_adamw(opc_call *c, void *plan_v, opc_shape *outs) {
    adamw_plan *p = plan_v;
    int32_t s;
    for (int32_t i = AW_LR; i <= AW_M2; i++)
        if ((s = opc_require(c, i))) return s;
    static const int32_t LISTS[] = {AW_W, AW_G, AW_M1, AW_M2};
    if ((s = same_lists(c, LISTS, OPC_COUNT(LISTS), 1, &p->total))) return s;
    if ((s = one_value(c, AW_LR, OPC_FLOAT, OPC_DOUBLE)) || (s = one_value(c, AW_STEP, OPC_INT64, OPC_INT64)) ||
        (s = one_value(c, AW_US, OPC_BOOL, OPC_BOOL)))
        return s;
    if ((s = opc_attr_float(c, "alpha", 0.9, &p->alpha, NULL)) ||
        (s = opc_attr_float(c, "beta", 0.999, &p->beta, NULL)) ||
        (s = opc_attr_float(c, "epsilon", 1e-8, &p->eps, NULL)) ||
        (s = opc_attr_float(c, "weight_decay", 0.01, &p->wd, NULL)) ||
        (s = opc_attr_int(c, "adam_mode", 0, &p->mode)) || (s = opc_attr_int(c, "correct_bias", 1, &p->bias)))
        return s;
    if (p->mode != 0 && p->mode != 1)
        return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "adam_mode %lld must be 0 or 1", (long long)p->mode);
    if (p->bias != 0 && p->bias != 1)
        return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "correct_bias %lld must be 0 or 1", (long long)p->bias);
    if (p->mode == 0 && p->bias != 1)
        return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "adam_mode 0 (torch AdamW) requires correct_bias 1");
    p->dtype = c->in[AW_W]->dtype;
    opc_shape_from(&outs[AW_FLAG], c->in[AW_STEP]); /* the reference's updated_flag has step's shape */
    outs[AW_FLAG].dtype = OPC_BOOL;
    opc_seq_output(&outs[AW_UW], p->dtype, AW_W);
    opc_seq_output(&outs[AW_UM1], p->dtype, AW_M1);
    opc_seq_output(&outs[AW_UM2], p->dtype, AW_M2);
    return OPC_OK;
}

static int32_t check_adamw(opc_call *c, const void *plan_v) {
    const adamw_plan *p = plan_v;
    const int64_t step = *(const int64_t *)c->in[AW_STEP]->data;
    if (p->bias == 1 && step < 1)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "step %lld with correct_bias 1: bias correction needs step >= 1",
                        (long long)step);
    return OPC_OK;
}

static int32_t exec_adamw(opc_call *c, const void *plan_v, opc_tensor *outs) {
    const adamw_plan *p = plan_v;
    int32_t s;
    if ((s = check_adamw(c, plan_v))) return s;
    const bool on = signal_on(c->in[AW_US]);
    if (outs[AW_FLAG].data) *(uint8_t *)outs[AW_FLAG].data = on;
    const opc_tensor *W = c->in[AW_W], *G = c->in[AW_G], *M1 = c->in[AW_M1], *M2 = c->in[AW_M2];
    opc_tensor *UW = outs[AW_UW].data ? &outs[AW_UW] : NULL, *U1 = outs[AW_UM1].data ? &outs[AW_UM1] : NULL,
               *U2 = outs[AW_UM2].data ? &outs[AW_UM2] : NULL;
    if (!UW && !U1 && !U2) return OPC_OK;
    if (!on) {
        const opc_tensor *ins[] = {W, M1, M2};
        opc_tensor *const os[] = {UW, U1, U2};
        return copy_lists(c, ins, os, 3);
    }
    const double lr = real_value(c->in[AW_LR]);
    const int64_t step = *(const int64_t *)c->in[AW_STEP]->data;
    double c1 = 1.0, c2 = 1.0;
    if (p->bias) {
        c1 = 1.0 - pow(p->alpha, (double)step);
        c2 = 1.0 - pow(p->beta, (double)step);
    }
    adamw_k k = {.a = p->alpha, .b = p->beta, .eps = p->eps, .lwd = lr * p->wd,
                 .step_size = p->mode == 0 ? lr / c1 : lr * sqrt(c2) / c1, .inv_sqrt_c2 = 1.0 / sqrt(c2),
                 .one_a = 1.0 - p->alpha, .one_b = 1.0 - p->beta};
    const int64_t count = opc_seq_count(W), total = p->total;
    if (total == 0) return OPC_OK;
    int64_t *off;
    if ((s = offsets(c, W, &off))) return s;
    int nt = thread_count(c->threads, total, 32768);
    const int64_t mode = p->mode;
#define AW_PIECE(T, SUF)                                                                                          \
    adamw_piece_##SUF(mode, (const T *)el_in(W, i) + a, (const T *)el_in(G, i) + a, (const T *)el_in(M1, i) + a,  \
                      (const T *)el_in(M2, i) + a, UW ? (T *)el_out(UW, i) + a : NULL,                           \
                      U1 ? (T *)el_out(U1, i) + a : NULL, U2 ? (T *)el_out(U2, i) + a : NULL, b - a, &k)
    if (p->dtype == OPC_FLOAT)
        FOR_SLICES(total, off, count, nt, AW_PIECE(float, f32));
    else if (p->dtype == OPC_DOUBLE)
        FOR_SLICES(total, off, count, nt, AW_PIECE(double, f64));
    else
        FOR_SLICES(total, off, count, nt, AW_PIECE(uint16_t, f16));
#undef AW_PIECE
    free(off);
    return OPC_OK;
}

static const char *const AW_IN[] = {"lr", "step", "weights", "gradients", "momentums_1", "momentums_2",
                                    "update_signal"};
static const uint8_t AW_OPT[] = {0, 0, 0, 0, 0, 0, 1};
static const char *const AW_OUT[] = {"updated_flag", "updated_weights", "updated_momentums_1", "updated_momentums_2"};
static const char *const AW_ATTR[] = {"alpha", "beta", "epsilon", "weight_decay", "adam_mode", "correct_bias"};
static const int32_t DT_SEQ[] = {OPC_FLOAT, OPC_DOUBLE, OPC_FLOAT16};

OPC_DEFINE_OP(AdamWOptimizer) = {
    .desc = {.name = "AdamWOptimizer", OPC_INPUTS(AW_IN, AW_OPT), OPC_OUTPUTS(AW_OUT), OPC_DTYPES(DT_SEQ),
             OPC_ATTRS(AW_ATTR),
             .notes = "one fused AdamW step over the whole list (adam_mode 0: torch AdamW; 1: transformers' former "
                      "AdamW), out of place, float32, float64 or float16 elements computed in double; weights, "
                      "gradients and momentums are sequences, updated_flag has step's shape; weight_decay defaults to "
                      "0.01"},
    .prepare = prep_adamw, .exec = exec_adamw, .check = check_adamw,
    .seq_inputs = 1u << AW_W | 1u << AW_G | 1u << AW_M1 | 1u << AW_M2,
    .seq_outputs = 1u << AW_UW | 1u << AW_UM1 | 1u << AW_UM2};

/* ---- SGDOptimizerV2 ----------------------------------------------------------------------------------------- */

enum { SG_LR, SG_W, SG_G, SG_US };
enum { SG_FLAG, SG_UW };

typedef struct {
    int32_t dtype;
    int64_t total;
} sgd_plan;

#define SGD_LOOP(T, SUF)                                                                                          \
    CLONES static void sgd_##SUF(const T *w, const T *g, T *ow, int64_t n, double lr) {                           \
        _Pragma("omp simd")                                                                                       \
        for (int64_t i = 0; i < n; i++) ow[i] = (T)((double)w[i] - lr * (double)g[i]);                           \
    }
SGD_LOOP(double, f64) /* simd: 1 */
/* float32 in float32 arithmetic, as torch's SGD: the double conversions cost a fifth of the step (68 ms against 54 ms
 * for BERT-base's list, one AVX2 core, 2026-11-28); two roundings (the product, the difference) */
CLONES static void sgd_f32(const float *w, const float *g, float *ow, int64_t n, double lr) {
    const float l = (float)lr;
#pragma omp simd
    for (int64_t i = 0; i < n; i++) ow[i] = w[i] - l * g[i]; /* simd: 1 */
}
static void sgd_f16(const uint16_t *w, const uint16_t *g, uint16_t *ow, int64_t n, double lr) {
    float fw[HALF_BLOCK], fg[HALF_BLOCK];
    for (int64_t p = 0; p < n; p += HALF_BLOCK) {
        const int64_t m = n - p < HALF_BLOCK ? n - p : HALF_BLOCK;
        widen_f16(w + p, fw, m);
        widen_f16(g + p, fg, m);
        for (int64_t i = 0; i < m; i++) ow[p + i] = opc_f64_to_f16((double)fw[i] - lr * (double)fg[i]);
    }
}

static int32_t prep_sgd(opc_call *c, void *plan_v, opc_shape *outs) {
    sgd_plan *p = plan_v;
    int32_t s;
    for (int32_t i = SG_LR; i <= SG_G; i++)
        if ((s = opc_require(c, i))) return s;
    static const int32_t LISTS[] = {SG_W, SG_G};
    if ((s = same_lists(c, LISTS, OPC_COUNT(LISTS), 1, &p->total))) return s;
    if ((s = one_value(c, SG_LR, OPC_FLOAT, OPC_DOUBLE)) || (s = one_value(c, SG_US, OPC_BOOL, OPC_BOOL))) return s;
    p->dtype = c->in[SG_W]->dtype;
    opc_shape_from(&outs[SG_FLAG], c->in[SG_LR]); /* the reference's update_completed has lr's shape */
    outs[SG_FLAG].dtype = OPC_BOOL;
    opc_seq_output(&outs[SG_UW], p->dtype, SG_W);
    return OPC_OK;
}

static int32_t exec_sgd(opc_call *c, const void *plan_v, opc_tensor *outs) {
    const sgd_plan *p = plan_v;
    const bool on = signal_on(c->in[SG_US]);
    if (outs[SG_FLAG].data) *(uint8_t *)outs[SG_FLAG].data = on;
    const opc_tensor *W = c->in[SG_W], *G = c->in[SG_G];
    opc_tensor *UW = outs[SG_UW].data ? &outs[SG_UW] : NULL;
    if (!UW) return OPC_OK;
    if (!on) {
        const opc_tensor *ins[] = {W};
        opc_tensor *const os[] = {UW};
        return copy_lists(c, ins, os, 1);
    }
    const double lr = real_value(c->in[SG_LR]);
    const int64_t count = opc_seq_count(W), total = p->total;
    if (total == 0) return OPC_OK;
    int64_t *off;
    int32_t s;
    if ((s = offsets(c, W, &off))) return s;
    int nt = thread_count(c->threads, total, 65536);
    if (p->dtype == OPC_FLOAT)
        FOR_SLICES(total, off, count, nt,
                   sgd_f32((const float *)el_in(W, i) + a, (const float *)el_in(G, i) + a,
                           (float *)el_out(UW, i) + a, b - a, lr));
    else if (p->dtype == OPC_DOUBLE)
        FOR_SLICES(total, off, count, nt,
                   sgd_f64((const double *)el_in(W, i) + a, (const double *)el_in(G, i) + a,
                           (double *)el_out(UW, i) + a, b - a, lr));
    else
        FOR_SLICES(total, off, count, nt,
                   sgd_f16((const uint16_t *)el_in(W, i) + a, (const uint16_t *)el_in(G, i) + a,
                           (uint16_t *)el_out(UW, i) + a, b - a, lr));
    free(off);
    return OPC_OK;
}

static const char *const SG_IN[] = {"lr", "weights", "gradients", "update_signal"};
static const uint8_t SG_OPT[] = {0, 0, 0, 1};
static const char *const SG_OUT[] = {"update_completed", "updated_weights"};

OPC_DEFINE_OP(SGDOptimizerV2) = {
    .desc = {.name = "SGDOptimizerV2", OPC_INPUTS(SG_IN, SG_OPT), OPC_OUTPUTS(SG_OUT), OPC_DTYPES(DT_SEQ),
             .notes = "w - lr * g over the whole list, out of place, float32, float64 or float16 elements computed in "
                      "double; weights and gradients are sequences, update_completed has lr's shape"},
    .prepare = prep_sgd, .exec = exec_sgd,
    .seq_inputs = 1u << SG_W | 1u << SG_G, .seq_outputs = 1u << SG_UW};

/* ---- InplaceClipGradNorm ------------------------------------------------------------------------------------ */

typedef struct {
    int32_t dtype;
    int64_t total;
    double max_norm;
} clip_plan;

#define CLIP_LOOPS(T, SUF)                                                                                        \
    /* sum of squares of x[0, n) in double: 8 interleaved partial sums, combined pairwise in a fixed order */    \
    CLONES static double sumsq_##SUF(const T *restrict x, int64_t n) {                                            \
        double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};                                                                 \
        int64_t i = 0;                                                                                            \
        for (; i + 8 <= n; i += 8)                                                                                \
            for (int j = 0; j < 8; j++) {                                                                         \
                double v = (double)x[i + j];                                                                      \
                acc[j] += v * v;                                                                                  \
            }                                                                                                     \
        for (int j = 0; i < n; i++, j++) {                                                                        \
            double v = (double)x[i];                                                                              \
            acc[j] += v * v;                                                                                      \
        }                                                                                                         \
        return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));                 \
    }                                                                                                             \
    CLONES static void scale_##SUF(const T *x, T *y, int64_t n, double c) {                                       \
        _Pragma("omp simd")                                                                                       \
        for (int64_t i = 0; i < n; i++) y[i] = (T)((double)x[i] * c);                                            \
    }
CLIP_LOOPS(float, f32)  /* simd: 1 (scale; the float32 sum of squares widens to double at half width) */
CLIP_LOOPS(double, f64) /* simd: 2 */
/* float16: the sum of squares of HALF_BLOCK-element chunks widened to float (fixed chunks: the same bits at any
 * split), added in order; the scaled values rounded once */
static double sumsq_f16(const uint16_t *x, int64_t n) {
    float f[HALF_BLOCK];
    double sum = 0.0;
    for (int64_t p = 0; p < n; p += HALF_BLOCK) {
        const int64_t m = n - p < HALF_BLOCK ? n - p : HALF_BLOCK;
        widen_f16(x + p, f, m);
        sum += sumsq_f32(f, m);
    }
    return sum;
}
static void scale_f16(const uint16_t *x, uint16_t *y, int64_t n, double c) {
    float f[HALF_BLOCK];
    for (int64_t p = 0; p < n; p += HALF_BLOCK) {
        const int64_t m = n - p < HALF_BLOCK ? n - p : HALF_BLOCK;
        widen_f16(x + p, f, m);
        for (int64_t i = 0; i < m; i++) y[p + i] = opc_f64_to_f16((double)f[i] * c);
    }
}

static int32_t prep_clip(opc_call *c, void *plan_v, opc_shape *outs) {
    clip_plan *p = plan_v;
    int32_t s;
    if ((s = opc_require(c, 0))) return s;
    static const int32_t LISTS[] = {0};
    if ((s = same_lists(c, LISTS, 1, 0, &p->total))) return s;
    const char *norm_type;
    if ((s = opc_attr_float(c, "max_norm", 1.0, &p->max_norm, NULL)) ||
        (s = opc_attr_string(c, "norm_type", "fro", &norm_type)))
        return s;
    if (strcmp(norm_type, "fro") != 0)
        return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "norm_type '%s' is not supported: only 'fro'", norm_type);
    if (!(p->max_norm >= 0.0)) /* a negative one would flip every gradient's sign; NaN compares false too */
        return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "max_norm %g must be >= 0", p->max_norm);
    p->dtype = c->in[0]->dtype;
    opc_seq_output(&outs[0], p->dtype, 0);
    return OPC_OK;
}

static int32_t exec_clip(opc_call *c, const void *plan_v, opc_tensor *outs) {
    const clip_plan *p = plan_v;
    const opc_tensor *G = c->in[0];
    opc_tensor *O = &outs[0];
    const int64_t count = opc_seq_count(G), total = p->total;
    if (count == 0) return OPC_OK;
    int64_t *off, *boff;
    int32_t s;
    if ((s = offsets(c, G, &off))) return s;
    /* blocks: tensor i holds blocks [boff[i], boff[i + 1]) of NORM_BLOCK elements (its last one shorter) */
    boff = malloc((size_t)(count + 1) * sizeof *boff);
    if (!boff) {
        free(off);
        return opc_fail(c, OPC_ERR_OUT_OF_MEMORY, "out of memory for %lld block offsets", (long long)count);
    }
    boff[0] = 0;
    for (int64_t i = 0; i < count; i++) boff[i + 1] = boff[i] + (elems(G, i) + NORM_BLOCK - 1) / NORM_BLOCK;
    const int64_t nblocks = boff[count];
    double *part = malloc((size_t)(nblocks > 0 ? nblocks : 1) * sizeof *part);
    if (!part) {
        free(off);
        free(boff);
        return opc_fail(c, OPC_ERR_OUT_OF_MEMORY, "out of memory for %lld partial sums", (long long)nblocks);
    }
    const int32_t dt = p->dtype;
    int nt = thread_count(c->threads, total, 65536);
#pragma omp parallel num_threads(nt)
    {
        int64_t lo, hi;
        opc_split(nblocks, omp_get_num_threads(), omp_get_thread_num(), 1, &lo, &hi);
        if (lo < hi) {
            int64_t i = 0;
            while (boff[i + 1] <= lo) i++; /* linear: fine, as the offsets pass above is */
            for (int64_t bk = lo; bk < hi; bk++) {
                while (boff[i + 1] <= bk) i++;
                int64_t a = (bk - boff[i]) * NORM_BLOCK, n = elems(G, i);
                int64_t e = a + NORM_BLOCK < n ? a + NORM_BLOCK : n;
                part[bk] = dt == OPC_FLOAT    ? sumsq_f32((const float *)el_in(G, i) + a, e - a)
                           : dt == OPC_DOUBLE ? sumsq_f64((const double *)el_in(G, i) + a, e - a)
                                              : sumsq_f16((const uint16_t *)el_in(G, i) + a, e - a);
            }
        }
    }
    double sum = 0.0;
    for (int64_t bk = 0; bk < nblocks; bk++) sum += part[bk];
    const double norm = sqrt(sum);
    const double coef = p->max_norm / (norm + 1e-6);
    if (coef < 1.0 || coef != coef) { /* a NaN coefficient propagates, as min(NaN, 1) = NaN does in the reference */
        if (dt == OPC_FLOAT)
            FOR_SLICES(total, off, count, nt,
                       scale_f32((const float *)el_in(G, i) + a, (float *)el_out(O, i) + a, b - a, coef));
        else if (dt == OPC_DOUBLE)
            FOR_SLICES(total, off, count, nt,
                       scale_f64((const double *)el_in(G, i) + a, (double *)el_out(O, i) + a, b - a, coef));
        else
            FOR_SLICES(total, off, count, nt,
                       scale_f16((const uint16_t *)el_in(G, i) + a, (uint16_t *)el_out(O, i) + a, b - a, coef));
    } else {
        const opc_tensor *ins[] = {G};
        opc_tensor *const os[] = {O};
        s = copy_lists(c, ins, os, 1);
    }
    free(part);
    free(boff);
    free(off);
    return s;
}

static const char *const CL_IN[] = {"gradients"};
static const uint8_t CL_OPT[] = {0};
static const char *const CL_OUT[] = {"clipped_gradients"};
static const char *const CL_ATTR[] = {"max_norm", "norm_type"};

OPC_DEFINE_OP(InplaceClipGradNorm) = {
    .desc = {.name = "InplaceClipGradNorm", OPC_INPUTS(CL_IN, CL_OPT), OPC_OUTPUTS(CL_OUT), OPC_DTYPES(DT_SEQ),
             OPC_ATTRS(CL_ATTR),
             .notes = "g * min(max_norm / (||g||_2 + 1e-6), 1) over the whole list (the joint norm summed in double "
                      "in fixed blocks), out of place; norm_type 'fro' only; an empty list is valid"},
    .prepare = prep_clip, .exec = exec_clip, .seq_inputs = 1u, .seq_outputs = 1u};
