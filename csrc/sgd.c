/* SGDOptimizer (com.microsoft): NW = W - ETA * G, NG = -ETA * G (the update applied), both optional.
 * W and G float32 or float64 of one shape; ETA one float32 value. Each element is computed in double
 * (delta = -eta * g, then w + delta) and rounded once to the weights' type: for float32 the product is exact in
 * double, for float64 the two roundings are the reference's. Elementwise, so every element gets the same value
 * whatever the thread split: the results are bitwise the same at any thread count. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "call.h"

/* one NaN for every NaN result (which operand's NaN w + d returns depends on the operand order, which the
 * vectorised loop's scalar peel changes with the buffers' alignment): the same bits whatever the outputs and split */
static inline double canon(double x) { return x == x ? x : NAN; }

typedef struct {
    int32_t dtype;
    int64_t n;
} sgd_plan;

int32_t opc_prep_sgd(opc_call *c, void *plan_v, opc_shape *outs) {
    sgd_plan *p = plan_v;
    int32_t s;
    for (int32_t i = 0; i < 3; i++)
        if ((s = opc_require(c, i))) return s;
    const opc_tensor *eta = c->in[0], *w = c->in[1], *g = c->in[2];
    if ((s = opc_check_supported_dtype(c, w->dtype))) return s;
    static const int32_t WG[] = {1, 2};
    if ((s = opc_check_dtypes(c, w->dtype, WG, 2))) return s;
    if (eta->dtype != OPC_FLOAT)
        return opc_fail(c, OPC_ERR_UNSUPPORTED_DTYPE, "ETA has dtype %s; it must be float32", opc_dtype_name(eta->dtype));
    char a[200], b[200];
    if (opc_numel(eta) != 1)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "ETA must hold exactly one value, got shape %s",
                        opc_shape_str(eta, a, sizeof a));
    if (!opc_same_shape(w, g))
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "G has shape %s but W has %s: they must be equal",
                        opc_shape_str(g, a, sizeof a), opc_shape_str(w, b, sizeof b));
    p->dtype = w->dtype;
    p->n = opc_numel(w);
    opc_shape_from(&outs[0], w);
    opc_shape_from(&outs[1], w);
    return OPC_OK;
}

CLONES static void sgd_nw_f32(const float *restrict w, const float *restrict g, float *restrict nw, int64_t n,
                              double eta) {
    for (int64_t i = 0; i < n; i++) nw[i] = (float)canon((double)w[i] + -eta * (double)g[i]);
}
CLONES static void sgd_ng_f32(const float *restrict g, float *restrict ng, int64_t n, double eta) {
    for (int64_t i = 0; i < n; i++) ng[i] = (float)canon(-eta * (double)g[i]);
}
#if defined(__AVX512F__)
/* Both outputs of a large tensor (past the caches): the same arithmetic 16 elements at a time with streaming
 * stores, which skip reading the output lines before writing them (a quarter of the memory traffic). nw and ng
 * must share their offset from a 64-byte boundary (the scalar head aligns both); returns the elements done. */
#define SGD_STREAM_MIN (1 << 20)
static int64_t sgd_stream_f32(const float *restrict w, const float *restrict g, float *restrict nw,
                              float *restrict ng, int64_t n, double eta) {
    if (n < SGD_STREAM_MIN || ((uintptr_t)nw & 63) != ((uintptr_t)ng & 63) || ((uintptr_t)nw & 3)) return 0;
    int64_t head = (int64_t)(((64 - ((uintptr_t)nw & 63)) & 63) / 4);
    for (int64_t i = 0; i < head; i++) {
        double d = -eta * (double)g[i];
        nw[i] = (float)canon((double)w[i] + d);
        ng[i] = (float)canon(d);
    }
    const __m512d e = _mm512_set1_pd(-eta), qnan = _mm512_set1_pd(NAN);
    int64_t i = head;
#define SGD_HALF(off, NW, NG)                                                                                   \
    do {                                                                                                        \
        __m512d d_ = _mm512_mul_pd(e, _mm512_cvtps_pd(_mm256_loadu_ps(g + i + (off))));                         \
        __m512d s_ = _mm512_add_pd(_mm512_cvtps_pd(_mm256_loadu_ps(w + i + (off))), d_);                        \
        d_ = _mm512_mask_mov_pd(d_, _mm512_cmp_pd_mask(d_, d_, _CMP_UNORD_Q), qnan);                            \
        s_ = _mm512_mask_mov_pd(s_, _mm512_cmp_pd_mask(s_, s_, _CMP_UNORD_Q), qnan);                            \
        NG = _mm512_cvtpd_ps(d_);                                                                               \
        NW = _mm512_cvtpd_ps(s_);                                                                               \
    } while (0)
    for (; i + 16 <= n; i += 16) {
        __m256 w0, w1, g0, g1;
        SGD_HALF(0, w0, g0);
        SGD_HALF(8, w1, g1);
        _mm512_stream_pd((double *)(nw + i), _mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(w0)),
                                                                _mm256_castps_pd(w1), 1));
        _mm512_stream_pd((double *)(ng + i), _mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(g0)),
                                                                _mm256_castps_pd(g1), 1));
    }
