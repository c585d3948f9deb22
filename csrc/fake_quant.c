/* FakeQuant and FakeQuantGrad (com.microsoft), float32 (the schema's only T), per-tensor scale and zero point.
 *
 * FakeQuant: q = nearbyint(x / scale) + zero_point with the quotient taken in double (two float32 values: its
 * rounding never moves it across a half-integer for |q| < 2^13, so ties round to even as the exact quotient does;
 * ORT divides in float32), output = (clamp(q, quant_min, quant_max) - zero_point) * scale (exact in double, rounded
 * once), mask = quant_min <= q <= quant_max before the clamp. +-inf clamp to the ends (mask false); NaN gives NaN
 * and a false mask. scale must be finite and > 0 and zero_point an integer value (the check function); both are
 * shape [] or [1].
 * FakeQuantGrad: dX = mask ? dY : 0 (selected: NaN or inf under a false mask give 0).
 * Elementwise: every element goes through the same expression whatever the thread split, so results are bitwise
 * the same at any thread count. */
#include <omp.h>

#include "call.h"

typedef struct {
    int64_t n;
    double qmin, qmax;
} fq_plan;

static bool one_value_shape(const opc_tensor *t) { return t->rank == 0 || (t->rank == 1 && t->shape[0] == 1); }

int32_t opc_prep_fake_quant(opc_call *c, void *plan_v, opc_shape *outs) {
    fq_plan *p = plan_v;
    int32_t s;
    for (int32_t i = 0; i < 3; i++)
        if ((s = opc_require(c, i))) return s;
    const opc_tensor *x = c->in[0];
    const int32_t others[] = {1, 2};
    if ((s = opc_check_supported_dtype(c, x->dtype))) return s;
    if ((s = opc_check_dtypes(c, x->dtype, others, 2))) return s;
    char a[200];
    for (int32_t i = 1; i < 3; i++)
        if (!one_value_shape(c->in[i]))
            return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "%s must be a scalar or [1], got shape %s",
                            c->desc->input_names[i], opc_shape_str(c->in[i], a, sizeof a));
    int64_t lo, hi;
    if ((s = opc_attr_int(c, "quant_min", 0, &lo)) || (s = opc_attr_int(c, "quant_max", 255, &hi))) return s;
    if (lo > hi)
        return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "quant_min %lld > quant_max %lld", (long long)lo, (long long)hi);
    p->n = opc_numel(x);
    p->qmin = (double)lo;
    p->qmax = (double)hi;
    opc_shape_from(&outs[0], x);
    opc_shape_from(&outs[1], x);
    outs[1].dtype = OPC_BOOL;
    return OPC_OK;
}

int32_t opc_check_fake_quant(opc_call *c, const void *plan_v) {
    (void)plan_v;
    double s = *(const float *)c->in[1]->data, zp = *(const float *)c->in[2]->data;
    if (!(s > 0) || isinf(s))
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "scale %g must be finite and > 0", s);
    if (!(zp == nearbyint(zp)) || isinf(zp))
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "zero_point %g must be an integer value", zp);
    return OPC_OK;
}

CLONES static void fq_range(const float *restrict x, float *restrict y, uint8_t *restrict m, int64_t n, double s,
                            double zp, double lo, double hi) {
    for (int64_t i = 0; i < n; i++) {
        double q = nearbyint((double)x[i] / s) + zp;
        double qc = q < lo ? lo : q > hi ? hi : q; /* NaN stays NaN */
        if (y) y[i] = (float)((qc - zp) * s);
        if (m) m[i] = (uint8_t)(q >= lo && q <= hi);
    }
}

int32_t opc_exec_fake_quant(opc_call *c, const void *plan_v, opc_tensor *outs) {
    const fq_plan *p = plan_v;
    int32_t st;
    if ((st = opc_check_fake_quant(c, plan_v))) return st;
    float *y = outs[0].data;
    uint8_t *m = outs[1].data;
    if ((!y && !m) || p->n == 0) return OPC_OK;
    const float *x = c->in[0]->data;
    const double s = *(const float *)c->in[1]->data, zp = *(const float *)c->in[2]->data;
    int64_t want = p->n / opc_grain(65536) + 1;
    int nt = (int)(want < c->threads ? want : c->threads);
    if (nt < 1) nt = 1;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int64_t lo, hi;
        opc_split(p->n, omp_get_num_threads(), omp_get_thread_num(), opc_grain(64), &lo, &hi);
        if (hi > lo) fq_range(x + lo, y ? y + lo : NULL, m ? m + lo : NULL, hi - lo, s, zp, p->qmin, p->qmax);
    }
    return OPC_OK;
}

