/* SoftmaxGrad, SoftmaxGrad_13, LogSoftmaxGrad, LogSoftmaxGrad_13 (float32, float64, float16,
 * bfloat16; 16-bit types are converted in C and accumulated in float32).
 *
 * The tensor is viewed as [outer, D, inner] with the reduction over D:
 *   legacy ops: outer = prod(dims[:axis]), D = prod(dims[axis:]), inner = 1;
 *   _13 ops:    outer = prod(dims[:axis]), D = dims[axis],       inner = prod(dims[axis+1:]).
 * inner == 1: each row is reduced by one thread into 16 interleaved partial sums combined in a
 * fixed order. inner > 1: blocks of up to 256 adjacent inner positions are reduced together
 * (one sum per position, running over D in order), so a non-last axis needs no transpose.
 * Either way each output depends only on its own row/column in a fixed order: results are
 * bitwise identical for every thread count. */
#include <omp.h>
#include <stdlib.h>

#include "half_blocks.h"
#include "call.h"
#include "vmath.h"


#define JB 256 /* inner positions per strided work item */

typedef struct {
    bool log;
    int32_t dtype;
    int64_t outer, D, inner;
    int64_t numel;
} sm_plan;

static int32_t prep(opc_call *c, void *plan_v, opc_shape *outs, bool log, bool v13) {
    sm_plan *p = plan_v;
    int32_t s;
    if ((s = opc_require(c, 0)) || (s = opc_require(c, 1))) return s;
    const opc_tensor *dy = c->in[0], *y = c->in[1];
    const int32_t idx[] = {1, 0};
    if ((s = opc_check_supported_dtype(c, y->dtype))) return s;
    if ((s = opc_check_dtypes(c, y->dtype, idx, 2))) return s;
    if (!opc_same_shape(dy, y)) {
        char a[200], b[200];
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "dY shape %s differs from %s shape %s",
                        opc_shape_str(dy, a, sizeof a), c->desc->input_names[1],
                        opc_shape_str(y, b, sizeof b));
    }
    int64_t axis;
    if ((s = opc_attr_int(c, "axis", v13 ? -1 : 1, &axis))) return s;
    int32_t r = y->rank;
    if (r == 0)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "inputs must have rank >= 1, got a scalar");
    if (axis < -(int64_t)r || axis > (int64_t)r - 1)
        return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "axis %lld is not in the valid range [%d, %d] for rank %d",
                        (long long)axis, -(int)r, (int)r - 1, (int)r);
    if (axis < 0) axis += r;
    p->log = log;
    p->dtype = y->dtype;
    p->outer = 1;
    for (int32_t i = 0; i < axis; i++) p->outer *= y->shape[i];
    if (v13) {
        p->D = y->shape[axis];
        p->inner = 1;
        for (int32_t i = (int32_t)axis + 1; i < r; i++) p->inner *= y->shape[i];
    } else {
        p->D = 1;
        for (int32_t i = (int32_t)axis; i < r; i++) p->D *= y->shape[i];
        p->inner = 1;
    }
    p->numel = opc_numel(y);
    opc_shape_from(&outs[0], y);
    return OPC_OK;
}

int32_t opc_prep_softmax(opc_call *c, void *p, opc_shape *o) { return prep(c, p, o, false, false); }
int32_t opc_prep_softmax13(opc_call *c, void *p, opc_shape *o) { return prep(c, p, o, false, true); }
int32_t opc_prep_logsoftmax(opc_call *c, void *p, opc_shape *o) { return prep(c, p, o, true, false); }
int32_t opc_prep_logsoftmax13(opc_call *c, void *p, opc_shape *o) { return prep(c, p, o, true, true); }

/* ---- kernels, instantiated per storage type ST / accumulator AT ---------------------------- */

#define LD_ID(p, i) (p)[i]
#define ST_F32(v) (v)
#define ST_F64(v) (v)
#define LD_F16(p, i) opc_f16_to_f32((p)[i])
#define ST_F16(v) opc_f32_to_f16(v)
#define LD_BF16(p, i) opc_bf16_to_f32((p)[i])
#define ST_BF16(v) opc_f32_to_bf16(v)

