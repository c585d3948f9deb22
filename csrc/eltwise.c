/* Elementwise activation gradients: ReluGrad, SigmoidGrad, TanhGrad, QuickGeluGrad, LeakyReluGrad,
 * GeluGrad, FastGeluGrad, BiasGeluGrad_dX, BiasFastGeluGrad_dX (float32, float64; float16 and
 * bfloat16 through the float32 loops).
 *
 * Every element is computed by the same branch-free expression whatever the thread split, and
 * -ffp-contract=off keeps vector body and scalar tail identical, so results are bitwise the same
 * for any thread count. Formulas are arranged so the limits at +-inf and huge |x| are the
 * mathematical ones (no inf*0 NaNs). */
#include <omp.h>

#include "half_blocks.h"
#include "call.h"
#include "vmath.h"


enum { K_RELU, K_SIGMOID, K_TANH, K_QUICKGELU, K_LEAKY, K_GELU, K_FASTGELU };

typedef struct {
    int kind;
    bool bias;
    int32_t dtype;
    int64_t n;       /* elements */
    int64_t blen;    /* bias length (last dim of X) */
    double alpha;
} ew_plan;

/* ---- scalar formulas (inlined into vectorised loops) ---------------------------------------- */

#define SQRT_2_OVER_PI 0.7978845608028654
#define FG_COEF 0.044715
#define INV_SQRT_2PI 0.3989422804014327

/* |x| clamped to c as an integer min of the bit patterns (ordered like the values for x >= 0), sign
 * kept. A float select with a constant arm would let GCC fold that constant through the whole
 * derivative and blend every intermediate (twice the vector code); an integer min is one op.
 * NaN and inf come out as +-c: callers select their results. */
static inline float clamp_abs(float x, float c) {
    uint32_t u, cu;
    memcpy(&u, &x, 4);
    memcpy(&cu, &c, 4);
    uint32_t a = u & 0x7FFFFFFFu;
    a = a < cu ? a : cu;
    return opc_bits_to_f32(a | (u & 0x80000000u));
}

/* The float32 versions evaluate on x clamped to where every intermediate stays a normal float
 * (subnormals cost ~100x on x86) and select the exact limit beyond, where the true derivative is
 * 1, or 0 to within 1e-30. */
static inline float quickgelu_f(float g, float x, float alpha) {
    float v = alpha * x;
    float vc = clamp_abs(v, 80.0f);
    float av = fabsf(vc);
    float e = opc_expf_inrange(-av), q = 1.0f / (1.0f + e); /* -av >= -80 */
    float s = vc < 0 ? e * q : q, oms = vc < 0 ? q : e * q; /* sigmoid(v), 1 - sigmoid(v) */
    float d = s * (1.0f + vc * oms);
    d = v > 80.0f ? 1.0f : d;
    d = v < -80.0f ? 0.0f : d;
    d = v == v ? d : v;                                /* NaN */
    d = (alpha == 0.0f && x == x) ? 0.5f : d;          /* alpha = 0: slope 0.5 even at x = +-inf */
    return g * d;
}
static inline double quickgelu_d(double g, double x, double alpha) {
    double v = alpha * x;
    v = (alpha == 0.0 && x == x) ? 0.0 : v;
    v = v > 800.0 ? 800.0 : (v < -800.0 ? -800.0 : v);
    double av = v < 0 ? -v : v;
    double e = exp(-av), q = 1.0 / (1.0 + e);
    double s = v < 0 ? e * q : q, oms = v < 0 ? q : e * q;
    return g * (s * (1.0 + v * oms));
}

static inline float gelu_f(float g, float x) {
    float d = opc_gelu_deriv(clamp_abs(x, 12.9f));
    d = x > 12.9f ? 1.0f : d;
    d = x < -12.9f ? 0.0f : d;
    d = x == x ? d : x; /* NaN */
    return g * d;
}
static inline double gelu_d(double g, double x) {
    double xc = x > 40.0 ? 40.0 : (x < -40.0 ? -40.0 : x);
    double pdf = exp(-0.5 * xc * xc) * INV_SQRT_2PI;
    return g * (0.5 * erfc(-xc * 0.7071067811865476) + xc * pdf);
}

/* 0.5 (1 + t + (1 - t^2) w), t = tanh(u): with e = exp(-2|u|), 1 + t and 1 - t^2 come without
 * cancellation (accurate far into the negative tail), and x is clamped where the result is
 * exactly 1 or 0, so x^3 cannot overflow into inf * 0. */
