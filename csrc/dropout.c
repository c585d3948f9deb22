/* DropoutGrad: dx = mask ? dy * scale : 0 with scale = 1 / (1 - ratio), in training mode with ratio > 0;
 * dx = dy (a copy) otherwise. float32 and float64; float16 and bfloat16 widened to float32 and rounded once.
 *
 * A dropped element is a select of +0, never 0 * dy, so an inf or NaN there gives 0 (Dropout's output at a
 * dropped element does not depend on its input). Every element goes through the same expression whatever
 * the thread split (vector body and scalar tail agree under -ffp-contract=off), so results are bitwise the
 * same at any thread count. */
#include <omp.h>

#include "half_blocks.h"
#include "call.h"

typedef struct {
    int32_t dtype;
    int64_t n;
    bool apply; /* false: dx = dy */
    double scale;
} dropout_plan;

/* A scalar input's value as double (every float dtype widens exactly); bool as 0 / 1. */
static double scalar_value(const opc_tensor *t) {
    switch (t->dtype) {
    case OPC_FLOAT: return *(const float *)t->data;
    case OPC_DOUBLE: return *(const double *)t->data;
    case OPC_FLOAT16: return opc_f16_to_f32(*(const uint16_t *)t->data);
    case OPC_BFLOAT16: return opc_bf16_to_f32(*(const uint16_t *)t->data);
    default: return *(const uint8_t *)t->data != 0;
    }
}

int32_t opc_prep_dropout_grad(opc_call *c, void *plan_v, opc_shape *outs) {
    dropout_plan *p = plan_v;
    int32_t s;
    if ((s = opc_require(c, 0)) || (s = opc_require(c, 1))) return s;
    const opc_tensor *dy = c->in[0], *mask = c->in[1], *ratio = c->in[2], *mode = c->in[3];
    if ((s = opc_check_supported_dtype(c, dy->dtype))) return s;
    if (mask->dtype != OPC_BOOL)
        return opc_fail(c, OPC_ERR_UNSUPPORTED_DTYPE, "mask has dtype %s; it must be bool", opc_dtype_name(mask->dtype));
    if (ratio && ratio->dtype != OPC_FLOAT && ratio->dtype != OPC_DOUBLE && ratio->dtype != OPC_FLOAT16 &&
        ratio->dtype != OPC_BFLOAT16)
        return opc_fail(c, OPC_ERR_UNSUPPORTED_DTYPE, "ratio has dtype %s; it must be a float type",
                        opc_dtype_name(ratio->dtype));
    if (mode && mode->dtype != OPC_BOOL)
        return opc_fail(c, OPC_ERR_UNSUPPORTED_DTYPE, "training_mode has dtype %s; it must be bool",
                        opc_dtype_name(mode->dtype));
    char a[200], b[200];
    if (!opc_same_shape(dy, mask))
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "mask shape %s differs from dy shape %s",
                        opc_shape_str(mask, a, sizeof a), opc_shape_str(dy, b, sizeof b));
    /* one value: a scalar, or shape [1] as ORT's kernel reads it and its own tests write it */
    if (ratio && !(ratio->rank == 0 || (ratio->rank == 1 && ratio->shape[0] == 1)))
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "ratio must hold one value (shape [] or [1]), got shape %s",
                        opc_shape_str(ratio, a, sizeof a));
    if (mode && mode->rank != 0)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "training_mode must be a scalar, got shape %s",
                        opc_shape_str(mode, a, sizeof a));
    double r = ratio ? scalar_value(ratio) : 0.5; /* the schema's defaults: ratio 0.5, training_mode false */
    if (!(r >= 0.0 && r < 1.0)) /* NaN fails too */
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "ratio %g is outside [0, 1)", r);
    p->dtype = dy->dtype;
    p->n = opc_numel(dy);
    p->apply = mode && scalar_value(mode) != 0.0 && r > 0.0;
    p->scale = 1.0 / (1.0 - r);
    opc_shape_from(&outs[0], dy);
    return OPC_OK;
}

/* ---- loops ----------------------------------------------------------------------------------- */

/* mask bytes are bool: any nonzero byte counts as kept */
CLONES static void drop_f32(const float *restrict dy, const uint8_t *restrict m, float *restrict dx, int64_t n,
                            float scale) {
    for (int64_t i = 0; i < n; i++) { /* simd: 1 */
        float v = dy[i] * scale;
        dx[i] = m[i] ? v : 0.0f;
    }
}
CLONES static void drop_f64(const double *restrict dy, const uint8_t *restrict m, double *restrict dx, int64_t n,
                            double scale) {
    for (int64_t i = 0; i < n; i++) { /* simd: 1 */
        double v = dy[i] * scale;
        dx[i] = m[i] ? v : 0.0;
    }
}

