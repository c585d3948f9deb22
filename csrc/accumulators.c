/* InPlaceAccumulatorV2, InPlaceAccumulator and ZeroGradient (com.microsoft): gradient accumulation.
 *   V2: accumulation_buffer_out = overwrite_flag ? value : accumulation_buffer + value; updated_flag = [true]
 *   V1: new_sum = update_signal (absent: true) ? old_sum + value : old_sum
 *   ZeroGradient: zero_gradient = +0 of old_gradient's shape (reset_signal, any type, never read)
 * The buffer (T) is float32, float64, float16 or bfloat16; value (T_GRAD) any of the four, of the buffer's shape
 * exactly (no broadcasting). Each result is the exact sum (or value) rounded once to T: float32 + float32 adds in
 * float, float64 + float64 in double; every other pair in double (both operands widen exactly; float32 and 16-bit
 * sums are exact in double or innocuous double roundings), a double rounded to a 16-bit type through float with
 * round-to-odd so that it is rounded once. Elementwise: every element gets the same value whatever the thread
 * split, so results are bitwise the same at any thread count. Flags hold one bool (shape [] or [1]). */
#include <omp.h>
#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "half_blocks.h"
#include "call.h"

typedef struct {
    int32_t t, g;   /* buffer and value dtypes */
    int64_t n;
    int32_t mode;   /* 0: add, 1: copy value, 2: copy buffer, 3: zero; resolved at exec from the flag */
    int32_t flag;   /* input index of the flag, -1: none */
    bool stream;    /* output far larger than the caches: non-temporal stores */
    bool flag_default;
} acc_plan;

static bool is_float_type(int32_t dt) {
    return dt == OPC_FLOAT || dt == OPC_DOUBLE || dt == OPC_FLOAT16 || dt == OPC_BFLOAT16;
}

/* ---- conversions ----------------------------------------------------------------------------- */

/* double -> float rounded to odd (truncate, then set the last bit when inexact): a later rounding to a type of
 * at most 22 significant bits then equals the direct rounding of the double */
static inline float to_odd_f32(double d) {
    float f = (float)d;
    if (!isfinite(f) || (double)f == d) {
        if (isinf(f) && isfinite(d)) { /* rounded up past FLT_MAX: the largest float, odd, narrows like d */
            f = copysignf(0x1.fffffep127f, (float)d);
        }
        return f;
    }
    if (fabs((double)f) > fabs(d)) f = nextafterf(f, 0.0f);
    uint32_t u;
    memcpy(&u, &f, 4);
    u |= 1u;
    memcpy(&f, &u, 4);
    return f;
}

static void load_double(int32_t dt, const void *src, double *dst, int64_t n) {
    switch (dt) {
    case OPC_FLOAT:
        for (int64_t i = 0; i < n; i++) dst[i] = ((const float *)src)[i];
        break;
    case OPC_DOUBLE: memcpy(dst, src, (size_t)n * 8); break;
    case OPC_FLOAT16:
        for (int64_t i = 0; i < n; i++) dst[i] = opc_f16_to_f32(((const uint16_t *)src)[i]);
        break;
    default:
        for (int64_t i = 0; i < n; i++) dst[i] = opc_bf16_to_f32(((const uint16_t *)src)[i]);
        break;
    }
}

static void store_double(int32_t dt, const double *src, void *dst, int64_t n) {
    switch (dt) {
    case OPC_FLOAT:
        for (int64_t i = 0; i < n; i++) ((float *)dst)[i] = (float)src[i];
        break;
    case OPC_DOUBLE: memcpy(dst, src, (size_t)n * 8); break;
    case OPC_FLOAT16:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = opc_f32_to_f16(to_odd_f32(src[i]));
        break;
    default:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = opc_f32_to_bf16(to_odd_f32(src[i]));
        break;
    }
}

/* ---- loops ----------------------------------------------------------------------------------- */

CLONES static void add_f32(const float *restrict a, const float *restrict b, float *restrict y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}
CLONES static void add_f64(const double *restrict a, const double *restrict b, double *restrict y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}
/* non-temporal stores for outputs far larger than the caches: the output line is not read first (a triad's
 * traffic, as an in-place add_); the same IEEE adds, so the same bits */
