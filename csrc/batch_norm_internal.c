/* BatchNormInternal (com.microsoft): training-mode BatchNormalization with its batch statistics; float32, float64,
 * float16 (loaded into float32, each output rounded once).
 *
 * X is [N, C, S] (S = the spatial dims' product, 1 for 2-D input); scale, B, input_mean, input_var are [C]. Per
 * channel, over its m = N * S values: mean = sum X / m; var = sum (X - mean)^2 / m (two passes, the biased
 * variance); inv_std = 1 / sqrt(var + epsilon) (in double, rounded once); Y = (X - mean) * (inv_std * scale) + B;
 * running_mean = momentum * input_mean + (1 - momentum) * mean, running_var likewise with var. An empty batch has
 * mean 0 and var 0. training_mode 0: Y = (X - input_mean) * (scale / sqrt(input_var + epsilon)) + B, and the
 * statistics outputs (not outputs of such a node) are written NaN if asked for.
 *
 * Threads split the channels; each channel's sums are made by one thread in an order fixed by the shape, so every
 * output is bitwise the same at any thread count:
 * - S >= LANES (plane mode): the channel's N planes in n order into LANES interleaved partials (element s of a
 *   plane into partial s % LANES; batch_norm_common.h, as BatchNormalizationGrad's sums), combined in lane order;
 * - S < LANES (column mode: 2-D input, tiny spatial dims): rows n in order, each thread's channel range contiguous
 *   in memory, each channel summed sequentially over (n, s) in double (float32 and float16) or double. */
#include <omp.h>
#include <stdlib.h>

#include "batch_norm_common.h"

typedef struct {
    int32_t dtype;
    int64_t N, C, S;
    double eps, momentum;
    bool training;
} bni_plan;

int32_t opc_prep_batch_norm_internal(opc_call *c, void *plan_v, opc_shape *outs) {
    bni_plan *p = plan_v;
    int32_t s;
    for (int32_t i = 0; i < 5; i++)
        if ((s = opc_require(c, i))) return s;
    const opc_tensor *x = c->in[0];
    const int32_t others[] = {1, 2, 3, 4};
    if ((s = opc_check_supported_dtype(c, x->dtype))) return s;
    if ((s = opc_check_dtypes(c, x->dtype, others, 4))) return s;
    char a[200], b[200];
    if (x->rank < 2)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "X must be [N, C, ...] (rank >= 2), got shape %s",
                        opc_shape_str(x, a, sizeof a));
    int64_t C = x->shape[1];
    for (int32_t i = 1; i < 5; i++) {
        const opc_tensor *t = c->in[i];
        if (t->rank != 1 || t->shape[0] != C)
            return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "%s shape %s must be [C] = [%lld] (X %s)",
                            c->desc->input_names[i], opc_shape_str(t, a, sizeof a), (long long)C,
                            opc_shape_str(x, b, sizeof b));
    }
    double eps, momentum;
    bool given;
    int64_t training;
    if ((s = opc_attr_float(c, "epsilon", 1e-5, &eps, &given))) return s;
    if (!(eps >= 0) || isinf(eps))
        return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "epsilon %g must be finite and >= 0", eps);
    if ((s = opc_attr_float(c, "momentum", 0.9, &momentum, &given))) return s;
    if (!(momentum >= 0 && momentum <= 1))
        return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "momentum %g must lie in [0, 1]", momentum);
    if ((s = opc_attr_int(c, "training_mode", 1, &training))) return s;
    if (training != 0 && training != 1)
        return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "training_mode %lld must be 0 or 1", (long long)training);
    p->dtype = x->dtype;
    p->N = x->shape[0];
    p->C = C;
    p->S = 1;
    for (int32_t i = 2; i < x->rank; i++) p->S *= x->shape[i];
    p->eps = eps;
    p->momentum = momentum;
    p->training = training == 1;
    opc_shape_from(&outs[0], x);
    for (int32_t i = 1; i < 5; i++) opc_shape_from(&outs[i], c->in[1]);
    return OPC_OK;
}

/* ---- plane sums: one plane of S elements added into a channel's LANES partials (acc, NV vectors in memory) ---- */

/* EXPR of the loaded vector x (and vmu, mu broadcast); the zero-padded tail pads with mu, so both sums below
 * see 0 there (the plain sum is called with mu = 0). */
