/* BatchNormalizationGrad (com.microsoft): float32, float64, float16 (loaded into float32, rounded once).
 *
 * X and dY are [N, C, S] (S = the spatial dims' product, 1 for 2-D input); mean and variance are the
 * saved per-channel statistics, variance holding the inverse standard deviation as ORT's forward
 * (BatchNormInternal) saves it. Per channel: bias_grad = sum dY, scale_grad = inv * sum dY * (X - mean),
 * X_grad = a * dY - a * bias_grad / m - a * inv * scale_grad / m * (X - mean), a = scale * inv, m = N * S.
 *
 * Threads split the channels; each channel's sums are made by one thread in an order fixed by the shape,
 * so every output is bitwise the same at any thread count:
 * - S >= LANES (plane mode): each channel's N planes summed in n order into LANES interleaved partials
 *   (element s of a plane into partial s % LANES) combined in lane order; channels go in blocks whose
 *   dY and X fit in cache, planes in memory order, then X_grad is written while the block is in cache;
 * - S < LANES (column mode: 2-D input, tiny spatial dims): rows n in order, each thread's channel range
 *   contiguous in memory, each channel summed sequentially over (n, s); then a second pass for X_grad. */
#include <omp.h>
#include <stdlib.h>

#include "batch_norm_common.h"

#define MAX_BLOCK 64 /* channels per plane-mode block */
#define BLOCK_BYTES (1024 * 1024) /* dY and X of one block: long contiguous runs per n, still in cache for X_grad */

typedef struct {
    int32_t dtype;
    int64_t N, C, S;
} bn_plan;

int32_t opc_prep_batchnorm_grad(opc_call *c, void *plan_v, opc_shape *outs) {
    bn_plan *p = plan_v;
    int32_t s;
    for (int32_t i = 0; i < 5; i++)
        if ((s = opc_require(c, i))) return s;
    const opc_tensor *dy = c->in[0], *x = c->in[1];
    const int32_t others[] = {0, 2, 3, 4};
    if ((s = opc_check_supported_dtype(c, x->dtype))) return s;
    if ((s = opc_check_dtypes(c, x->dtype, others, 4))) return s;
    char a[200], b[200];
    if (x->rank < 2)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "X must be [N, C, ...] (rank >= 2), got shape %s",
                        opc_shape_str(x, a, sizeof a));
    if (!opc_same_shape(dy, x))
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "dY shape %s differs from X shape %s",
                        opc_shape_str(dy, a, sizeof a), opc_shape_str(x, b, sizeof b));
    int64_t C = x->shape[1];
    for (int32_t i = 2; i < 5; i++) {
        const opc_tensor *t = c->in[i];
        if (t->rank != 1 || t->shape[0] != C)
            return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "%s shape %s must be [C] = [%lld] (X %s)",
                            c->desc->input_names[i], opc_shape_str(t, a, sizeof a), (long long)C,
                            opc_shape_str(x, b, sizeof b));
    }
    double eps;
    bool given;
    if ((s = opc_attr_float(c, "epsilon", 0.0, &eps, &given))) return s;
    if (!given) return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "attribute epsilon is required");
    if (!(eps >= 0) || isinf(eps))
        return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "epsilon %g must be finite and >= 0", eps);
    p->dtype = x->dtype;
    p->N = x->shape[0];
    p->C = C;
    p->S = 1;
    for (int32_t i = 2; i < x->rank; i++) p->S *= x->shape[i];
    opc_shape_from(&outs[0], x);
    opc_shape_from(&outs[1], c->in[2]);
    opc_shape_from(&outs[2], c->in[2]);
    return OPC_OK;
}

/* ---- kernels per storage type ST / accumulator AT (lanes, vector types and loads: batch_norm_common.h) ---- */

