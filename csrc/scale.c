/* Scale (com.microsoft): output = input * s, or input / s when scale_down is 1, s the one value of `scale`.
 * input float32 or float64 (float16 widened to float32 and rounded once); scale any of float16, float32,
 * float64, int32, int64, read exactly as a double. float32 is computed in double and rounded once (a true
 * division, not a multiplication by a rounded reciprocal: at AVX2 and above the float32 loop multiplies by the
 * double reciprocal and divides again the rare blocks where that could round differently, see div_f32); float64
 * in double. scale_down 1 with scale 0 is a division by zero and rejected; scale 0 with scale_down 0 is valid.
 * Elementwise: every element gets the same value whatever the thread split, so results are bitwise the same at
 * any thread count. */
#include <math.h>
#include <omp.h>

#include "half_blocks.h"
#include "call.h"

typedef struct {
    int32_t dtype;
    int64_t n;
    bool down;
    double s;
} scale_plan;

static double scale_value(const opc_tensor *t) {
    switch (t->dtype) {
    case OPC_FLOAT: return *(const float *)t->data;
    case OPC_DOUBLE: return *(const double *)t->data;
    case OPC_FLOAT16: return opc_f16_to_f32(*(const uint16_t *)t->data);
    case OPC_INT32: return *(const int32_t *)t->data;
    default: return (double)*(const int64_t *)t->data;
    }
}

int32_t opc_prep_scale(opc_call *c, void *plan_v, opc_shape *outs) {
    scale_plan *p = plan_v;
    int32_t s;
    if ((s = opc_require(c, 0)) || (s = opc_require(c, 1))) return s;
    const opc_tensor *x = c->in[0], *sc = c->in[1];
    if ((s = opc_check_supported_dtype(c, x->dtype))) return s;
    if (sc->dtype != OPC_FLOAT && sc->dtype != OPC_DOUBLE && sc->dtype != OPC_FLOAT16 && sc->dtype != OPC_INT32 &&
        sc->dtype != OPC_INT64)
        return opc_fail(c, OPC_ERR_UNSUPPORTED_DTYPE, "scale has dtype %s; it must be float16, float32, float64, int32 or int64",
                        opc_dtype_name(sc->dtype));
    char a[200];
    if (opc_numel(sc) != 1)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "scale must hold exactly one value, got shape %s",
                        opc_shape_str(sc, a, sizeof a));
    int64_t down;
    if ((s = opc_attr_int(c, "scale_down", 0, &down))) return s;
    if (down != 0 && down != 1)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "scale_down %lld must be 0 or 1", (long long)down);
    p->dtype = x->dtype;
    p->n = opc_numel(x);
    p->down = down == 1;
    p->s = 0.0; /* read in check: prepare never reads input values */
    opc_shape_from(&outs[0], x);
    return OPC_OK;
}

int32_t opc_check_scale(opc_call *c, const void *plan_v) {
    const scale_plan *p = plan_v;
    if (p->down && scale_value(c->in[1]) == 0.0)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "scale_down 1 with scale 0: division by zero");
    return OPC_OK;
}

/* ---- loops ----------------------------------------------------------------------------------- */

CLONES static void mul_f32(const float *restrict x, float *restrict y, int64_t n, double s) {
    for (int64_t i = 0; i < n; i++) y[i] = (float)((double)x[i] * s);
}
CLONES static void div_f32_exact(const float *restrict x, float *restrict y, int64_t n, double s) {
    for (int64_t i = 0; i < n; i++) y[i] = (float)((double)x[i] / s);
}

#if defined(__AVX2__) /* SSE2's 2-lane divide is as fast as the test below: the baseline build divides */
/* float32 / s without a division per element, bitwise (float)((double)x / s): with r = 1 / s in double (s and
 * r normal), q = x * r is within 3 double ulps of the double quotient d = x / s, so q * (1 - 2^-50) and
 * q * (1 + 2^-50) bracket d; float rounding is monotonic, so where those two round to the same float, d does
 * too. Where they do not (q within a few ulps of a float rounding boundary: about 1 element in 2^25 at random;
 * or NaN), the block is divided again element by element. Each element gets the same value whatever the thread
 * split. Float compares only: the test vectorises at every ISA level. */
#define DIV_BLOCK 1024
CLONES static void div_f32(const float *restrict x, float *restrict y, int64_t n, double s, double r) {
    const double below = 1.0 - 0x1p-50, above = 1.0 + 0x1p-50;
    for (int64_t i = 0; i < n; i += DIV_BLOCK) {
        int64_t k = n - i < DIV_BLOCK ? n - i : DIV_BLOCK;
        const float *xi = x + i;
        float *yi = y + i;
        int32_t redo = 0;
        for (int64_t j = 0; j < k; j++) {
            double q = (double)xi[j] * r;
            float lo = (float)(q * below), hi = (float)(q * above);
            redo |= lo != hi;
            yi[j] = lo;
        }
        if (redo) div_f32_exact(xi, yi, k, s);
    }
}