static inline float fastgelu_f(float g, float x) {
    const float a = (float)SQRT_2_OVER_PI, ag = (float)(SQRT_2_OVER_PI * FG_COEF);
    float xc = clamp_abs(x, 9.5f);
    float x3 = xc * xc * xc;
    float u = a * xc + ag * x3;
    float w = a * xc + 3.0f * ag * x3;
    float au = fabsf(u);
    float e = opc_expf_inrange(-2.0f * au), q = 1.0f / (1.0f + e); /* |u| <= 38.3 */
    float one_plus_t = u < 0 ? 2.0f * e * q : 2.0f * q;
    float one_minus_t2 = 4.0f * e * q * q;
    float d = 0.5f * (one_plus_t + one_minus_t2 * w);
    d = x > 9.5f ? 1.0f : d;
    d = x < -9.5f ? 0.0f : d;
    d = x == x ? d : x; /* NaN */
    return g * d;
}
static inline double fastgelu_d(double g, double x) {
    const double a = SQRT_2_OVER_PI, ag = SQRT_2_OVER_PI * FG_COEF;
    double xc = x > 30.0 ? 30.0 : (x < -30.0 ? -30.0 : x);
    double x3 = xc * xc * xc;
    double u = a * xc + ag * x3;
    double w = a * xc + 3.0 * ag * x3;
    double au = u < 0 ? -u : u;
    double e = exp(-2.0 * au), q = 1.0 / (1.0 + e);
    double one_plus_t = u < 0 ? 2.0 * e * q : 2.0 * q;
    double one_minus_t2 = 4.0 * e * q * q;
    return g * (0.5 * (one_plus_t + one_minus_t2 * w));
}

/* ---- loops ---------------------------------------------------------------------------------- */

/* LOOP(name, T, expr): dx[i] = expr(g = dy[i], v = x[i] [+ b[i]], alpha). A line marked
 * "simd: N" must have N loops that GCC reports vectorised at full width at every ISA level
 * (tests/openmp/test_vectorised.py compiles this file with the build's flags and checks). */
#define LOOP(NAME, T, EXPR)                                                                       \
    CLONES static void NAME(const T *restrict dy, const T *restrict x, const T *restrict b,      \
                            T *restrict dx, int64_t n, T alpha) {                                \
        (void)alpha;                                                                              \
        if (b) {                                                                                  \
            for (int64_t i = 0; i < n; i++) {                                                     \
                T g = dy[i], v = x[i] + b[i];                                                     \
                dx[i] = EXPR;                                                                     \
            }                                                                                     \
        } else {                                                                                  \
            for (int64_t i = 0; i < n; i++) {                                                     \
                T g = dy[i], v = x[i];                                                            \
                dx[i] = EXPR;                                                                     \
            }                                                                                     \
        }                                                                                         \
    }

LOOP(relu_f32, float, v > 0.0f ? g : 0.0f) /* simd: 2 */
LOOP(relu_f64, double, v > 0.0 ? g : 0.0)
LOOP(sigmoid_f32, float, g * v * (1.0f - v)) /* simd: 2 */
LOOP(sigmoid_f64, double, g * v * (1.0 - v))
LOOP(tanh_f32, float, g * (1.0f - v * v)) /* simd: 2 */
LOOP(tanh_f64, double, g * (1.0 - v * v))
LOOP(leaky_f32, float, v > 0.0f ? g : alpha * g) /* simd: 2 */
LOOP(leaky_f64, double, v > 0.0 ? g : alpha * g)
LOOP(quickgelu_f32, float, quickgelu_f(g, v, alpha)) /* simd: 2 */
LOOP(quickgelu_f64, double, quickgelu_d(g, v, alpha))
LOOP(gelu_f32, float, gelu_f(g, v)) /* simd: 2 */
LOOP(gelu_f64, double, gelu_d(g, v))
LOOP(fastgelu_f32, float, fastgelu_f(g, v)) /* simd: 2 */
LOOP(fastgelu_f64, double, fastgelu_d(g, v))

typedef void (*loop_f32)(const float *, const float *, const float *, float *, int64_t, float);
typedef void (*loop_f64)(const double *, const double *, const double *, double *, int64_t, double);

static const loop_f32 LOOPS_F32[] = {relu_f32, sigmoid_f32, tanh_f32, quickgelu_f32,
                                     leaky_f32, gelu_f32,    fastgelu_f32};
static const loop_f64 LOOPS_F64[] = {relu_f64, sigmoid_f64, tanh_f64, quickgelu_f64,
                                     leaky_f64, gelu_f64,    fastgelu_f64};