/* One plane (n, ch) of S elements added into the channel's lane partials pb, ps (NV vectors each, in memory). */
#define PLANE_SUMS(SFX, ST, AT, LD)                                                                \
    static inline void plane_sums_##SFX(const ST *restrict d, const ST *restrict v, AT mu, int64_t S, \
                                        AT *restrict pb_mem, AT *restrict ps_mem) {                \
        enum { VW = sizeof(VT_##SFX) / sizeof(AT), NV = LANES / VW };                              \
        VT_##SFX pb[NV], ps[NV], vmu = (VT_##SFX){0} + mu;                                         \
        memcpy(pb, pb_mem, sizeof pb);                                                             \
        memcpy(ps, ps_mem, sizeof ps);                                                             \
        int64_t i = 0;                                                                             \
        for (; i + LANES <= S; i += LANES)                                                         \
            for (int j = 0; j < NV; j++) {                                                         \
                VT_##SFX g = LDV_##SFX(d + i + j * VW);                                            \
                pb[j] += g;                                                                        \
                ps[j] += g * (LDV_##SFX(v + i + j * VW) - vmu);                                    \
            }                                                                                      \
        if (i < S) { /* the tail, zero-padded: element s still lands in lane s % LANES */          \
            AT td[LANES] = {0}, tx[LANES] = {0};                                                   \
            for (int k = 0; k < S - i; k++) td[k] = LD(d, i + k), tx[k] = LD(v, i + k) - mu;       \
            for (int j = 0; j < NV; j++) {                                                         \
                VT_##SFX g, t;                                                                     \
                memcpy(&g, td + j * VW, sizeof g);                                                 \
                memcpy(&t, tx + j * VW, sizeof t);                                                 \
                pb[j] += g;                                                                        \
                ps[j] += g * t;                                                                    \
            }                                                                                      \
        }                                                                                          \
        memcpy(pb_mem, pb, sizeof pb);                                                             \
        memcpy(ps_mem, ps, sizeof ps);                                                             \
    }
PLANE_SUMS(f32, float, float, LD_ID)
PLANE_SUMS(f64, double, double, LD_ID)
#if defined(__F16C__)
PLANE_SUMS(f16, uint16_t, float, LD_F16)
#else
/* float16 without F16C: blocks of HALF_BLOCK (a multiple of LANES, so every element keeps its lane) widened
 * by opc_f16_to_f32's integer form, which GCC vectorises, and summed by the float32 code (1.6x faster than
 * widening in the loop) */
static inline void plane_sums_f16(const uint16_t *restrict d, const uint16_t *restrict v, float mu, int64_t S,
                                  float *restrict pb, float *restrict ps) {
    float fd[HALF_BLOCK], fv[HALF_BLOCK];
    for (int64_t i0 = 0; i0 < S; i0 += HALF_BLOCK) {
        const int64_t m = S - i0 < HALF_BLOCK ? S - i0 : HALF_BLOCK;
        widen_f16(d + i0, fd, m);
        widen_f16(v + i0, fv, m);
        plane_sums_f32(fd, fv, mu, m, pb, ps);
    }
}
#endif

/* X_grad over one contiguous run: o = a * dY + k0 + k1 * (X - mean) */
#define XGRAD_RUN(SFX, T)                                                                          \
    static inline void xgrad_run_##SFX(T *restrict o, const T *restrict d, const T *restrict v, T a, T k0, \
                                       T k1, T mu, int64_t S) {                                    \
        for (int64_t i = 0; i < S; i++) o[i] = a * d[i] + k0 + k1 * (v[i] - mu);                  \
    }
XGRAD_RUN(f32, float)
XGRAD_RUN(f64, double)
/* float16: the same float32 formula on blocks widened exactly (8 at a time with F16C), each result rounded
 * once as the scalar conversion rounds it; a scalar conversion per element made float16 3.4x slower than
 * float32 on the bench's shape. */
static void xgrad_run_f16(uint16_t *restrict o, const uint16_t *restrict d, const uint16_t *restrict v, float a,
                          float k0, float k1, float mu, int64_t S) {
    float fd[HALF_BLOCK], fv[HALF_BLOCK], fo[HALF_BLOCK];
    for (int64_t i0 = 0; i0 < S; i0 += HALF_BLOCK) {
        const int64_t m = S - i0 < HALF_BLOCK ? S - i0 : HALF_BLOCK;
        widen_f16(d + i0, fd, m);
        widen_f16(v + i0, fv, m);
        xgrad_run_f32(fo, fd, fv, a, k0, k1, mu, m);
        narrow_f16(fo, o + i0, m);
    }
}

/* The per-channel values of one type, converted to AT once (C values: cheap), and X_grad's coefficients
 * from the sums: dX = a * dY + k0 + k1 * (X - mean). */
#define KERNELS(SFX, ST, AT, LD, STO)                                                              \
    static inline void coef_##SFX(AT db, AT dsx, AT sc, AT iv, int64_t m, AT *a, AT *k0, AT *k1) { \
        AT inv_m = m > 0 ? (AT)1 / (AT)m : (AT)0;                                                  \
        *a = sc * iv;                                                                              \
        *k0 = -*a * db * inv_m;                                                                    \
        *k1 = -*a * iv * (iv * dsx) * inv_m;                                                       \
    }                                                                                              \
    static inline void store_sums_##SFX(ST *gs, ST *gb, int64_t ch, AT dsx, AT db, AT iv) {        \
        if (gs) gs[ch] = STO(iv * dsx);                                                            \
        if (gb) gb[ch] = STO(db);                                                                  \
    }                                                                                              \
    /* Plane mode: channels [c0, c1) in blocks of `cb` whose data fits in cache, each block's planes  \
     * in memory order (n, then channel) for the sums and again for X_grad. A channel's lanes take its \
     * planes in n order whatever the block size, so the sums do not depend on it. */              \
    CLONES static void planes_##SFX(const ST *restrict dy, const ST *restrict x,                   \
                                    const ST *restrict scale, const ST *restrict mean,             \
                                    const ST *restrict inv, ST *restrict dx, ST *restrict gs,      \
                                    ST *restrict gb, int64_t N, int64_t C, int64_t S, int64_t c0,  \
                                    int64_t c1, int64_t cb) {                                      \
        _Alignas(64) AT lanes[MAX_BLOCK][2][LANES]; /* per channel of the block: dY, dY * (X - mean) */ \
        AT k0s[MAX_BLOCK], k1s[MAX_BLOCK], as[MAX_BLOCK];                                          \
        for (int64_t b0 = c0; b0 < c1; b0 += cb) {                                                 \
            int64_t b1 = b0 + cb < c1 ? b0 + cb : c1;                                              \
            memset(lanes, 0, (size_t)(b1 - b0) * sizeof lanes[0]);                                 \
            for (int64_t n = 0; n < N; n++)                                                        \
                for (int64_t ch = b0; ch < b1; ch++)                                               \
                    plane_sums_##SFX(dy + (n * C + ch) * S, x + (n * C + ch) * S, (AT)LD(mean, ch), S, \
                                     lanes[ch - b0][0], lanes[ch - b0][1]);                        \
            for (int64_t ch = b0; ch < b1; ch++) {                                                 \
                AT db = 0, dsx = 0, iv = (AT)LD(inv, ch);                                          \
                for (int k = 0; k < LANES; k++) db += lanes[ch - b0][0][k], dsx += lanes[ch - b0][1][k]; \
                store_sums_##SFX(gs, gb, ch, dsx, db, iv);                                         \
                coef_##SFX(db, dsx, (AT)LD(scale, ch), iv, N * S, &as[ch - b0], &k0s[ch - b0], &k1s[ch - b0]); \
            }                                                                                      \
            if (!dx) continue;                                                                     \
            for (int64_t n = 0; n < N; n++)                                                        \
                for (int64_t ch = b0; ch < b1; ch++) {                                             \
                    const ST *d = dy + (n * C + ch) * S, *v = x + (n * C + ch) * S;                \
                    ST *o = dx + (n * C + ch) * S;                                                 \
                    xgrad_run_##SFX(o, d, v, as[ch - b0], k0s[ch - b0], k1s[ch - b0], (AT)LD(mean, ch), S); \
                }                                                                                  \
        }                                                                                          \
    }                                                                                              \
    /* Column mode: channels [c0, c1) together, rows in order; sb / ss: this range's sums. */     \
    CLONES static void columns_##SFX(const ST *restrict dy, const ST *restrict x,                  \
                                     const ST *restrict scale, const ST *restrict mean,            \
                                     const ST *restrict inv, ST *restrict dx, ST *restrict gs,     \
                                     ST *restrict gb, AT *restrict sb, AT *restrict ss,            \
                                     int64_t N, int64_t C, int64_t S, int64_t c0, int64_t c1) {    \
        for (int64_t ch = c0; ch < c1; ch++) sb[ch] = 0, ss[ch] = 0;                               \
        for (int64_t n = 0; n < N; n++)                                                            \
            for (int64_t ch = c0; ch < c1; ch++) {                                                 \
                const ST *d = dy + (n * C + ch) * S, *v = x + (n * C + ch) * S;                    \
                AT mu = (AT)LD(mean, ch), b = sb[ch], t = ss[ch];                                  \
                for (int64_t i = 0; i < S; i++) {                                                  \
                    AT g = (AT)LD(d, i);                                                           \
                    b += g;                                                                        \
                    t += g * ((AT)LD(v, i) - mu);                                                  \
                }                                                                                  \
                sb[ch] = b, ss[ch] = t;                                                            \
            }                                                                                      \
        for (int64_t ch = c0; ch < c1; ch++) {                                                     \
            AT iv = (AT)LD(inv, ch), a, k0, k1;                                                    \
            store_sums_##SFX(gs, gb, ch, ss[ch], sb[ch], iv);                                      \
            coef_##SFX(sb[ch], ss[ch], (AT)LD(scale, ch), iv, N * S, &a, &k0, &k1);                \
            sb[ch] = k0, ss[ch] = k1; /* the sums are stored: reuse the slots for X_grad */        \
        }                                                                                          \
        if (!dx) return;                                                                           \
        for (int64_t n = 0; n < N; n++)                                                            \
            for (int64_t ch = c0; ch < c1; ch++) {                                                 \
                const ST *d = dy + (n * C + ch) * S, *v = x + (n * C + ch) * S;                    \
                ST *o = dx + (n * C + ch) * S;                                                     \
                xgrad_run_##SFX(o, d, v, (AT)LD(scale, ch) * (AT)LD(inv, ch), sb[ch], ss[ch], (AT)LD(mean, ch), S); \
            }                                                                                      \
    }