#define LANE_SUMS(NAME, SFX, ST, AT, LD, EXPR)                                                     \
    static inline void NAME##_##SFX(const ST *restrict v, AT mu, int64_t S, AT *restrict acc_mem) { \
        enum { VW = sizeof(VT_##SFX) / sizeof(AT), NV = LANES / VW };                              \
        VT_##SFX acc[NV], vmu = (VT_##SFX){0} + mu;                                                \
        (void)vmu;                                                                                 \
        memcpy(acc, acc_mem, sizeof acc);                                                          \
        int64_t i = 0;                                                                             \
        for (; i + LANES <= S; i += LANES)                                                         \
            for (int j = 0; j < NV; j++) {                                                         \
                VT_##SFX x = LDV_##SFX(v + i + j * VW);                                            \
                acc[j] += EXPR;                                                                    \
            }                                                                                      \
        if (i < S) {                                                                               \
            AT tx[LANES];                                                                          \
            for (int k = 0; k < LANES; k++) tx[k] = k < S - i ? (AT)LD(v, i + k) : mu;             \
            for (int j = 0; j < NV; j++) {                                                         \
                VT_##SFX x;                                                                        \
                memcpy(&x, tx + j * VW, sizeof x);                                                 \
                acc[j] += EXPR;                                                                    \
            }                                                                                      \
        }                                                                                          \
        memcpy(acc_mem, acc, sizeof acc);                                                          \
    }
#define SUMS_OF(SFX, ST, AT, LD)                                                                   \
    LANE_SUMS(lane_sum, SFX, ST, AT, LD, x)                                                        \
    LANE_SUMS(lane_sq, SFX, ST, AT, LD, (x - vmu) * (x - vmu))
SUMS_OF(f32, float, float, LD_ID)
SUMS_OF(f64, double, double, LD_ID)
#if defined(__F16C__)
SUMS_OF(f16, uint16_t, float, LD_F16)
#else
/* float16 without F16C: blocks of HALF_BLOCK (a multiple of LANES: every element keeps its lane) widened, then
 * the float32 sums */
static inline void lane_sum_f16(const uint16_t *restrict v, float mu, int64_t S, float *restrict acc) {
    float f[HALF_BLOCK];
    for (int64_t i0 = 0; i0 < S; i0 += HALF_BLOCK) {
        const int64_t m = S - i0 < HALF_BLOCK ? S - i0 : HALF_BLOCK;
        widen_f16(v + i0, f, m);
        lane_sum_f32(f, mu, m, acc);
    }
}
static inline void lane_sq_f16(const uint16_t *restrict v, float mu, int64_t S, float *restrict acc) {
    float f[HALF_BLOCK];
    for (int64_t i0 = 0; i0 < S; i0 += HALF_BLOCK) {
        const int64_t m = S - i0 < HALF_BLOCK ? S - i0 : HALF_BLOCK;
        widen_f16(v + i0, f, m);
        lane_sq_f32(f, mu, m, acc);
    }
}
#endif

/* Y over one contiguous run: y = (x - mu) * k + b */
#define Y_RUN(SFX, T)                                                                              \
    static inline void y_run_##SFX(T *restrict y, const T *restrict v, T mu, T k, T b, int64_t S) { \
        for (int64_t i = 0; i < S; i++) y[i] = (v[i] - mu) * k + b;                                \
    }
Y_RUN(f32, float)
Y_RUN(f64, double)
static void y_run_f16(uint16_t *restrict y, const uint16_t *restrict v, float mu, float k, float b, int64_t S) {
    float fv[HALF_BLOCK], fy[HALF_BLOCK];
    for (int64_t i0 = 0; i0 < S; i0 += HALF_BLOCK) {
        const int64_t m = S - i0 < HALF_BLOCK ? S - i0 : HALF_BLOCK;
        widen_f16(v + i0, fv, m);
        y_run_f32(fy, fv, mu, k, b, m);
        narrow_f16(fy, y + i0, m);
    }
}

typedef struct {
    const void *x, *scale, *b, *imean, *ivar;
    void *y, *rmean, *rvar, *smean, *sinv;
} bni_io;

/* Per storage type ST, accumulator AT (float for float16). coef_: a channel's Y coefficients and statistics
 * outputs from its mean and var (both AT). */