#undef SGD_HALF
    _mm_sfence();
    return i;
}
#else
static int64_t sgd_stream_f32(const float *w, const float *g, float *nw, float *ng, int64_t n, double eta) {
    (void)w, (void)g, (void)nw, (void)ng, (void)n, (void)eta;
    return 0;
}
#endif

/* both outputs: the two single-output loops over blocks that stay in L1 (one fused loop with two float stores
 * from double vectorises poorly) */
#define SGD_BLOCK 2048
static void sgd_f32(const float *restrict w, const float *restrict g, float *restrict nw, float *restrict ng,
                    int64_t n, double eta) {
    if (nw && ng) {
        int64_t done = sgd_stream_f32(w, g, nw, ng, n, eta);
        w += done, g += done, nw += done, ng += done, n -= done;
    }
    if (nw && ng)
        for (int64_t i = 0; i < n; i += SGD_BLOCK) {
            int64_t k = n - i < SGD_BLOCK ? n - i : SGD_BLOCK;
            sgd_nw_f32(w + i, g + i, nw + i, k, eta);
            sgd_ng_f32(g + i, ng + i, k, eta);
        }
    else if (nw)
        sgd_nw_f32(w, g, nw, n, eta);
    else
        sgd_ng_f32(g, ng, n, eta);
}

CLONES static void sgd_f64(const double *restrict w, const double *restrict g, double *restrict nw,
                           double *restrict ng, int64_t n, double eta) {
    if (nw && ng)
        for (int64_t i = 0; i < n; i++) {
            double d = -eta * g[i];
            nw[i] = canon(w[i] + d);
            ng[i] = canon(d);
        }
    else if (nw)
        for (int64_t i = 0; i < n; i++) nw[i] = canon(w[i] + -eta * g[i]);
    else
        for (int64_t i = 0; i < n; i++) ng[i] = canon(-eta * g[i]);
}

static void sgd_range(const sgd_plan *p, const void *w, const void *g, void *nw, void *ng, double eta, int64_t lo,
                      int64_t hi) {
    if (hi <= lo) return;
    if (p->dtype == OPC_FLOAT)
        sgd_f32((const float *)w + lo, (const float *)g + lo, nw ? (float *)nw + lo : NULL, ng ? (float *)ng + lo : NULL,
                hi - lo, eta);
    else
        sgd_f64((const double *)w + lo, (const double *)g + lo, nw ? (double *)nw + lo : NULL,
                ng ? (double *)ng + lo : NULL, hi - lo, eta);
}

int32_t opc_exec_sgd(opc_call *c, const void *plan_v, opc_tensor *outs) {
    const sgd_plan *p = plan_v;
    void *nw = outs[0].data, *ng = outs[1].data;
    if ((!nw && !ng) || p->n == 0) return OPC_OK;
    double eta = *(const float *)c->in[0]->data;
    const void *w = c->in[1]->data, *g = c->in[2]->data;
    /* memory-bound: below ~64k elements per thread, thread start-up costs more than it saves */
    int64_t want = p->n / opc_grain(65536) + 1;
    int nt = (int)(want < c->threads ? want : c->threads);
    if (nt <= 1) {
        sgd_range(p, w, g, nw, ng, eta, 0, p->n);
        return OPC_OK;
    }
#pragma omp parallel num_threads(nt)
    {
        int64_t lo, hi;
        opc_split(p->n, omp_get_num_threads(), omp_get_thread_num(), opc_grain(64), &lo, &hi);
        sgd_range(p, w, g, nw, ng, eta, lo, hi);
    }
    return OPC_OK;
}

static const int32_t DT_SGD[] = {OPC_FLOAT, OPC_DOUBLE};
static const char *const SGD_IN[] = {"ETA", "W", "G"};
static const uint8_t SGD_OPT[] = {0, 0, 0};
static const char *const SGD_OUT[] = {"NW", "NG"};

OPC_DEFINE_OP(SGDOptimizer) = {
    .desc = {.name = "SGDOptimizer", OPC_INPUTS(SGD_IN, SGD_OPT), OPC_OUTPUTS(SGD_OUT), OPC_DTYPES(DT_SGD),
             .notes = "NW = W - ETA * G, NG = -ETA * G; W, G float32 or float64 of one shape, ETA one float32 value"},
    .prepare = opc_prep_sgd, .exec = opc_exec_sgd};