/* 16-bit types: through the float32 loop in blocks (half_blocks.h) */
static void drop_half(bool bf16, const uint16_t *dy, const uint8_t *m, uint16_t *dx, int64_t n, float scale) {
    float g[HALF_BLOCK], o[HALF_BLOCK];
    for (int64_t i = 0; i < n; i += HALF_BLOCK) {
        int64_t k = n - i < HALF_BLOCK ? n - i : HALF_BLOCK;
        widen_half(bf16, dy + i, g, k);
        drop_f32(g, m + i, o, k, scale);
        narrow_half(bf16, o, dx + i, k);
    }
}

static void run_range(const dropout_plan *p, const void *dy, const uint8_t *m, void *dx, int64_t lo, int64_t hi) {
    size_t es = opc_dtype_size(p->dtype);
    const void *src = (const char *)dy + lo * es;
    void *dst = (char *)dx + lo * es;
    int64_t n = hi - lo;
    if (n <= 0) return;
    if (!p->apply) {
        memcpy(dst, src, (size_t)n * es); /* bitwise: dy is already in the output dtype */
        return;
    }
    switch (p->dtype) {
    case OPC_FLOAT: drop_f32(src, m + lo, dst, n, (float)p->scale); break;
    case OPC_DOUBLE: drop_f64(src, m + lo, dst, n, p->scale); break;
    case OPC_FLOAT16: drop_half(false, src, m + lo, dst, n, (float)p->scale); break;
    case OPC_BFLOAT16: drop_half(true, src, m + lo, dst, n, (float)p->scale); break;
    default: break;
    }
}

int32_t opc_exec_dropout_grad(opc_call *c, const void *plan_v, opc_tensor *outs) {
    const dropout_plan *p = plan_v;
    if (!outs[0].data || p->n == 0) return OPC_OK;
    const void *dy = c->in[0]->data;
    const uint8_t *m = c->in[1]->data;
    void *dx = outs[0].data;
    /* below ~64k elements per thread (a few hundred KiB moved), thread start-up costs more than it saves */
    int64_t want = p->n / opc_grain(65536) + 1;
    int nt = (int)(want < c->threads ? want : c->threads);
    if (nt <= 1) {
        run_range(p, dy, m, dx, 0, p->n);
        return OPC_OK;
    }
#pragma omp parallel num_threads(nt)
    {
        int64_t lo, hi;
        /* 64-element pieces (whole cache lines of the mask); single elements when the split is forced */
        opc_split(p->n, omp_get_num_threads(), omp_get_thread_num(), opc_grain(64), &lo, &hi);
        run_range(p, dy, m, dx, lo, hi);
    }
    return OPC_OK;
}

/* ---- registry entries (listed in ops.def; held against the specs by tests/openmp/test_descriptors.py) ---- */

/* mask and training_mode bool; ratio any float type; 16-bit dy computed in float32 */
static const int32_t DT_DROPOUT[] = {OPC_FLOAT, OPC_DOUBLE, OPC_FLOAT16, OPC_BFLOAT16};
static const char *const DROPOUT_IN[] = {"dy", "mask", "ratio", "training_mode"};
static const uint8_t DROPOUT_OPT[] = {0, 0, 1, 1};
static const char *const DROPOUT_OUT[] = {"dx"};
/* Dropout's seed: ORT's gradient builder copies it onto the node; the mask is an input, so it is taken and not read */
static const char *const DROPOUT_ATTR[] = {"seed"};

OPC_DEFINE_OP(DropoutGrad) = {
    .desc = {.name = "DropoutGrad", OPC_INPUTS(DROPOUT_IN, DROPOUT_OPT), OPC_OUTPUTS(DROPOUT_OUT),
             OPC_DTYPES(DT_DROPOUT), OPC_ATTRS(DROPOUT_ATTR),
             .notes = "dx = mask ? dy / (1 - ratio) : 0 in training mode with ratio > 0, else dy; ratio default 0.5 "
                      "in [0, 1), training_mode default false; ratio and training_mode scalars"},
    .prepare = opc_prep_dropout_grad, .exec = opc_exec_dropout_grad};