#define KERNELS(SFX, ST, AT, LD, STO, EXP)                                                        \
    CLONES static void rows_##SFX(const ST *restrict dy, const ST *restrict y, ST *restrict dx,  \
                                  int64_t r0, int64_t r1, int64_t D, bool log) {                  \
        for (int64_t r = r0; r < r1; r++) {                                                       \
            const ST *a = dy + r * D, *b = y + r * D;                                             \
            ST *o = dx + r * D;                                                                   \
            AT acc[16] = {0};                                                                     \
            int64_t i = 0;                                                                        \
            if (log) {                                                                            \
                for (; i + 16 <= D; i += 16)                                                      \
                    for (int k = 0; k < 16; k++) acc[k] += (AT)LD(a, i + k);                      \
                for (; i < D; i++) acc[i & 15] += (AT)LD(a, i);                                   \
            } else {                                                                              \
                for (; i + 16 <= D; i += 16)                                                      \
                    for (int k = 0; k < 16; k++) acc[k] += (AT)LD(a, i + k) * (AT)LD(b, i + k);   \
                for (; i < D; i++) acc[i & 15] += (AT)LD(a, i) * (AT)LD(b, i);                    \
            }                                                                                     \
            AT s = 0;                                                                             \
            for (int k = 0; k < 16; k++) s += acc[k];                                             \
            if (log)                                                                              \
                for (i = 0; i < D; i++) o[i] = STO((AT)LD(a, i) - EXP((AT)LD(b, i)) * s);         \
            else                                                                                  \
                for (i = 0; i < D; i++) o[i] = STO((AT)LD(b, i) * ((AT)LD(a, i) - s));            \
        }                                                                                         \
    }                                                                                             \
    CLONES static void cols_##SFX(const ST *restrict dy, const ST *restrict y, ST *restrict dx,  \
                                  int64_t it0, int64_t it1, int64_t D, int64_t inner, bool log) { \
        AT acc[JB];                                                                               \
        int64_t nb = (inner + JB - 1) / JB;                                                       \
        for (int64_t it = it0; it < it1; it++) {                                                  \
            int64_t ob = it / nb, j0 = (it % nb) * JB;                                            \
            int64_t jn = inner - j0 < JB ? inner - j0 : JB;                                       \
            int64_t base = ob * D * inner + j0;                                                   \
            for (int64_t j = 0; j < jn; j++) acc[j] = 0;                                          \
            for (int64_t d = 0; d < D; d++) {                                                     \
                const ST *a = dy + base + d * inner, *b = y + base + d * inner;                   \
                if (log)                                                                          \
                    for (int64_t j = 0; j < jn; j++) acc[j] += (AT)LD(a, j);                      \
                else                                                                              \
                    for (int64_t j = 0; j < jn; j++) acc[j] += (AT)LD(a, j) * (AT)LD(b, j);       \
            }                                                                                     \
            for (int64_t d = 0; d < D; d++) {                                                     \
                const ST *a = dy + base + d * inner, *b = y + base + d * inner;                   \
                ST *o = dx + base + d * inner;                                                    \
                if (log)                                                                          \
                    for (int64_t j = 0; j < jn; j++)                                              \
                        o[j] = STO((AT)LD(a, j) - EXP((AT)LD(b, j)) * acc[j]);                    \
                else                                                                              \
                    for (int64_t j = 0; j < jn; j++)                                              \
                        o[j] = STO((AT)LD(b, j) * ((AT)LD(a, j) - acc[j]));                       \
            }                                                                                     \
        }                                                                                         \
    }

KERNELS(f32, float, float, LD_ID, ST_F32, opc_expf) /* simd: 8 (the 2 LogSoftmax exp loops among them) */
KERNELS(f64, double, double, LD_ID, ST_F64, exp)
KERNELS(f16, uint16_t, float, LD_F16, ST_F16, opc_expf)
KERNELS(bf16, uint16_t, float, LD_BF16, ST_BF16, opc_expf)

/* float32 and bfloat16 have float's range, so float sums of dY near FLT_MAX can overflow where the
 * exact result is finite (ORT's float32 defect). Accumulating in double throughout would cost the
 * vectorised expf (LogSoftmax ran ~7x slower), so the float path runs first and a row (or strided
 * block) whose output holds an inf or NaN is recomputed with double accumulation, which gives the
 * same inf/NaN where the inputs call for it. Each row decides alone: thread-split invariant. */
KERNELS(f32w, float, double, LD_ID, ST_F32, opc_expf)
KERNELS(bf16w, uint16_t, double, LD_BF16, ST_BF16, opc_expf)