/* float16 / bfloat16 (half_blocks.h): a bias is widened too, so X + B is formed in float32. */
static void half_loop(int kind, bool bf16, const uint16_t *dy, const uint16_t *x, const uint16_t *b,
                      uint16_t *dx, int64_t n, float alpha) {
    float g[HALF_BLOCK], v[HALF_BLOCK], bb[HALF_BLOCK], o[HALF_BLOCK];
    void (*widen)(const uint16_t *restrict, float *restrict, int64_t) = bf16 ? widen_bf16 : widen_f16;
    for (int64_t i = 0; i < n; i += HALF_BLOCK) {
        int64_t m = n - i < HALF_BLOCK ? n - i : HALF_BLOCK;
        widen(dy + i, g, m);
        widen(x + i, v, m);
        if (b) widen(b + i, bb, m);
        LOOPS_F32[kind](g, v, b ? bb : NULL, o, m, alpha);
        narrow_half(bf16, o, dx + i, m);
    }
}

/* ---- prepare ------------------------------------------------------------------------------- */

static int32_t prep(opc_call *c, void *plan_v, opc_shape *outs, int kind, bool bias) {
    ew_plan *p = plan_v;
    int32_t s;
    int32_t nin = bias ? 3 : 2;
    for (int32_t i = 0; i < nin; i++)
        if ((s = opc_require(c, i))) return s;
    const opc_tensor *dy = c->in[0], *x = c->in[1];
    const int32_t idx[] = {1, 0, 2};
    if ((s = opc_check_supported_dtype(c, x->dtype))) return s;
    if ((s = opc_check_dtypes(c, x->dtype, idx, nin))) return s;
    if (!opc_same_shape(dy, x)) {
        char a[200], b[200];
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "dY shape %s differs from %s shape %s",
                        opc_shape_str(dy, a, sizeof a), c->desc->input_names[1],
                        opc_shape_str(x, b, sizeof b));
    }
    p->kind = kind;
    p->bias = bias;
    p->dtype = x->dtype;
    p->n = opc_numel(x);
    p->alpha = 0.0;
    if (kind == K_QUICKGELU || kind == K_LEAKY) {
        if ((s = opc_attr_float(c, "alpha", kind == K_QUICKGELU ? 1.702 : 0.01, &p->alpha, NULL)))
            return s;
        if (p->dtype != OPC_DOUBLE && isfinite(p->alpha) && fabs(p->alpha) > 3.4028234663852886e38)
            return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "alpha %g overflows float32", p->alpha);
    }
    if (bias) {
        const opc_tensor *b = c->in[2];
        char a[200], bb[200];
        if (x->rank < 1)
            return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "X must have rank >= 1 (B broadcasts over its last axis), got a scalar");
        if (b->rank != 1)
            return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "B must be 1-D, got shape %s", opc_shape_str(b, a, sizeof a));
        if (b->shape[0] != x->shape[x->rank - 1])
            return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "B length %lld differs from the last dim of X %s",
                            (long long)b->shape[0], opc_shape_str(x, bb, sizeof bb));
        p->blen = b->shape[0];
    }
    opc_shape_from(&outs[0], x);
    return OPC_OK;
}

int32_t opc_prep_relu(opc_call *c, void *p, opc_shape *o) { return prep(c, p, o, K_RELU, false); }
int32_t opc_prep_sigmoid(opc_call *c, void *p, opc_shape *o) { return prep(c, p, o, K_SIGMOID, false); }
int32_t opc_prep_tanh(opc_call *c, void *p, opc_shape *o) { return prep(c, p, o, K_TANH, false); }
int32_t opc_prep_quickgelu(opc_call *c, void *p, opc_shape *o) { return prep(c, p, o, K_QUICKGELU, false); }
int32_t opc_prep_leakyrelu(opc_call *c, void *p, opc_shape *o) { return prep(c, p, o, K_LEAKY, false); }
int32_t opc_prep_gelu(opc_call *c, void *p, opc_shape *o) { return prep(c, p, o, K_GELU, false); }
int32_t opc_prep_fastgelu(opc_call *c, void *p, opc_shape *o) { return prep(c, p, o, K_FASTGELU, false); }
int32_t opc_prep_biasgelu(opc_call *c, void *p, opc_shape *o) { return prep(c, p, o, K_GELU, true); }
int32_t opc_prep_biasfastgelu(opc_call *c, void *p, opc_shape *o) { return prep(c, p, o, K_FASTGELU, true); }

/* ---- exec ---------------------------------------------------------------------------------- */