KERNELS(f32, float, float, LD_ID, ST_ID)
KERNELS(f64, double, double, LD_ID, ST_ID)
KERNELS(f16, uint16_t, float, LD_F16, ST_F16)

/* The first saved inverse std that is not > 0 (NaN included), or -1. */
static int64_t bad_inv_std(const opc_tensor *t, int64_t C, double *value) {
    for (int64_t i = 0; i < C; i++) {
        double v = t->dtype == OPC_DOUBLE    ? ((const double *)t->data)[i]
                   : t->dtype == OPC_FLOAT16 ? (double)opc_f16_to_f32(((const uint16_t *)t->data)[i])
                                             : (double)((const float *)t->data)[i];
        if (!(v > 0)) {
            *value = v;
            return i;
        }
    }
    return -1;
}

int32_t opc_check_batchnorm_grad(opc_call *c, const void *plan_v) {
    const bn_plan *p = plan_v;
    double bad_value;
    int64_t bad = bad_inv_std(c->in[4], p->C, &bad_value);
    if (bad >= 0)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT,
                        "variance (the saved inverse std) must be > 0; channel %lld holds %g", (long long)bad,
                        bad_value);
    return OPC_OK;
}

int32_t opc_exec_batchnorm_grad(opc_call *c, const void *plan_v, opc_tensor *outs) {
    const bn_plan *p = plan_v;
    int64_t N = p->N, C = p->C, S = p->S;
    int32_t s = opc_check_batchnorm_grad(c, plan_v);
    if (s) return s;
    void *dx = outs[0].data, *gs = outs[1].data, *gb = outs[2].data;
    if ((!dx && !gs && !gb) || C == 0) return OPC_OK;
    bool columns = S < LANES;
    void *sums = NULL;
    if (columns) {
        sums = malloc((size_t)(2 * C) * (p->dtype == OPC_DOUBLE ? sizeof(double) : sizeof(float)));
        if (!sums) return opc_fail(c, OPC_ERR_OUT_OF_MEMORY, "cannot allocate %lld channel sums", (long long)(2 * C));
    }
    const void *dy = c->in[0]->data, *x = c->in[1]->data, *sc = c->in[2]->data, *mu = c->in[3]->data,
               *inv = c->in[4]->data;
    int64_t want = N * C * S / opc_grain(32768) + 1;
    int nt = (int)(want < c->threads ? want : c->threads);
    if (nt > C) nt = (int)C;
    if (nt < 1) nt = 1;
    /* Plane-mode blocks: as many channels as keep dY and X of the block in cache (at least 1). */
    int64_t channel_bytes = 2 * N * S * (int64_t)opc_dtype_size(p->dtype);
    int64_t block = channel_bytes > 0 ? BLOCK_BYTES / channel_bytes : MAX_BLOCK;
    block = block < 1 ? 1 : block > MAX_BLOCK ? MAX_BLOCK : block;
    /* One parallel region; each thread owns whole channels, so no barrier and no cross-thread sums. */
#define RUN(SFX, ST, AT)                                                                           \
    _Pragma("omp parallel num_threads(nt) if(nt > 1)") {                                           \
        int64_t lo, hi;                                                                            \
        opc_split(C, omp_get_num_threads(), omp_get_thread_num(), 1, &lo, &hi);                    \
        if (columns)                                                                               \
            columns_##SFX((const ST *)dy, (const ST *)x, (const ST *)sc, (const ST *)mu,           \
                          (const ST *)inv, (ST *)dx, (ST *)gs, (ST *)gb, (AT *)sums,               \
                          (AT *)sums + C, N, C, S, lo, hi);                                        \
        else                                                                                       \
            planes_##SFX((const ST *)dy, (const ST *)x, (const ST *)sc, (const ST *)mu,            \
                         (const ST *)inv, (ST *)dx, (ST *)gs, (ST *)gb, N, C, S, lo, hi, block);   \
    }
    switch (p->dtype) {
    case OPC_FLOAT: RUN(f32, float, float) break;
    case OPC_DOUBLE: RUN(f64, double, double) break;
    case OPC_FLOAT16: RUN(f16, uint16_t, float) break;
    default: break;
    }