#if defined(__AVX512F__)
#define ACC_VW 16
#define ACC_STREAM_F32(d, a, b) _mm512_stream_ps(d, _mm512_add_ps(_mm512_loadu_ps(a), _mm512_loadu_ps(b)))
#define ACC_STREAM_F64(d, a, b) _mm512_stream_pd(d, _mm512_add_pd(_mm512_loadu_pd(a), _mm512_loadu_pd(b)))
#elif defined(__AVX__)
#define ACC_VW 8
#define ACC_STREAM_F32(d, a, b) _mm256_stream_ps(d, _mm256_add_ps(_mm256_loadu_ps(a), _mm256_loadu_ps(b)))
#define ACC_STREAM_F64(d, a, b) _mm256_stream_pd(d, _mm256_add_pd(_mm256_loadu_pd(a), _mm256_loadu_pd(b)))
#elif defined(__SSE2__)
#define ACC_VW 4
#define ACC_STREAM_F32(d, a, b) _mm_stream_ps(d, _mm_add_ps(_mm_loadu_ps(a), _mm_loadu_ps(b)))
#define ACC_STREAM_F64(d, a, b) _mm_stream_pd(d, _mm_add_pd(_mm_loadu_pd(a), _mm_loadu_pd(b)))
#endif

#ifdef ACC_VW
static void add_f32_stream(const float *a, const float *b, float *y, int64_t n) {
    int64_t i = 0;
    for (; i < n && ((uintptr_t)(y + i) & (ACC_VW * 4 - 1)); i++) y[i] = a[i] + b[i];
    for (; i + ACC_VW <= n; i += ACC_VW) ACC_STREAM_F32(y + i, a + i, b + i);
    for (; i < n; i++) y[i] = a[i] + b[i];
    _mm_sfence();
}
static void add_f64_stream(const double *a, const double *b, double *y, int64_t n) {
    int64_t i = 0, w = ACC_VW / 2;
    for (; i < n && ((uintptr_t)(y + i) & (ACC_VW * 4 - 1)); i++) y[i] = a[i] + b[i];
    for (; i + w <= n; i += w) ACC_STREAM_F64(y + i, a + i, b + i);
    for (; i < n; i++) y[i] = a[i] + b[i];
    _mm_sfence();
}
#endif