#define LD_F32(p, i) (p)[i]
#define CHECKED(SFX, ST, TOF)                                                                     \
    CLONES static bool finite_##SFX(const ST *o, int64_t rows, int64_t len, int64_t stride) {     \
        int bad = 0;                                                                              \
        for (int64_t d = 0; d < rows; d++)                                                        \
            for (int64_t j = 0; j < len; j++) {                                                   \
                float v = TOF(o + d * stride, j);                                                 \
                bad |= !(v - v == 0.0f); /* inf - inf and NaN - NaN are NaN */                    \
            }                                                                                     \
        return !bad;                                                                              \
    }                                                                                             \
    static void rows_##SFX##_checked(const ST *dy, const ST *y, ST *dx, int64_t r0, int64_t r1,  \
                                     int64_t D, bool log) {                                       \
        int64_t step = D >= 4096 ? 1 : 4096 / (D > 0 ? D : 1); /* rows checked while in cache */  \
        for (int64_t r = r0; r < r1; r += step) {                                                 \
            int64_t re = r + step < r1 ? r + step : r1;                                           \
            rows_##SFX(dy, y, dx, r, re, D, log);                                                 \
            if (finite_##SFX(dx + r * D, 1, (re - r) * D, 0)) continue;                           \
            for (int64_t k = r; k < re; k++)                                                      \
                if (!finite_##SFX(dx + k * D, 1, D, 0)) rows_##SFX##w(dy, y, dx, k, k + 1, D, log); \
        }                                                                                         \
    }                                                                                             \
    static void cols_##SFX##_checked(const ST *dy, const ST *y, ST *dx, int64_t it0, int64_t it1, \
                                     int64_t D, int64_t inner, bool log) {                        \
        int64_t nb = (inner + JB - 1) / JB;                                                       \
        for (int64_t it = it0; it < it1; it++) {                                                  \
            cols_##SFX(dy, y, dx, it, it + 1, D, inner, log);                                     \
            int64_t ob = it / nb, j0 = (it % nb) * JB;                                            \
            int64_t jn = inner - j0 < JB ? inner - j0 : JB;                                       \
            if (!finite_##SFX(dx + ob * D * inner + j0, D, jn, inner))                            \
                cols_##SFX##w(dy, y, dx, it, it + 1, D, inner, log);                              \
        }                                                                                         \
    }

CHECKED(f32, float, LD_F32) /* simd: 3 */
CHECKED(bf16, uint16_t, LD_BF16)

/* float16 through float32: a row, or a strided item's [D, jn] block, of at most STAGE elements is widened
 * once (8 at a time with F16C), run through the float32 kernel and narrowed once. The element-wise
 * conversions in the float16 kernel left float16 5-10x slower than float32; both give the same bits (the
 * same float32 operations on the same values, no contraction), so longer rows take the float16 kernel. */
#define STAGE ((int64_t)1 << 16)

static void items_f16(const sm_plan *p, const uint16_t *dy, const uint16_t *y, uint16_t *dx, int64_t lo, int64_t hi) {
    const bool rows = p->inner == 1;
    const int64_t D = p->D, inner = p->inner, nb = rows ? 1 : (inner + JB - 1) / JB;
    const int64_t most = rows ? D : D * (inner < JB ? inner : JB);
    float *buf = most <= STAGE ? malloc((size_t)(3 * most) * sizeof(float)) : NULL;
    if (!buf) {
        if (rows) rows_f16(dy, y, dx, lo, hi, D, p->log);
        else cols_f16(dy, y, dx, lo, hi, D, inner, p->log);
        return;
    }
    float *fa = buf, *fb = buf + most, *fo = buf + 2 * most;
    for (int64_t it = lo; it < hi; it++) {
        if (rows) {
            widen_f16(dy + it * D, fa, D);
            widen_f16(y + it * D, fb, D);
            rows_f32(fa, fb, fo, 0, 1, D, p->log);
            narrow_f16(fo, dx + it * D, D);
            continue;
        }
        const int64_t j0 = (it % nb) * JB, jn = inner - j0 < JB ? inner - j0 : JB, base = it / nb * D * inner + j0;
        for (int64_t d = 0; d < D; d++) {
            widen_f16(dy + base + d * inner, fa + d * jn, jn);
            widen_f16(y + base + d * inner, fb + d * jn, jn);
        }
        cols_f32(fa, fb, fo, 0, 1, D, jn, p->log); /* the block as one item with inner = jn */
        for (int64_t d = 0; d < D; d++) narrow_f16(fo + d * jn, dx + base + d * inner, jn);
    }
    free(buf);
}

static void run_items(const sm_plan *p, const void *dy, const void *y, void *dx, int64_t lo,
                      int64_t hi) {
    bool rows = p->inner == 1;
#define DISPATCH(SFX, ST)                                                                          \
    if (rows) rows_##SFX((const ST *)dy, (const ST *)y, (ST *)dx, lo, hi, p->D, p->log);          \
    else cols_##SFX((const ST *)dy, (const ST *)y, (ST *)dx, lo, hi, p->D, p->inner, p->log);
    switch (p->dtype) {
    case OPC_FLOAT: DISPATCH(f32_checked, float) break;
    case OPC_DOUBLE: DISPATCH(f64, double) break;
    case OPC_FLOAT16: items_f16(p, dy, y, dx, lo, hi); break;
    case OPC_BFLOAT16: DISPATCH(bf16_checked, uint16_t) break;
    default: break;
    }
#undef DISPATCH
}

int32_t opc_exec_softmax(opc_call *c, const void *plan_v, opc_tensor *outs) {
    const sm_plan *p = plan_v;
    if (!outs[0].data || p->numel == 0) return OPC_OK;
    const void *dy = c->in[0]->data, *y = c->in[1]->data;
    void *dx = outs[0].data;
    int64_t items = p->inner == 1 ? p->outer : p->outer * ((p->inner + JB - 1) / JB);
    int64_t want = p->numel / opc_grain(32768) + 1;
    if (want > items) want = items;
    int nt = (int)(want < c->threads ? want : c->threads);
    if (nt <= 1) {
        run_items(p, dy, y, dx, 0, items);
        return OPC_OK;
    }
#pragma omp parallel num_threads(nt)
    {
        int64_t lo, hi;
        opc_split(items, omp_get_num_threads(), omp_get_thread_num(), 1, &lo, &hi);
        run_items(p, dy, y, dx, lo, hi);
    }
    return OPC_OK;
}

/* ---- registry entries (listed in ops.def; held against the specs by tests/openmp/test_descriptors.py) ---- */

static const char *const SM_IN[] = {"dY", "Y"}; /* LogSoftmaxGrad's Y: the LogSoftmax output */
static const uint8_t SM_REQ[] = {0, 0};
static const char *const SM_OUT[] = {"dX"};
static const char *const SM_ATTR[] = {"axis"};
/* f16/bf16 accumulate in float32 */
static const int32_t DT_SOFTMAX[] = {OPC_FLOAT, OPC_DOUBLE, OPC_FLOAT16, OPC_BFLOAT16};
/* LogSoftmaxGrad's schema has no bfloat16; the kernel, shared with SoftmaxGrad, takes it for the library's tests */
static const int32_t DT_LOGSOFTMAX[] = {OPC_FLOAT, OPC_DOUBLE, OPC_FLOAT16};
static const int32_t DT_BF16[] = {OPC_BFLOAT16};

#define SM_OP(NAME, PREP, DTS, NOTES, ...)                                                                  \
    OPC_DEFINE_OP(NAME) = {.desc = {.name = #NAME, OPC_INPUTS(SM_IN, SM_REQ), OPC_OUTPUTS(SM_OUT), OPC_DTYPES(DTS), \
                                    OPC_ATTRS(SM_ATTR), .notes = NOTES, __VA_ARGS__},                        \
                           .prepare = PREP, .exec = opc_exec_softmax}

SM_OP(SoftmaxGrad, opc_prep_softmax, DT_SOFTMAX,
      "legacy: 2-D coercion at axis (default 1); f16/bf16 accumulate in float32");
SM_OP(SoftmaxGrad_13, opc_prep_softmax13, DT_SOFTMAX,
      "reduces over the single axis (default -1); f16/bf16 accumulate in float32");
SM_OP(LogSoftmaxGrad, opc_prep_logsoftmax, DT_LOGSOFTMAX,
      "second input is the LogSoftmax output; legacy 2-D coercion (default axis 1)", OPC_EXTRA_DTYPES(DT_BF16));
SM_OP(LogSoftmaxGrad_13, opc_prep_logsoftmax13, DT_LOGSOFTMAX,
      "second input is the LogSoftmax output; single axis (default -1)", OPC_EXTRA_DTYPES(DT_BF16));