/* [lo, hi) of the flat index; with a bias, cut at row ends so b lines up with the columns. */
static void run_range(const ew_plan *p, const void *dy, const void *x, const void *b, void *dx,
                      int64_t lo, int64_t hi) {
    size_t es = opc_dtype_size(p->dtype);
    int64_t i = lo;
    while (i < hi) {
        int64_t end = hi;
        const void *bp = NULL;
        if (p->bias) {
            int64_t col = i % p->blen;
            if (i - col + p->blen < end) end = i - col + p->blen;
            bp = (const char *)b + col * es;
        }
        const void *dyp = (const char *)dy + i * es, *xp = (const char *)x + i * es;
        void *dxp = (char *)dx + i * es;
        if (p->dtype == OPC_FLOAT)
            LOOPS_F32[p->kind](dyp, xp, bp, dxp, end - i, (float)p->alpha);
        else if (p->dtype == OPC_DOUBLE)
            LOOPS_F64[p->kind](dyp, xp, bp, dxp, end - i, p->alpha);
        else
            half_loop(p->kind, p->dtype == OPC_BFLOAT16, dyp, xp, bp, dxp, end - i, (float)p->alpha);
        i = end;
    }
}

int32_t opc_exec_ew(opc_call *c, const void *plan_v, opc_tensor *outs) {
    const ew_plan *p = plan_v;
    if (!outs[0].data || p->n == 0) return OPC_OK;
    const void *dy = c->in[0]->data, *x = c->in[1]->data, *b = p->bias ? c->in[2]->data : NULL;
    void *dx = outs[0].data;
    /* below ~32k elements per thread, thread start-up costs more than it saves */
    int64_t want = p->n / opc_grain(32768) + 1;
    int nt = (int)(want < c->threads ? want : c->threads);
    if (nt <= 1) {
        run_range(p, dy, x, b, dx, 0, p->n);
        return OPC_OK;
    }
#pragma omp parallel num_threads(nt)
    {
        int64_t lo, hi;
        /* cache-line-sized pieces; element-sized when the split is forced, so a check of thread
         * invariance also cuts through vector bodies (they must round like the scalar tails) */
        opc_split(p->n, omp_get_num_threads(), omp_get_thread_num(), opc_grain(64), &lo, &hi);
        run_range(p, dy, x, b, dx, lo, hi);
    }
    return OPC_OK;
}

/* ---- registry entries (listed in ops.def; held against the specs by tests/openmp/test_descriptors.py) ---- */

static const char *const IN_DY_X[] = {"dY", "X"};
static const char *const IN_DY_Y[] = {"dY", "Y"};
static const char *const IN_DY_X_B[] = {"dY", "X", "B"};
static const uint8_t REQ2[] = {0, 0};
static const uint8_t REQ3[] = {0, 0, 0};
static const char *const OUT_DX[] = {"dX"};
/* 16-bit types computed in float32, rounded once */
static const int32_t DT_EW[] = {OPC_FLOAT, OPC_DOUBLE, OPC_FLOAT16, OPC_BFLOAT16};
static const char *const ATTR_ALPHA[] = {"alpha"};

#define EW_OP(NAME, IN, REQ, PREP, NOTES, ...)                                                              \
    OPC_DEFINE_OP(NAME) = {.desc = {.name = #NAME, OPC_INPUTS(IN, REQ), OPC_OUTPUTS(OUT_DX), OPC_DTYPES(DT_EW), \
                                    .notes = NOTES, __VA_ARGS__},                                            \
                           .prepare = PREP, .exec = opc_exec_ew}

EW_OP(ReluGrad, IN_DY_X, REQ2, opc_prep_relu, "dX = X > 0 ? dY : 0 (a select); the second input may be X or Y");
EW_OP(SigmoidGrad, IN_DY_Y, REQ2, opc_prep_sigmoid, "dX = dY*Y*(1-Y)");
EW_OP(TanhGrad, IN_DY_Y, REQ2, opc_prep_tanh, "dX = dY*(1-Y*Y)");
EW_OP(QuickGeluGrad, IN_DY_X, REQ2, opc_prep_quickgelu,
      "alpha default 1.702; alpha = 0 gives 0.5*dY even at X = +-inf", OPC_ATTRS(ATTR_ALPHA));
EW_OP(LeakyReluGrad, IN_DY_Y, REQ2, opc_prep_leakyrelu, "alpha default 0.01; dX = Y > 0 ? dY : alpha*dY",
      OPC_ATTRS(ATTR_ALPHA));
EW_OP(GeluGrad, IN_DY_X, REQ2, opc_prep_gelu, "exact (erf) Gelu; limits 1 and 0 at +-inf");
EW_OP(FastGeluGrad, IN_DY_X, REQ2, opc_prep_fastgelu, "tanh-approximation Gelu; limits 1 and 0 at +-inf");
EW_OP(BiasGeluGrad_dX, IN_DY_X_B, REQ3, opc_prep_biasgelu, "GeluGrad at X + B, B 1-D over the last axis");
EW_OP(BiasFastGeluGrad_dX, IN_DY_X_B, REQ3, opc_prep_biasfastgelu,
      "FastGeluGrad at X + B, B 1-D over the last axis");