CLONES static void add_f32_block(const float *restrict a, const float *restrict b, float *restrict y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

#define ACC_BLOCK 1024

static void run_range(const acc_plan *p, const void *buf, const void *val, void *out, int64_t lo, int64_t hi) {
    int64_t n = hi - lo;
    if (n <= 0) return;
    size_t ts = opc_dtype_size(p->t), gs = opc_dtype_size(p->g);
    const char *b = (const char *)buf + lo * ts;
    const char *v = val ? (const char *)val + lo * gs : NULL;
    char *y = (char *)out + lo * ts;
    if (p->mode == 3) {
        memset(y, 0, (size_t)n * ts);
        return;
    }
    if (p->mode == 2) {
        if (y != b) memmove(y, b, (size_t)n * ts);
        return;
    }
    if (p->mode == 1 && p->t == p->g) {
        if (y != v) memmove(y, v, (size_t)n * ts);
        return;
    }
#ifdef ACC_VW
    if (p->mode == 0 && p->t == p->g && p->stream && p->t == OPC_FLOAT) {
        add_f32_stream((const float *)b, (const float *)v, (float *)y, n);
        return;
    }
    if (p->mode == 0 && p->t == p->g && p->stream && p->t == OPC_DOUBLE) {
        add_f64_stream((const double *)b, (const double *)v, (double *)y, n);
        return;
    }
#endif
    if (p->mode == 0 && p->t == p->g && p->t == OPC_FLOAT) {
        add_f32((const float *)b, (const float *)v, (float *)y, n);
        return;
    }
    if (p->mode == 0 && p->t == p->g && p->t == OPC_DOUBLE) {
        add_f64((const double *)b, (const double *)v, (double *)y, n);
        return;
    }
    bool half_t = p->t == OPC_FLOAT16 || p->t == OPC_BFLOAT16;
    if (p->mode == 0 && p->t == p->g && half_t) { /* float sums of two 16-bit values round once when narrowed */
        float fa[ACC_BLOCK], fb[ACC_BLOCK], fy[ACC_BLOCK];
        bool bf = p->t == OPC_BFLOAT16;
        for (int64_t i = 0; i < n; i += ACC_BLOCK) {
            int64_t k = n - i < ACC_BLOCK ? n - i : ACC_BLOCK;
            widen_half(bf, (const uint16_t *)b + i, fa, k);
            widen_half(bf, (const uint16_t *)v + i, fb, k);
            add_f32_block(fa, fb, fy, k);
            narrow_half(bf, fy, (uint16_t *)y + i, k);
        }
        return;
    }
    /* mixed types (or a 16-bit copy from another type): in double, rounded once */
    double da[ACC_BLOCK], db[ACC_BLOCK], dy[ACC_BLOCK];
    for (int64_t i = 0; i < n; i += ACC_BLOCK) {
        int64_t k = n - i < ACC_BLOCK ? n - i : ACC_BLOCK;
        load_double(p->g, v + i * gs, db, k);
        const double *src = db;
        if (p->mode == 0) {
            load_double(p->t, b + i * ts, da, k);
            add_f64(da, db, dy, k);
            src = dy;
        }
        store_double(p->t, src, y + i * ts, k);
    }
}

#define ACC_STREAM_BYTES ((int64_t)64 << 20)

static void run_all(opc_call *c, const acc_plan *p_in, const void *buf, const void *val, void *out) {
    if (p_in->n == 0) return;
    acc_plan plan = *p_in;
    const acc_plan *p = &plan;
    plan.stream = p_in->n * (int64_t)opc_dtype_size(p_in->t) >= ACC_STREAM_BYTES;
    /* below ~64k elements per thread, thread start-up costs more than it saves */
    int64_t want = p->n / opc_grain(65536) + 1;
    int nt = (int)(want < c->threads ? want : c->threads);
    if (nt <= 1) {
        run_range(p, buf, val, out, 0, p->n);
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        int64_t lo, hi;
        opc_split(p->n, omp_get_num_threads(), omp_get_thread_num(), opc_grain(ACC_BLOCK), &lo, &hi);
        run_range(p, buf, val, out, lo, hi);
    }
}

/* ---- prepare / check ------------------------------------------------------------------------- */

static int32_t check_flag(opc_call *c, int32_t i, const char *name) {
    const opc_tensor *f = c->in[i];
    if (!f) return OPC_OK;
    char a[200];
    if (f->dtype != OPC_BOOL)
        return opc_fail(c, OPC_ERR_UNSUPPORTED_DTYPE, "%s has dtype %s; it must be bool", name, opc_dtype_name(f->dtype));
    if (opc_numel(f) != 1)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "%s must hold exactly one bool, got shape %s", name,
                        opc_shape_str(f, a, sizeof a));
    return OPC_OK;
}

static int32_t prep_acc(opc_call *c, acc_plan *p, const char *buf_name, const char *flag_name) {
    int32_t s;
    if ((s = opc_require(c, 0)) || (s = opc_require(c, 1))) return s;
    const opc_tensor *b = c->in[0], *v = c->in[1];
    if ((s = opc_check_supported_dtype(c, b->dtype))) return s;
    if (!is_float_type(v->dtype))
        return opc_fail(c, OPC_ERR_UNSUPPORTED_DTYPE, "value has dtype %s; it must be float32, float64, float16 or bfloat16",
                        opc_dtype_name(v->dtype));
    char a[200], d[200];
    if (!opc_same_shape(b, v))
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "value has shape %s, %s %s: they must be equal (no broadcasting)",
                        opc_shape_str(v, a, sizeof a), buf_name, opc_shape_str(b, d, sizeof d));
    if ((s = check_flag(c, 2, flag_name))) return s;
    p->t = b->dtype;
    p->g = v->dtype;
    p->n = opc_numel(b);
    p->flag = c->in[2] ? 2 : -1;
    return OPC_OK;
}

static bool flag_value(const opc_call *c, const acc_plan *p) {
    if (p->flag < 0) return p->flag_default;
    return *(const uint8_t *)c->in[p->flag]->data != 0;
}

int32_t opc_prep_acc_v2(opc_call *c, void *plan_v, opc_shape *outs) {
    acc_plan *p = plan_v;
    int32_t s = prep_acc(c, p, "accumulation_buffer", "overwrite_flag");
    if (s) return s;
    p->flag_default = false;
    outs[0].dtype = OPC_BOOL;
    outs[0].rank = 1;
    outs[0].shape[0] = 1;
    opc_shape_from(&outs[1], c->in[0]);
    return OPC_OK;
}