/* whether x * (1 / s) with the check of div_f32 reproduces x / s: s and its reciprocal normal and finite */
static bool reciprocal_ok(double s) {
    double a = fabs(s);
    return isnormal(s) && a < 0x1p1021 && a > 0x1p-1021;
}
#endif

CLONES static void mul_f64(const double *restrict x, double *restrict y, int64_t n, double s) {
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * s;
}
CLONES static void div_f64(const double *restrict x, double *restrict y, int64_t n, double s) {
    for (int64_t i = 0; i < n; i++) y[i] = x[i] / s;
}

static void f32_range(bool down, const float *x, float *y, int64_t n, double s) {
#if defined(__AVX2__)
    if (down && reciprocal_ok(s)) {
        div_f32(x, y, n, s, 1.0 / s);
        return;
    }
#endif
    if (down)
        div_f32_exact(x, y, n, s);
    else
        mul_f32(x, y, n, s);
}

/* float16: through the float32 loop in blocks (half_blocks.h) */
static void half_range(bool down, const uint16_t *x, uint16_t *y, int64_t n, double s) {
    float g[HALF_BLOCK], o[HALF_BLOCK];
    for (int64_t i = 0; i < n; i += HALF_BLOCK) {
        int64_t k = n - i < HALF_BLOCK ? n - i : HALF_BLOCK;
        widen_half(false, x + i, g, k);
        f32_range(down, g, o, k, s);
        narrow_half(false, o, y + i, k);
    }
}

static void run_range(const scale_plan *p, const void *x, void *y, int64_t lo, int64_t hi) {
    size_t es = opc_dtype_size(p->dtype);
    const void *src = (const char *)x + lo * es;
    void *dst = (char *)y + lo * es;
    int64_t n = hi - lo;
    if (n <= 0) return;
    switch (p->dtype) {
    case OPC_FLOAT: f32_range(p->down, src, dst, n, p->s); break;
    case OPC_DOUBLE:
        if (p->down)
            div_f64(src, dst, n, p->s);
        else
            mul_f64(src, dst, n, p->s);
        break;
    case OPC_FLOAT16: half_range(p->down, src, dst, n, p->s); break;
    default: break;
    }
}

int32_t opc_exec_scale(opc_call *c, const void *plan_v, opc_tensor *outs) {
    scale_plan p = *(const scale_plan *)plan_v;
    int32_t s;
    if ((s = opc_check_scale(c, &p))) return s;
    if (!outs[0].data || p.n == 0) return OPC_OK;
    p.s = scale_value(c->in[1]);
    const void *x = c->in[0]->data;
    void *y = outs[0].data;
    /* below ~64k elements per thread, thread start-up costs more than it saves */
    int64_t want = p.n / opc_grain(65536) + 1;
    int nt = (int)(want < c->threads ? want : c->threads);
    if (nt <= 1) {
        run_range(&p, x, y, 0, p.n);
        return OPC_OK;
    }
#pragma omp parallel num_threads(nt)
    {
        int64_t lo, hi;
        opc_split(p.n, omp_get_num_threads(), omp_get_thread_num(), opc_grain(64), &lo, &hi);
        run_range(&p, x, y, lo, hi);
    }
    return OPC_OK;
}

/* ---- registry entry (listed in ops.def; held against the spec by tests/openmp/test_descriptors.py) ---- */

/* input float32, float64, float16; scale float16, float32, float64, int32 or int64 */
static const int32_t DT_SCALE[] = {OPC_FLOAT, OPC_DOUBLE, OPC_FLOAT16};
static const char *const SCALE_IN[] = {"input", "scale"};
static const uint8_t SCALE_OPT[] = {0, 0};
static const char *const SCALE_OUT[] = {"output"};
static const char *const SCALE_ATTR[] = {"scale_down"};

OPC_DEFINE_OP(Scale) = {
    .desc = {.name = "Scale", OPC_INPUTS(SCALE_IN, SCALE_OPT), OPC_OUTPUTS(SCALE_OUT), OPC_DTYPES(DT_SCALE),
             OPC_ATTRS(SCALE_ATTR),
             .notes = "output = input * scale, or input / scale with scale_down 1 (scale 0 then rejected); scale one "
                      "value of float16, float32, float64, int32 or int64"},
    .prepare = opc_prep_scale, .exec = opc_exec_scale, .check = opc_check_scale};