#undef RUN
    free(sums);
    return OPC_OK;
}

/* ---- registry entries (listed in ops.def; held against the specs by tests/openmp/test_descriptors.py) ---- */

/* variance holds the saved inverse std; all inputs one dtype, float16 in float32 */
static const int32_t DT_BN[] = {OPC_FLOAT, OPC_DOUBLE, OPC_FLOAT16};
static const char *const BN_IN[] = {"dY", "X", "scale", "mean", "variance"};
static const uint8_t BN_OPT[] = {0, 0, 0, 0, 0};
static const char *const BN_OUT[] = {"X_grad", "scale_grad", "bias_grad"};
static const char *const BN_ATTR[] = {"epsilon"};

OPC_DEFINE_OP(BatchNormalizationGrad) = {
    .desc = {.name = "BatchNormalizationGrad", OPC_INPUTS(BN_IN, BN_OPT), OPC_OUTPUTS(BN_OUT), OPC_DTYPES(DT_BN),
             OPC_ATTRS(BN_ATTR),
             .notes = "X [N, C, ...]; variance is the saved inverse std (> 0); epsilon required (>= 0), not used "
                      "otherwise; every input one dtype"},
    .prepare = opc_prep_batchnorm_grad, .exec = opc_exec_batchnorm_grad, .check = opc_check_batchnorm_grad};