/* ---- FakeQuantGrad ------------------------------------------------------------------------------------------- */

int32_t opc_prep_fake_quant_grad(opc_call *c, void *plan_v, opc_shape *outs) {
    fq_plan *p = plan_v;
    int32_t s;
    if ((s = opc_require(c, 0)) || (s = opc_require(c, 1))) return s;
    const opc_tensor *dy = c->in[0], *mask = c->in[1];
    if ((s = opc_check_supported_dtype(c, dy->dtype))) return s;
    if (mask->dtype != OPC_BOOL)
        return opc_fail(c, OPC_ERR_UNSUPPORTED_DTYPE, "gradient_mask has dtype %s; it must be bool",
                        opc_dtype_name(mask->dtype));
    char a[200], b[200];
    if (!opc_same_shape(dy, mask))
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "gradient_mask shape %s differs from dY shape %s",
                        opc_shape_str(mask, a, sizeof a), opc_shape_str(dy, b, sizeof b));
    p->n = opc_numel(dy);
    opc_shape_from(&outs[0], dy);
    return OPC_OK;
}

CLONES static void fqg_range(const float *restrict dy, const uint8_t *restrict m, float *restrict dx, int64_t n) {
    for (int64_t i = 0; i < n; i++) dx[i] = m[i] ? dy[i] : 0.0f;
}

int32_t opc_exec_fake_quant_grad(opc_call *c, const void *plan_v, opc_tensor *outs) {
    const fq_plan *p = plan_v;
    float *dx = outs[0].data;
    if (!dx || p->n == 0) return OPC_OK;
    const float *dy = c->in[0]->data;
    const uint8_t *m = c->in[1]->data;
    int64_t want = p->n / opc_grain(131072) + 1;
    int nt = (int)(want < c->threads ? want : c->threads);
    if (nt < 1) nt = 1;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int64_t lo, hi;
        opc_split(p->n, omp_get_num_threads(), omp_get_thread_num(), opc_grain(64), &lo, &hi);
        if (hi > lo) fqg_range(dy + lo, m + lo, dx + lo, hi - lo);
    }
    return OPC_OK;
}

/* ---- registry entries (listed in ops.def; held against the specs by tests/openmp/test_descriptors.py) ---- */

static const int32_t DT_FQ[] = {OPC_FLOAT};
static const char *const FQ_IN[] = {"input", "scale", "zero_point"};
static const uint8_t FQ_OPT[] = {0, 0, 0};
static const char *const FQ_OUT[] = {"output", "mask"};
static const char *const FQ_ATTR[] = {"quant_min", "quant_max"};

OPC_DEFINE_OP(FakeQuant) = {
    .desc = {.name = "FakeQuant", OPC_INPUTS(FQ_IN, FQ_OPT), OPC_OUTPUTS(FQ_OUT), OPC_DTYPES(DT_FQ),
             OPC_ATTRS(FQ_ATTR),
             .notes = "per-tensor: scale (finite, > 0) and zero_point (an integer value) of shape [] or [1]; ties to even; "
                      "mask bool"},
    .prepare = opc_prep_fake_quant, .exec = opc_exec_fake_quant, .check = opc_check_fake_quant};

static const char *const FQG_IN[] = {"dY", "gradient_mask"};
static const uint8_t FQG_OPT[] = {0, 0};
static const char *const FQG_OUT[] = {"dX"};

OPC_DEFINE_OP(FakeQuantGrad) = {
    .desc = {.name = "FakeQuantGrad", OPC_INPUTS(FQG_IN, FQG_OPT), OPC_OUTPUTS(FQG_OUT), OPC_DTYPES(DT_FQ),
             .notes = "dX = gradient_mask ? dY : 0 (bool mask of dY's shape)"},
    .prepare = opc_prep_fake_quant_grad, .exec = opc_exec_fake_quant_grad};