#define KERNELS(SFX, ST, AT, LD, STO)                                                              \
    static inline void finish_##SFX(const bni_plan *p, const bni_io *io, int64_t ch, AT mean, AT var, AT *k, \
                                    AT *b) {                                                       \
        const ST *sc = io->scale, *bb = io->b, *im = io->imean, *iv = io->ivar;                   \
        AT inv = (AT)(1.0 / sqrt((double)var + p->eps)), mom = (AT)p->momentum;                   \
        *k = inv * (AT)LD(sc, ch);                                                                 \
        *b = (AT)LD(bb, ch);                                                                       \
        if (io->smean) ((ST *)io->smean)[ch] = STO(mean);                                         \
        if (io->sinv) ((ST *)io->sinv)[ch] = STO(inv);                                            \
        if (io->rmean) ((ST *)io->rmean)[ch] = STO(mom * (AT)LD(im, ch) + ((AT)1 - mom) * mean);  \
        if (io->rvar) ((ST *)io->rvar)[ch] = STO(mom * (AT)LD(iv, ch) + ((AT)1 - mom) * var);     \
    }                                                                                              \
    /* Plane mode: channels [c0, c1), one at a time: its N planes summed, then squared, then Y. */ \
    CLONES static void planes_##SFX(const bni_plan *p, const bni_io *io, int64_t c0, int64_t c1) { \
        const int64_t N = p->N, C = p->C, S = p->S, m = N * S;                                     \
        const ST *x = io->x;                                                                       \
        ST *y = io->y;                                                                             \
        _Alignas(64) AT acc[LANES];                                                                \
        for (int64_t ch = c0; ch < c1; ch++) {                                                     \
            memset(acc, 0, sizeof acc);                                                            \
            for (int64_t n = 0; n < N; n++) lane_sum_##SFX(x + (n * C + ch) * S, (AT)0, S, acc);  \
            AT sum = 0;                                                                            \
            for (int k = 0; k < LANES; k++) sum += acc[k];                                         \
            AT mean = m > 0 ? sum / (AT)m : (AT)0;                                                 \
            memset(acc, 0, sizeof acc);                                                            \
            for (int64_t n = 0; n < N; n++) lane_sq_##SFX(x + (n * C + ch) * S, mean, S, acc);    \
            AT sq = 0;                                                                             \
            for (int k = 0; k < LANES; k++) sq += acc[k];                                          \
            AT var = m > 0 ? sq / (AT)m : (AT)0, k, b;                                             \
            finish_##SFX(p, io, ch, mean, var, &k, &b);                                            \
            if (y)                                                                                 \
                for (int64_t n = 0; n < N; n++)                                                    \
                    y_run_##SFX(y + (n * C + ch) * S, x + (n * C + ch) * S, mean, k, b, S);       \
        }                                                                                          \
    }                                                                                              \
    /* Column mode: channels [c0, c1) together, rows in order, sums in double; ws: 3 * C doubles (this range's \
     * slots: the mean, the squares then Y's k, Y's b). */                                         \
    CLONES static void columns_##SFX(const bni_plan *p, const bni_io *io, double *restrict ws, int64_t c0, \
                                     int64_t c1) {                                                 \
        const int64_t N = p->N, C = p->C, S = p->S, m = N * S;                                     \
        double *mean = ws, *sq = ws + C, *bs = ws + 2 * C;                                         \
        const ST *x = io->x;                                                                       \
        ST *y = io->y;                                                                             \
        for (int64_t ch = c0; ch < c1; ch++) mean[ch] = 0, sq[ch] = 0;                             \
        for (int64_t n = 0; n < N; n++)                                                            \
            for (int64_t ch = c0; ch < c1; ch++) {                                                 \
                const ST *v = x + (n * C + ch) * S;                                                \
                double t = mean[ch];                                                               \
                for (int64_t i = 0; i < S; i++) t += (double)LD(v, i);                             \
                mean[ch] = t;                                                                      \
            }                                                                                      \
        for (int64_t ch = c0; ch < c1; ch++) mean[ch] = m > 0 ? (double)(AT)(mean[ch] / (double)m) : 0.0; \
        for (int64_t n = 0; n < N; n++)                                                            \
            for (int64_t ch = c0; ch < c1; ch++) {                                                 \
                const ST *v = x + (n * C + ch) * S;                                                \
                double t = sq[ch], mu = mean[ch];                                                  \
                for (int64_t i = 0; i < S; i++) {                                                  \
                    double d = (double)LD(v, i) - mu;                                              \
                    t += d * d;                                                                    \
                }                                                                                  \
                sq[ch] = t;                                                                        \
            }                                                                                      \
        for (int64_t ch = c0; ch < c1; ch++) {                                                     \
            AT k, b;                                                                               \
            finish_##SFX(p, io, ch, (AT)mean[ch], m > 0 ? (AT)(sq[ch] / (double)m) : (AT)0, &k, &b); \
            sq[ch] = (double)k, bs[ch] = (double)b;                                                \
        }                                                                                          \
        if (!y) return;                                                                            \
        for (int64_t n = 0; n < N; n++)                                                            \
            for (int64_t ch = c0; ch < c1; ch++)                                                   \
                y_run_##SFX(y + (n * C + ch) * S, x + (n * C + ch) * S, (AT)mean[ch], (AT)sq[ch], (AT)bs[ch], S); \
    }                                                                                              \
    /* training_mode 0: Y from input_mean and input_var; the statistics outputs NaN if asked for. */ \
    CLONES static void inference_##SFX(const bni_plan *p, const bni_io *io, int64_t c0, int64_t c1) { \
        const int64_t N = p->N, C = p->C, S = p->S;                                                \
        const ST *x = io->x, *sc = io->scale, *bb = io->b, *im = io->imean, *iv = io->ivar;       \
        ST *outs[4] = {io->rmean, io->rvar, io->smean, io->sinv};                                  \
        for (int64_t ch = c0; ch < c1; ch++) {                                                     \
            AT k = (AT)((double)LD(sc, ch) / sqrt((double)LD(iv, ch) + p->eps)), b = (AT)LD(bb, ch); \
            AT mu = (AT)LD(im, ch);                                                                \
            for (int j = 0; j < 4; j++)                                                            \
                if (outs[j]) outs[j][ch] = STO((AT)NAN);                                           \
            if (io->y)                                                                             \
                for (int64_t n = 0; n < N; n++)                                                    \
                    y_run_##SFX((ST *)io->y + (n * C + ch) * S, x + (n * C + ch) * S, mu, k, b, S); \
        }                                                                                          \
    }