int32_t opc_exec_acc_v2(opc_call *c, const void *plan_v, opc_tensor *outs) {
    acc_plan p = *(const acc_plan *)plan_v;
    if (outs[0].data) *(uint8_t *)outs[0].data = 1;
    if (!outs[1].data) return OPC_OK;
    p.mode = flag_value(c, &p) ? 1 : 0;
    run_all(c, &p, c->in[0]->data, c->in[1]->data, outs[1].data);
    return OPC_OK;
}

int32_t opc_prep_acc_v1(opc_call *c, void *plan_v, opc_shape *outs) {
    acc_plan *p = plan_v;
    int32_t s = prep_acc(c, p, "old_sum", "update_signal");
    if (s) return s;
    p->flag_default = true;
    opc_shape_from(&outs[0], c->in[0]);
    return OPC_OK;
}

int32_t opc_exec_acc_v1(opc_call *c, const void *plan_v, opc_tensor *outs) {
    acc_plan p = *(const acc_plan *)plan_v;
    if (!outs[0].data) return OPC_OK;
    p.mode = flag_value(c, &p) ? 0 : 2;
    run_all(c, &p, c->in[0]->data, c->in[1]->data, outs[0].data);
    return OPC_OK;
}

int32_t opc_prep_zero_grad(opc_call *c, void *plan_v, opc_shape *outs) {
    acc_plan *p = plan_v;
    int32_t s;
    if ((s = opc_require(c, 0)) || (s = opc_require(c, 1))) return s;
    const opc_tensor *g = c->in[0];
    if ((s = opc_check_supported_dtype(c, g->dtype))) return s;
    p->t = p->g = g->dtype;
    p->n = opc_numel(g);
    p->mode = 3;
    p->flag = -1;
    opc_shape_from(&outs[0], g);
    return OPC_OK;
}

int32_t opc_exec_zero_grad(opc_call *c, const void *plan_v, opc_tensor *outs) {
    const acc_plan *p = plan_v;
    if (!outs[0].data) return OPC_OK;
    run_all(c, p, c->in[0]->data, NULL, outs[0].data);
    return OPC_OK;
}

/* ---- registry entries (listed in ops.def; held against the specs by tests/openmp/test_descriptors.py) ---- */

static const int32_t DT_ACC[] = {OPC_FLOAT, OPC_DOUBLE, OPC_FLOAT16, OPC_BFLOAT16};
static const char *const V2_IN[] = {"accumulation_buffer", "value", "overwrite_flag"};
static const uint8_t V2_OPT[] = {0, 0, 1};
static const char *const V2_OUT[] = {"updated_flag", "accumulation_buffer_out"};
static const char *const V1_IN[] = {"old_sum", "value", "update_signal"};
static const uint8_t V1_OPT[] = {0, 0, 1};
static const char *const V1_OUT[] = {"new_sum"};
static const char *const ZG_IN[] = {"old_gradient", "reset_signal"};
static const uint8_t ZG_OPT[] = {0, 0};
static const char *const ZG_OUT[] = {"zero_gradient"};

OPC_DEFINE_OP(InPlaceAccumulatorV2) = {
    .desc = {.name = "InPlaceAccumulatorV2", OPC_INPUTS(V2_IN, V2_OPT), OPC_OUTPUTS(V2_OUT), OPC_DTYPES(DT_ACC),
             .notes = "accumulation_buffer_out = overwrite_flag ? value : buffer + value (value of any float type, the "
                      "buffer's shape), rounded once; updated_flag [true]"},
    .prepare = opc_prep_acc_v2, .exec = opc_exec_acc_v2};

OPC_DEFINE_OP(InPlaceAccumulator) = {
    .desc = {.name = "InPlaceAccumulator", OPC_INPUTS(V1_IN, V1_OPT), OPC_OUTPUTS(V1_OUT), OPC_DTYPES(DT_ACC),
             .notes = "new_sum = update_signal (absent: true) ? old_sum + value : old_sum, rounded once"},
    .prepare = opc_prep_acc_v1, .exec = opc_exec_acc_v1};

OPC_DEFINE_OP(ZeroGradient) = {
    .desc = {.name = "ZeroGradient", OPC_INPUTS(ZG_IN, ZG_OPT), OPC_OUTPUTS(ZG_OUT), OPC_DTYPES(DT_ACC),
             .notes = "zero_gradient = +0 of old_gradient's shape; reset_signal (any type) is not read"},
    .prepare = opc_prep_zero_grad, .exec = opc_exec_zero_grad};