KERNELS(f32, float, float, LD_ID, ST_ID)
KERNELS(f64, double, double, LD_ID, ST_ID)
KERNELS(f16, uint16_t, float, LD_F16, ST_F16)

int32_t opc_exec_batch_norm_internal(opc_call *c, const void *plan_v, opc_tensor *outs) {
    const bni_plan *p = plan_v;
    const int64_t N = p->N, C = p->C, S = p->S;
    bni_io io = {.x = c->in[0]->data, .scale = c->in[1]->data, .b = c->in[2]->data, .imean = c->in[3]->data,
                 .ivar = c->in[4]->data, .y = outs[0].data, .rmean = outs[1].data, .rvar = outs[2].data,
                 .smean = outs[3].data, .sinv = outs[4].data};
    if (C == 0 || (!io.y && !io.rmean && !io.rvar && !io.smean && !io.sinv)) return OPC_OK;
    const bool columns = p->training && S < LANES;
    double *ws = NULL;
    if (columns) {
        ws = malloc((size_t)(3 * C) * sizeof(double));
        if (!ws) return opc_fail(c, OPC_ERR_OUT_OF_MEMORY, "cannot allocate %lld channel sums", (long long)(3 * C));
    }
    int64_t want = N * C * S / opc_grain(32768) + 1;
    int nt = (int)(want < c->threads ? want : c->threads);
    if (nt > C) nt = (int)C;
    if (nt < 1) nt = 1;
    /* One parallel region; each thread owns whole channels, so no barrier and no cross-thread sums. */
#define RUN(SFX)                                                                                   \
    _Pragma("omp parallel num_threads(nt) if(nt > 1)") {                                           \
        int64_t lo, hi;                                                                            \
        opc_split(C, omp_get_num_threads(), omp_get_thread_num(), 1, &lo, &hi);                    \
        if (!p->training)                                                                          \
            inference_##SFX(p, &io, lo, hi);                                                       \
        else if (columns)                                                                          \
            columns_##SFX(p, &io, ws, lo, hi);                                                     \
        else                                                                                       \
            planes_##SFX(p, &io, lo, hi);                                                          \
    }
    switch (p->dtype) {
    case OPC_FLOAT: RUN(f32) break;
    case OPC_DOUBLE: RUN(f64) break;
    case OPC_FLOAT16: RUN(f16) break;
    default: break;
    }
#undef RUN
    free(ws);
    return OPC_OK;
}

/* ---- registry entry (listed in ops.def; held against the spec by tests/openmp/test_descriptors.py) ---- */

static const int32_t DT_BNI[] = {OPC_FLOAT, OPC_DOUBLE, OPC_FLOAT16};
static const char *const BNI_IN[] = {"X", "scale", "B", "input_mean", "input_var"};
static const uint8_t BNI_OPT[] = {0, 0, 0, 0, 0};
static const char *const BNI_OUT[] = {"Y", "running_mean", "running_var", "saved_mean", "saved_inv_std"};
static const char *const BNI_ATTR[] = {"epsilon", "momentum", "training_mode"};

OPC_DEFINE_OP(BatchNormInternal) = {
    .desc = {.name = "BatchNormInternal", OPC_INPUTS(BNI_IN, BNI_OPT), OPC_OUTPUTS(BNI_OUT), OPC_DTYPES(DT_BNI),
             OPC_ATTRS(BNI_ATTR),
             .notes = "X [N, C, ...], the rest [C], one dtype; epsilon >= 0, momentum in [0, 1], training_mode 0 or 1 "
                      "(0: Y only, the statistics outputs NaN)"},
    .prepare = opc_prep_batch_norm_internal, .exec = opc_exec_batch_norm_internal};
