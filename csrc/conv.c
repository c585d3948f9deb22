/* ConvGrad(dY, X, W) -> (dX?, dW?, dB?) for N-D convolutions (float32, float64; float16 computed
 * in float32 and rounded once), ONNX Conv
 * attributes: auto_pad (NOTSET, VALID, SAME_UPPER, SAME_LOWER), kernel_shape, pads, strides,
 * dilations, group.
 *
 * Layout per (image n, group g): X[n,g] is [Cg, in...], dY[n,g] is [Mg, P] (P output positions),
 * W[g] is [Mg, Kf] with Kf = Cg * prod(kernel). The output positions are processed in chunks of
 * PC columns so the column buffer stays in L2:
 *   dW[g] += dY[n,g][:, chunk] . col(X[n,g])[:, chunk]^T      (im2col + GEMM; float32 with many items:
 *            dW[g]^T += col . dY^T by opc_sgemm_packed, see CONV_PACKED)
 *   dcol   = W[g]^T[rows] . dY[n,g][:, chunk]; dX += col2im(dcol)   (GEMM + col2im)
 *   dB[m]  = sum over n and positions of dY[n, m].
 * 1x1 kernels with stride 1 and no padding use X / dX directly (no im2col). With stride 1 dX is
 * usually the transposed conv instead (dx_item_t): dX[n,g][:, chunk] = Wt[g] . col(dY[n,g]), one
 * GEMM with K = Mg * prod(kernel) per chunk of input positions and no col2im.
 *
 * Threads: the three outputs are separate passes (a subset runs only its own passes, with the same
 * arithmetic as the full set). Each pass splits into work items whose layout depends only on the
 * shapes, never on the thread count: dX items (n, g, channel block), or (n, g, chunk) on the
 * transposed path, write disjoint parts of dX; dW
 * items (n, g, chunk) are grouped into at most 16 fixed slots with private accumulators summed in
 * slot order; dB is one sequential sum per m. OpenBLAS is held to 1 thread (its busy-waiting
 * pool would compete with OpenMP's): a pass with at least WHOLE_ITEMS units runs them on OpenMP
 * threads, each GEMM one BLAS call; a pass with fewer cuts each GEMM into opc_gemm_par's fixed
 * blocks, the units running on OpenMP threads when there are at least as many as threads, else one
 * after another with the blocks shared over the threads. Which BLAS calls a GEMM makes depends on
 * the shapes only, so all three outputs are bitwise identical for any thread count. */
#include <omp.h>
#include <stdlib.h>

#include "blas.h"
#include "call.h"

#define MAXSP (OPC_MAX_RANK - 2)
#define COL_BYTES (1 << 20) /* target size of one column buffer chunk */
#define MAX_SLOTS 16
/* float32 dW with many items (each GEMM one call) computes dW^T = col . dY^T with opc_sgemm_packed where the
 * build has AVX2 + FMA: M = Kf rows against the few (Mg) columns packed once per chunk, where the BLAS got
 * M = Mg (32 or 64) rows. dW took 20-23 % less time (ConvGrad large and large-3d, AVX-512); the GEMM itself ran at
 * 290 GFLOP/s on the 3-D shape. Deterministic like the BLAS call it replaces: the same items and slots. */
#if defined(__AVX2__) && defined(__FMA__)
#define CONV_PACKED 1
#else
#define CONV_PACKED 0
#endif

typedef struct {
    int32_t dtype;
    int32_t nd;
    int64_t N, C, M, G, Cg, Mg;
    int64_t in[MAXSP], k[MAXSP], out[MAXSP], s[MAXSP], d[MAXSP], pb[MAXSP];
    int64_t in_sz, ksz, P, Kf, PC;
    bool pointwise;
} conv_plan;

static int64_t ceil_div(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }
static int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

/* ---- prepare ------------------------------------------------------------------------------- */

static int32_t ints_attr(opc_call *c, const char *name, int64_t want_len, int64_t min, int64_t max,
                         const int64_t **v, int64_t *n) {
    int32_t s = opc_attr_ints(c, name, v, n);
    if (s || *n < 0) return s;
    if (*n != want_len)
        return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "attribute '%s' must have %lld entries (one per %s), got %lld",
                        name, (long long)want_len, strcmp(name, "pads") == 0 ? "spatial begin and end" : "spatial dim",
                        (long long)*n);
    for (int64_t i = 0; i < *n; i++)
        if ((*v)[i] < min || (*v)[i] > max)
            return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "attribute '%s'[%lld] = %lld is out of range [%lld, %lld]",
                            name, (long long)i, (long long)(*v)[i], (long long)min, (long long)max);
    return OPC_OK;
}

int32_t opc_prep_conv(opc_call *c, void *plan_v, opc_shape *outs) {
    conv_plan *q = plan_v;
    int32_t s;
    char b1[200], b2[200];
    for (int32_t i = 0; i < 3; i++)
        if ((s = opc_require(c, i))) return s;
    const opc_tensor *dy = c->in[0], *x = c->in[1], *w = c->in[2];
    const int32_t idx[] = {1, 0, 2};
    if ((s = opc_check_supported_dtype(c, x->dtype)) || (s = opc_check_dtypes(c, x->dtype, idx, 3))) return s;
    if (x->rank < 3)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "X must have rank >= 3 ([N, C, spatial...]), got shape %s",
                        opc_shape_str(x, b1, sizeof b1));
    if (w->rank != x->rank)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "W rank %d differs from X rank %d (W is [M, C/group, kernel...])",
                        (int)w->rank, (int)x->rank);
    if (dy->rank != x->rank)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "dY rank %d differs from X rank %d", (int)dy->rank, (int)x->rank);
    int32_t nd = x->rank - 2;
    q->dtype = x->dtype;
    q->nd = nd;
    q->N = x->shape[0];
    q->C = x->shape[1];
    q->M = w->shape[0];
    if ((s = opc_attr_int(c, "group", 1, &q->G))) return s;
    if (q->G < 1) return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "group must be >= 1, got %lld", (long long)q->G);
    if (q->C % q->G)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "input channels C=%lld are not divisible by group=%lld",
                        (long long)q->C, (long long)q->G);
    if (q->M % q->G)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "output channels M=%lld (W.shape[0]) are not divisible by group=%lld",
                        (long long)q->M, (long long)q->G);
    q->Cg = q->C / q->G;
    q->Mg = q->M / q->G;
    if (w->shape[1] != q->Cg)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "W.shape[1]=%lld must equal C/group=%lld (W %s, X %s)",
                        (long long)w->shape[1], (long long)q->Cg, opc_shape_str(w, b1, sizeof b1),
                        opc_shape_str(x, b2, sizeof b2));
    const int64_t BIG = (int64_t)1 << 31;
    const int64_t *ks, *st, *dl, *pd;
    int64_t nks, nst, ndl, npd;
    if ((s = ints_attr(c, "kernel_shape", nd, 1, BIG, &ks, &nks))) return s;
    if ((s = ints_attr(c, "strides", nd, 1, BIG, &st, &nst))) return s;
    if ((s = ints_attr(c, "dilations", nd, 1, BIG, &dl, &ndl))) return s;
    if ((s = ints_attr(c, "pads", 2 * (int64_t)nd, 0, BIG, &pd, &npd))) return s;
    const char *ap;
    if ((s = opc_attr_string(c, "auto_pad", "NOTSET", &ap))) return s;
    int mode; /* 0 NOTSET, 1 VALID, 2 SAME_UPPER, 3 SAME_LOWER */
    if (strcmp(ap, "NOTSET") == 0 || ap[0] == 0) mode = 0;
    else if (strcmp(ap, "VALID") == 0) mode = 1;
    else if (strcmp(ap, "SAME_UPPER") == 0) mode = 2;
    else if (strcmp(ap, "SAME_LOWER") == 0) mode = 3;
    else
        return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE,
                        "auto_pad '%s' is not one of NOTSET, VALID, SAME_UPPER, SAME_LOWER", ap);
    if (mode != 0 && npd > 0)
        for (int64_t i = 0; i < npd; i++)
            if (pd[i] != 0)
                return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE,
                                "explicit non-zero pads cannot be combined with auto_pad=%s", ap);
    q->in_sz = 1;
    q->ksz = 1;
    q->P = 1;
    int64_t out_shape[OPC_MAX_RANK];
    out_shape[0] = q->N;
    out_shape[1] = q->M;
    for (int32_t j = 0; j < nd; j++) {
        int64_t in = x->shape[2 + j], k = w->shape[2 + j];
        if (k < 1)
            return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "W spatial dim %d is %lld; kernel dims must be >= 1",
                            (int)j, (long long)k);
        if (nks >= 0 && ks[j] != k)
            return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "kernel_shape %s differs from W's spatial dims (W %s)",
                            opc_dims_str(ks, nd, b1, sizeof b1), opc_shape_str(w, b2, sizeof b2));
        if (k > BIG)
            return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "kernel dim %lld is too large", (long long)k);
        int64_t sj = nst >= 0 ? st[j] : 1, dj = ndl >= 0 ? dl[j] : 1;
        int64_t eff = (k - 1) * dj + 1; /* both <= 2^31: no overflow */
        int64_t pb = 0, pe = 0, out;
        if (mode == 0 || mode == 1) {
            if (mode == 0 && npd >= 0) {
                pb = pd[j];
                pe = pd[nd + j];
            }
            int64_t padded = in + pb + pe;
            if (padded < eff)
                return opc_fail(c, OPC_ERR_INVALID_ARGUMENT,
                                "spatial dim %d: dilated kernel extent %lld exceeds the padded input size %lld",
                                (int)j, (long long)eff, (long long)padded);
            out = (padded - eff) / sj + 1;
        } else {
            out = ceil_div(in, sj);
            int64_t total = (out - 1) * sj + eff - in;
            if (out == 0 || total < 0) total = 0;
            pb = mode == 2 ? total / 2 : total - total / 2;
        }
        q->in[j] = in;
        q->k[j] = k;
        q->out[j] = out;
        q->s[j] = sj;
        q->d[j] = dj;
        q->pb[j] = pb;
        out_shape[2 + j] = out;
        if (!opc_mul_ok(q->in_sz, in, &q->in_sz) || !opc_mul_ok(q->ksz, k, &q->ksz) ||
            !opc_mul_ok(q->P, out, &q->P) || q->ksz > OPC_MAX_ELEMS || q->P > OPC_MAX_ELEMS)
            return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "sizes overflow");
    }
    bool dy_ok = dy->shape[0] == q->N && dy->shape[1] == q->M;
    for (int32_t j = 0; j < nd; j++) dy_ok = dy_ok && dy->shape[2 + j] == q->out[j];
    if (!dy_ok)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "dY shape %s differs from the conv output shape %s",
                        opc_shape_str(dy, b1, sizeof b1), opc_dims_str(out_shape, x->rank, b2, sizeof b2));
    if (!opc_mul_ok(q->Cg, q->ksz, &q->Kf) || !opc_blas_dims_ok(q->Kf, q->Mg, q->P) ||
        !opc_blas_dims_ok(q->in_sz, q->M, q->C))
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "sizes exceed the BLAS's 32-bit dimensions");
    q->pointwise = true;
    for (int32_t j = 0; j < nd; j++)
        q->pointwise = q->pointwise && q->k[j] == 1 && q->s[j] == 1 && q->pb[j] == 0 && q->out[j] == q->in[j];
    /* chunk of output positions: about COL_BYTES of column buffer; shapes only, never threads */
    int64_t es = q->dtype == OPC_FLOAT16 ? 4 : (int64_t)opc_dtype_size(q->dtype); /* computed in */
    int64_t pc = q->Kf > 0 ? COL_BYTES / (q->Kf * es) : q->P;
    pc = pc < 32 ? 32 : (pc / 8) * 8;
    if (q->pointwise || pc >= q->P) pc = q->P;
    q->PC = pc;
    opc_shape_from(&outs[0], x);
    opc_shape_from(&outs[1], w);
    outs[2].dtype = x->dtype;
    outs[2].rank = 1;
    outs[2].shape[0] = q->M;
    return OPC_OK;
}

/* ---- im2col / col2im over a chunk of output positions [p0, p1) ------------------------------ */
/* Both walk the chunk as lines along the last output dim; for each kernel offset the valid output
 * range of a line is computed once for all channels, so the inner loops are plain (strided) copies
 * / adds. */

#define DEF_COL(T, SFX)                                                                            \
    static void im2col_##SFX(const conv_plan *q, const T *x, T *col, int64_t c0, int64_t c1,      \
                             int64_t p0, int64_t p1) {                                             \
        int nd = q->nd;                                                                            \
        int64_t ld = p1 - p0, o[MAXSP], kk[MAXSP], rem = p0;                                       \
        for (int j = nd - 1; j >= 0; j--) { o[j] = rem % q->out[j]; rem /= q->out[j]; }           \
        int64_t IW = q->in[nd - 1], S = q->s[nd - 1];                                              \
        for (int64_t p = p0; p < p1;) {                                                            \
            int64_t ox0 = o[nd - 1], len = q->out[nd - 1] - ox0;                                   \
            if (len > p1 - p) len = p1 - p;                                                        \
            for (int64_t kidx = 0; kidx < q->ksz; kidx++) {                                        \
                if (kidx == 0) for (int j = 0; j < nd; j++) kk[j] = 0;                             \
                else for (int j = nd - 1; j >= 0 && ++kk[j] == q->k[j]; j--) kk[j] = 0;            \
                int64_t off = 0;                                                                   \
                bool ok = true;                                                                    \
                for (int j = 0; j < nd - 1; j++) {                                                 \
                    int64_t i = o[j] * q->s[j] - q->pb[j] + kk[j] * q->d[j];                       \
                    ok = ok && i >= 0 && i < q->in[j];                                             \
                    off = off * q->in[j] + i;                                                      \
                }                                                                                  \
                int64_t base = kk[nd - 1] * q->d[nd - 1] - q->pb[nd - 1];                         \
                int64_t lo = ceil_div(-base, S), hi = floor_div(IW - 1 - base, S) + 1;             \
                lo = lo < ox0 ? ox0 : lo;                                                          \
                hi = hi > ox0 + len ? ox0 + len : hi;                                              \
                if (!ok || hi < lo) hi = lo = ox0;                                                 \
                for (int64_t c = c0; c < c1; c++) {                                                \
                    T *dst = col + ((c - c0) * q->ksz + kidx) * ld + (p - p0);                     \
                    for (int64_t t = ox0; t < lo; t++) dst[t - ox0] = 0;                           \
                    if (hi > lo) {                                                                 \
                        const T *src = x + c * q->in_sz + off * IW + base;                         \
                        if (S == 1)                                                                \
                            for (int64_t t = lo; t < hi; t++) dst[t - ox0] = src[t];               \
                        else                                                                       \
                            for (int64_t t = lo; t < hi; t++) dst[t - ox0] = src[t * S];           \
                    }                                                                              \
                    for (int64_t t = hi; t < ox0 + len; t++) dst[t - ox0] = 0;                     \
                }                                                                                  \
            }                                                                                      \
            p += len;                                                                              \
            o[nd - 1] += len;                                                                      \
            for (int j = nd - 1; j > 0 && o[j] == q->out[j]; j--) { o[j] = 0; o[j - 1]++; }       \
        }                                                                                          \
    }                                                                                              \
    static void col2im_##SFX(const conv_plan *q, const T *col, T *dx, int64_t c0, int64_t c1,     \
                             int64_t p0, int64_t p1) {                                             \
        int nd = q->nd;                                                                            \
        int64_t ld = p1 - p0, o[MAXSP], kk[MAXSP], rem = p0;                                       \
        for (int j = nd - 1; j >= 0; j--) { o[j] = rem % q->out[j]; rem /= q->out[j]; }           \
        int64_t IW = q->in[nd - 1], S = q->s[nd - 1];                                              \
        for (int64_t p = p0; p < p1;) {                                                            \
            int64_t ox0 = o[nd - 1], len = q->out[nd - 1] - ox0;                                   \
            if (len > p1 - p) len = p1 - p;                                                        \
            for (int64_t kidx = 0; kidx < q->ksz; kidx++) {                                        \
                if (kidx == 0) for (int j = 0; j < nd; j++) kk[j] = 0;                             \
                else for (int j = nd - 1; j >= 0 && ++kk[j] == q->k[j]; j--) kk[j] = 0;            \
                int64_t off = 0;                                                                   \
                bool ok = true;                                                                    \
                for (int j = 0; j < nd - 1; j++) {                                                 \
                    int64_t i = o[j] * q->s[j] - q->pb[j] + kk[j] * q->d[j];                       \
                    ok = ok && i >= 0 && i < q->in[j];                                             \
                    off = off * q->in[j] + i;                                                      \
                }                                                                                  \
                if (!ok) continue;                                                                 \
                int64_t base = kk[nd - 1] * q->d[nd - 1] - q->pb[nd - 1];                         \
                int64_t lo = ceil_div(-base, S), hi = floor_div(IW - 1 - base, S) + 1;             \
                lo = lo < ox0 ? ox0 : lo;                                                          \
                hi = hi > ox0 + len ? ox0 + len : hi;                                              \
                if (hi <= lo) continue;                                                            \
                for (int64_t c = c0; c < c1; c++) {                                                \
                    const T *srcc = col + ((c - c0) * q->ksz + kidx) * ld + (p - p0);              \
                    T *dst = dx + (c - c0) * q->in_sz + off * IW + base;                           \
                    if (S == 1)                                                                    \
                        for (int64_t t = lo; t < hi; t++) dst[t] += srcc[t - ox0];                 \
                    else                                                                           \
                        for (int64_t t = lo; t < hi; t++) dst[t * S] += srcc[t - ox0];             \
                }                                                                                  \
            }                                                                                      \
            p += len;                                                                              \
            o[nd - 1] += len;                                                                      \
            for (int j = nd - 1; j > 0 && o[j] == q->out[j]; j--) { o[j] = 0; o[j - 1]++; }       \
        }                                                                                          \
    }

DEF_COL(float, f32)
DEF_COL(double, f64)

static void im2col(const conv_plan *q, const void *x, void *col, int64_t c0, int64_t c1, int64_t p0, int64_t p1) {
    if (q->dtype == OPC_FLOAT) im2col_f32(q, x, col, c0, c1, p0, p1);
    else im2col_f64(q, x, col, c0, c1, p0, p1);
}
static void col2im(const conv_plan *q, const void *col, void *dx, int64_t c0, int64_t c1, int64_t p0, int64_t p1) {
    if (q->dtype == OPC_FLOAT) col2im_f32(q, col, dx, c0, c1, p0, p1);
    else col2im_f64(q, col, dx, c0, c1, p0, p1);
}

/* ---- passes -------------------------------------------------------------------------------- */

typedef struct {
    const conv_plan *q;
    const char *dy, *x, *w;
    char *dx, *dw;
    int64_t es;
    int64_t nchunks, cb, ncb; /* chunks of P; channel blocks of size cb for dX */
    char **buf;               /* per-thread column buffers of Kf * PC elements */
    char *slots;              /* dW slot accumulators */
    int64_t nslots, w_items;
    int gemm_threads;         /* 1 inside parallel regions; the call's threads when items run serially */
    bool whole;               /* the pass has >= WHOLE_ITEMS items: each GEMM is one BLAS call */
    bool pk;                  /* dW^T by opc_sgemm_packed (see CONV_PACKED): the slots hold [G][Kf, Mg] */
    int64_t col_bytes;        /* a thread buffer's column part; the packed dY chunk follows it */
    bool tdx;                 /* dX as the transposed conv (stride 1): plan qt, weights wt, nchunks_t */
    conv_plan qt;
    char *wt;
    int64_t nchunks_t;
} conv_ctx;

/* A pass with many items runs them in parallel, each GEMM one BLAS call; a pass with few runs
 * them one after another, each GEMM in opc_gemm_par's fixed blocks over the threads. Which of the
 * two is decided by the shapes alone, so every GEMM has the same BLAS calls for any thread count. */
#define WHOLE_ITEMS 8
static void conv_gemm(const conv_ctx *x, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void *A,
                      int64_t lda, const void *B, int64_t ldb, double beta, void *C, int64_t ldc) {
    if (x->whole) opc_gemm(x->q->dtype, ta, tb, M, N, K, 1.0, A, lda, B, ldb, beta, C, ldc);
    else opc_gemm_par(x->q->dtype, ta, tb, M, N, K, 1.0, A, lda, B, ldb, beta, C, ldc, x->gemm_threads);
}

/* dX item of the transposed-conv path (n, g, chunk of input positions):
 *   dX[n,g][:, chunk] = Wt[g] . col(dY[n,g])[:, chunk]
 * with Wt[g] = W[g] with channels and filter taps swapped ([Cg, Mg * ksz], taps reversed) and col
 * the im2col of dY for a stride-1 conv with pads (k - 1) * d - pads_begin. Output-stationary: each
 * dX element is one GEMM dot product of length Mg * ksz, written once. */
static void dx_item_t(const conv_ctx *x, int64_t item, char *buf) {
    const conv_plan *q = x->q, *t = &x->qt;
    int64_t ch = item % x->nchunks_t, ng = item / x->nchunks_t, g = ng % q->G, n = ng / q->G;
    int64_t es = x->es;
    int64_t p0 = ch * t->PC, p1 = p0 + t->PC < t->P ? p0 + t->PC : t->P;
    const char *dyg = x->dy + ((n * q->M + g * q->Mg) * q->P) * es;
    im2col(t, dyg, buf, 0, q->Mg, p0, p1);
    conv_gemm(x, false, false, q->Cg, p1 - p0, t->Kf, x->wt + g * q->Cg * t->Kf * es, t->Kf, buf, p1 - p0, 0.0,
              x->dx + ((n * q->C + g * q->Cg) * q->in_sz + p0) * es, q->in_sz);
}

/* The transposed-conv path pays an im2col of dY (Mg * ksz rows over the input positions) instead of
 * a col2im (Cg * ksz rows over the output positions) and gets GEMMs with K = Mg * ksz instead of
 * Mg: taken for stride 1 when K = Mg is too short for an efficient GEMM (below 128) and its column
 * traffic is at most twice the other's. Shapes only. */
static bool use_transposed_dx(const conv_plan *q) {
    if (q->pointwise || q->Mg >= 128) return false;
    for (int j = 0; j < q->nd; j++)
        if (q->s[j] != 1) return false;
    return q->Mg * q->in_sz <= 2 * q->Cg * q->P;
}

static void make_transposed(conv_ctx *x) {
    const conv_plan *q = x->q;
    conv_plan *t = &x->qt;
    *t = *q;
    t->in_sz = q->P;
    t->P = q->in_sz;
    for (int j = 0; j < q->nd; j++) {
        t->in[j] = q->out[j];
        t->out[j] = q->in[j];
        t->s[j] = 1;
        t->pb[j] = (q->k[j] - 1) * q->d[j] - q->pb[j];
    }
    t->Kf = q->Mg * q->ksz;
    int64_t pc = COL_BYTES / (t->Kf * x->es);
    pc = pc < 32 ? 32 : (pc / 8) * 8;
    t->PC = pc >= t->P ? t->P : pc;
    x->nchunks_t = (t->P + t->PC - 1) / t->PC;
}

/* wt[g][c][m * ksz + k] = W[g * Mg + m][c][ksz - 1 - k] */
static void transpose_weights(const conv_plan *q, const char *w, char *wt, int64_t es) {
    int64_t ksz = q->ksz;
    for (int64_t g = 0; g < q->G; g++)
        for (int64_t c = 0; c < q->Cg; c++)
            for (int64_t m = 0; m < q->Mg; m++) {
                const char *src = w + (((g * q->Mg + m) * q->Cg + c) * ksz) * es;
                char *dst = wt + (((g * q->Cg + c) * q->Mg + m) * ksz) * es;
                for (int64_t k = 0; k < ksz; k++) memcpy(dst + k * es, src + (ksz - 1 - k) * es, (size_t)es);
            }
}

/* dX item (n, g, channel block) */
static void dx_item(const conv_ctx *x, int64_t item, char *buf) {
    const conv_plan *q = x->q;
    int64_t cbk = item % x->ncb, ng = item / x->ncb, g = ng % q->G, n = ng / q->G;
    int64_t c0 = cbk * x->cb, c1 = c0 + x->cb < q->Cg ? c0 + x->cb : q->Cg;
    int64_t es = x->es;
    const char *dyg = x->dy + ((n * q->M + g * q->Mg) * q->P) * es;
    const char *wg = x->w + (g * q->Mg * q->Kf + c0 * q->ksz) * es; /* W[g][:, rows c0..c1) */
    char *dxg = x->dx + ((n * q->C + g * q->Cg + c0) * q->in_sz) * es;
    int64_t rows = (c1 - c0) * q->ksz;
    if (q->pointwise) { /* dX[c0:c1, :] = W[g][:, c0:c1]^T . dY[n,g] */
        conv_gemm(x, true, false, rows, q->P, q->Mg, wg, q->Kf, dyg, q->P, 0.0, dxg, q->P);
        return;
    }
    memset(dxg, 0, (size_t)((c1 - c0) * q->in_sz * es));
    for (int64_t ch = 0; ch < x->nchunks; ch++) {
        int64_t p0 = ch * q->PC, p1 = p0 + q->PC < q->P ? p0 + q->PC : q->P;
        conv_gemm(x, true, false, rows, p1 - p0, q->Mg, wg, q->Kf, dyg + p0 * es, q->P, 0.0, buf, p1 - p0);
        col2im(q, buf, dxg, c0, c1, p0, p1);
    }
}

/* dW item (n, g, chunk) accumulated into acc (a full [M, Kf] buffer) */
static void dw_item(const conv_ctx *x, int64_t item, char *acc, char *buf) {
    const conv_plan *q = x->q;
    int64_t ch = item % x->nchunks, ng = item / x->nchunks, g = ng % q->G, n = ng / q->G;
    int64_t es = x->es;
    int64_t p0 = ch * q->PC, p1 = p0 + q->PC < q->P ? p0 + q->PC : q->P;
    const char *dyg = x->dy + ((n * q->M + g * q->Mg) * q->P + p0) * es;
    const char *xg = x->x + ((n * q->C + g * q->Cg) * q->in_sz) * es;
    char *accg = acc + (g * q->Mg * q->Kf) * es;
    if (x->pk) { /* dW^T[g] += col . dY chunk^T: Kf rows against one or two panels of Mg columns */
        float *bp = (float *)(buf + x->col_bytes);
        if (!q->pointwise) im2col(q, xg, buf, 0, q->Cg, p0, p1);
        opc_sgemm_pack(true, p1 - p0, q->Mg, (const float *)dyg, q->P, bp);
        opc_sgemm_packed(q->Kf, q->Mg, p1 - p0, q->pointwise ? (const float *)(xg + p0 * es) : (const float *)buf,
                         q->pointwise ? q->P : p1 - p0, bp, true, (float *)accg, q->Mg);
        return;
    }
    if (q->pointwise) {
        conv_gemm(x, false, true, q->Mg, q->Kf, p1 - p0, dyg, q->P, xg + p0 * es, q->P, 1.0, accg, q->Kf);
        return;
    }
    im2col(q, xg, buf, 0, q->Cg, p0, p1);
    conv_gemm(x, false, true, q->Mg, q->Kf, p1 - p0, dyg, q->P, buf, p1 - p0, 1.0, accg, q->Kf);
}

static void dw_slot(const conv_ctx *x, int64_t slot, char *buf) {
    int64_t lo = slot * x->w_items / x->nslots, hi = (slot + 1) * x->w_items / x->nslots;
    char *acc = x->slots + slot * x->q->M * x->q->Kf * x->es;
    for (int64_t it = lo; it < hi; it++) dw_item(x, it, acc, buf);
}

static void db_pass(const conv_plan *q, const void *dy, void *db, int threads) {
    int64_t M = q->M, N = q->N, P = q->P;
    int64_t want = (N * M * P) / opc_grain(65536) + 1;
    int nt = (int)(want < threads ? want : threads);
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t m = 0; m < M; m++) {
        if (q->dtype == OPC_FLOAT) {
            float acc[16] = {0};
            for (int64_t n = 0; n < N; n++) {
                const float *r = (const float *)dy + (n * M + m) * P;
                int64_t i = 0;
                for (; i + 16 <= P; i += 16)
                    for (int k = 0; k < 16; k++) acc[k] += r[i + k];
                for (; i < P; i++) acc[i & 15] += r[i];
            }
            float s = 0;
            for (int k = 0; k < 16; k++) s += acc[k];
            ((float *)db)[m] = s;
        } else {
            double acc[16] = {0};
            for (int64_t n = 0; n < N; n++) {
                const double *r = (const double *)dy + (n * M + m) * P;
                int64_t i = 0;
                for (; i + 16 <= P; i += 16)
                    for (int k = 0; k < 16; k++) acc[k] += r[i + k];
                for (; i < P; i++) acc[i & 15] += r[i];
            }
            double s = 0;
            for (int k = 0; k < 16; k++) s += acc[k];
            ((double *)db)[m] = s;
        }
    }
}

/* ---- depthwise path (group = C: Cg = 1, Mg = channel multiplier; 1-D and 2-D) ---------------- *
 * No im2col, no GEMM; 16-lane vectors (GCC vector extensions) along the last spatial axis.
 *   dX item (n, c) (dw_dx1): output-stationary. dY[n, m] is copied into a zero-framed buffer; each
 *       dX position sums W[m, kh, kw] * dY[n, m, oh, ow] over the taps that reach it, 16 positions
 *       of a row at a time, four such tasks in flight (independent accumulators). Strides by
 *       phases: the positions with (ih + ph) % sh = a, iw % sw = b share one tap list (no
 *       multiplies by the zeros a strided transposed conv would insert); with sw > 1 the row
 *       phases are written contiguously and interleaved at the end. Strides with sh * sw > 64 use
 *       dw_dx, a scatter of each dY row into dX rows per tap.
 *   dW item (m) (dw_dw1): per image a zero-framed copy of X[n, c] split into sw column phases, so
 *       that every tap's X values for 16 consecutive output columns are 16 consecutive elements;
 *       one 16-lane accumulator per tap, the lanes past a row's end masked to zero (a dY tail
 *       never meets an X value, so inf / NaN in X stay where the math puts them); float32 lanes
 *       are flushed into float64 lanes after every image and the 16 lanes summed in order.
 *   dB as the other paths (db_pass).
 * Every item is computed by one thread in a fixed order: bitwise identical for any thread count.
 * dX is computed in the input's type, a sum of Mg * (taps reaching the position) products. The
 * zero frames multiply W by zeros (an inf / NaN in W spreads to dX positions its tap does not
 * reach, as on the im2col / transposed path). 3-D convolutions keep the im2col path.
 * OPCONFORM_CONV_DEPTHWISE=0 turns the path off (a comparison for tests and benches). */
typedef struct {
    int64_t IH, IW, OH, OW, KH, KW, SH, SW, DH, DW, PH, PW;
} dw_geom;

static dw_geom dw_geometry(const conv_plan *q) {
    dw_geom g;
    int l = q->nd - 1;
    g.IW = q->in[l]; g.OW = q->out[l]; g.KW = q->k[l]; g.SW = q->s[l]; g.DW = q->d[l]; g.PW = q->pb[l];
    if (q->nd == 2) {
        g.IH = q->in[0]; g.OH = q->out[0]; g.KH = q->k[0]; g.SH = q->s[0]; g.DH = q->d[0]; g.PH = q->pb[0];
    } else {
        g.IH = g.OH = g.KH = g.SH = g.DH = 1;
        g.PH = 0;
    }
    return g;
}

/* valid output columns [lo, hi) of tap column offset base = kw*dw - pw */
static inline void dw_cols(const dw_geom *g, int64_t base, int64_t *lo, int64_t *hi) {
    int64_t l = ceil_div(-base, g->SW), h = floor_div(g->IW - 1 - base, g->SW) + 1;
    *lo = l < 0 ? 0 : l;
    *hi = h > g->OW ? g->OW : h;
    if (*hi < *lo) *hi = *lo;
}

/* per kernel column kw: valid output columns [lo, hi) and where output column o's input sits in the
 * (row-phase, when sw > 1) row: xo + o; off[b]: start of column phase b in a row (sw > 1) */
#define DW_MAX_PHASES 64 /* strides with SH * SW above this take dw_dx's scatter for dX */
typedef struct {
    dw_geom g;
    int64_t *lo, *hi, *xo, *off;
    int64_t wd, rowsd, tr, tc; /* dw_dx1's zero-framed dY copy: pitch, rows, dY's row and column offsets */
    int64_t *tapcnt, *tapk, *tapoff; /* dw_dx1's tap lists per phase (a, b): count, tap index, offset */
    int64_t wdx, rowsx; /* pitch and rows of one column phase of dw_dw1's zero-framed X copy */
    int64_t *toff, *toffx; /* per tap (kh, kw): offset in dw_dx1's dY copy, in dw_dw1's X copy */
} dw_tabs;

static int32_t dw_tables(const conv_plan *q, dw_tabs *t) {
    t->g = dw_geometry(q);
    const dw_geom *g = &t->g;
    int64_t ksz = g->KH * g->KW;
    int64_t nph = g->SH * g->SW <= DW_MAX_PHASES ? g->SH * g->SW : 0;
    int64_t *mem = malloc((size_t)(3 * g->KW + g->SW + 1 + 2 * ksz + nph * (1 + 2 * ksz)) * sizeof(int64_t));
    if (!mem) return OPC_ERR_OUT_OF_MEMORY;
    t->lo = mem;
    t->hi = mem + g->KW;
    t->xo = mem + 2 * g->KW;
    t->off = mem + 3 * g->KW;
    t->toff = t->off + g->SW + 1;
    t->toffx = t->toff + ksz;
    t->tapcnt = t->toffx + ksz;
    t->tapk = t->tapcnt + nph;
    t->tapoff = t->tapk + nph * ksz;
    t->tr = ceil_div((g->KH - 1) * g->DH - g->PH, g->SH);
    t->tr = t->tr < 0 ? 0 : t->tr;
    t->tc = ceil_div((g->KW - 1) * g->DW - g->PW, g->SW);
    t->tc = t->tc < 0 ? 0 : t->tc;
    t->rowsd = (g->IH - 1 + g->PH) / g->SH + 1 + t->tr;
    t->wd = ((g->IW + g->SW - 1) / g->SW + 15) / 16 * 16 + (g->SW - 1 + g->PW) / g->SW + t->tc;
    for (int64_t ph = 0; ph < nph; ph++) {
        int64_t a = ph / g->SW, b = ph % g->SW, cnt = 0;
        for (int64_t kh = 0; kh < g->KH; kh++)
            for (int64_t kw = 0; kw < g->KW; kw++) {
                int64_t rr = a - kh * g->DH, cc = b + g->PW - kw * g->DW;
                if (rr - floor_div(rr, g->SH) * g->SH || cc - floor_div(cc, g->SW) * g->SW) continue;
                t->tapk[ph * ksz + cnt] = kh * g->KW + kw;
                t->tapoff[ph * ksz + cnt] = floor_div(rr, g->SH) * t->wd + floor_div(cc, g->SW);
                cnt++;
            }
        t->tapcnt[ph] = cnt;
    }
    t->wdx = (g->OW + 15) / 16 * 16 + (g->KW - 1) * g->DW / g->SW;
    t->rowsx = (g->OH - 1) * g->SH + (g->KH - 1) * g->DH + 1;
    for (int64_t kh = 0; kh < g->KH; kh++)
        for (int64_t kw = 0; kw < g->KW; kw++) {
            t->toffx[kh * g->KW + kw] = ((kw * g->DW % g->SW) * t->rowsx + kh * g->DH) * t->wdx + kw * g->DW / g->SW;
        }
    int64_t o = 0;
    for (int64_t b = 0; b < g->SW; b++) {
        t->off[b] = o;
        o += b < g->IW ? (g->IW - b + g->SW - 1) / g->SW : 0;
    }
    for (int64_t kw = 0; kw < g->KW; kw++) {
        int64_t base = kw * g->DW - g->PW;
        dw_cols(g, base, &t->lo[kw], &t->hi[kw]);
        if (g->SW == 1) t->xo[kw] = base;
        else {
            int64_t j0 = floor_div(base, g->SW), b = base - j0 * g->SW;
            t->xo[kw] = t->off[b] + j0;
        }
    }
    return OPC_OK;
}

#define DEF_DW(T, A, SFX)                                                                          \
    static void dw_merge_##SFX(const dw_geom *g, const int64_t *off, const T *ph, T *dst) {        \
        for (int64_t r = 0; r < g->IH; r++)                                                        \
            for (int64_t b = 0; b < g->SW; b++) {                                                  \
                const T *s = ph + r * g->IW + off[b];                                              \
                T *d = dst + r * g->IW + b;                                                        \
                for (int64_t j = 0; b + j * g->SW < g->IW; j++) d[j * g->SW] = s[j];               \
            }                                                                                      \
    }                                                                                              \
    /* sh * sw > 64: scatter; scratch: IH * IW elements (row phases, sw > 1) */                    \
    static void dw_dx_##SFX(const conv_plan *q, const dw_tabs *tb, const T *dy, const T *w, T *dx, \
                            int64_t n, int64_t c, T *scratch) {                                    \
        const dw_geom *g = &tb->g;                                                                 \
        int64_t isz = g->IH * g->IW, osz = g->OH * g->OW, ksz = g->KH * g->KW;                     \
        T *dxc = dx + (n * q->C + c) * isz;                                                        \
        T *acc = g->SW > 1 ? scratch : dxc;                                                        \
        memset(acc, 0, (size_t)isz * sizeof(T));                                                   \
        for (int64_t m = c * q->Mg; m < (c + 1) * q->Mg; m++) {                                    \
            const T *dyc = dy + (n * q->M + m) * osz, *wm = w + m * ksz;                           \
            for (int64_t oh = 0; oh < g->OH; oh++) {                                               \
                const T *restrict dyr = dyc + oh * g->OW;                                          \
                for (int64_t kh = 0; kh < g->KH; kh++) {                                           \
                    int64_t ih = oh * g->SH - g->PH + kh * g->DH;                                  \
                    if (ih < 0 || ih >= g->IH) continue;                                           \
                    T *dxr = acc + ih * g->IW;                                                     \
                    for (int64_t kw = 0; kw < g->KW; kw++) {                                       \
                        int64_t lo = tb->lo[kw], hi = tb->hi[kw];                                  \
                        const T wv = wm[kh * g->KW + kw];                                          \
                        T *restrict d = dxr + tb->xo[kw];                                          \
                        for (int64_t o = lo; o < hi; o++) d[o] += wv * dyr[o];                     \
                    }                                                                              \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        if (g->SW > 1) dw_merge_##SFX(g, tb->off, acc, dxc);                                       \
    }

DEF_DW(float, double, f32)
DEF_DW(double, double, f64)

static bool use_depthwise(const conv_plan *q) {
    if (q->Cg != 1 || q->nd > 2) return false;
    const char *e = getenv("OPCONFORM_CONV_DEPTHWISE");
    return !(e && e[0] == '0');
}

/* native vector width of the build (the 16-lane blocks are DW_VB-byte vectors, 16 / lanes of them) */
#if defined(__AVX512F__)
#define DW_VB 64
#elif defined(__AVX__)
#define DW_VB 32
#else
#define DW_VB 16
#endif
typedef float dw_nf __attribute__((vector_size(DW_VB)));
typedef double dw_nd __attribute__((vector_size(DW_VB)));
typedef int32_t dw_mf __attribute__((vector_size(DW_VB)));
typedef int64_t dw_md __attribute__((vector_size(DW_VB)));
/* stores a task's 16 sums (a[NV]) at o: len of them, assigned (first m) or added */
#define DW_STORE(T, VN, NV, L, o, a, len, first)                                                   \
    do {                                                                                           \
        if ((len) == 16) {                                                                         \
            for (int v_ = 0; v_ < (NV); v_++) {                                                    \
                VN s_ = (a)[v_];                                                                   \
                if (!(first)) {                                                                    \
                    VN o_;                                                                         \
                    memcpy(&o_, (o) + v_ * (L), sizeof o_);                                        \
                    s_ = o_ + s_;                                                                  \
                }                                                                                  \
                memcpy((o) + v_ * (L), &s_, sizeof s_);                                            \
            }                                                                                      \
        } else {                                                                                   \
            T t_[16];                                                                              \
            memcpy(t_, (a), sizeof t_);                                                            \
            for (int64_t k_ = 0; k_ < (len); k_++) (o)[k_] = (first) ? t_[k_] : (o)[k_] + t_[k_];  \
        }                                                                                          \
    } while (0)
#define DEF_DWG(T, VN, MN, SFX)                                                                    \
/* dX item (n, c), output-stationary over a zero-framed copy of dY[n, m] (dyp: tb->rowsd rows,                 \
 * pitch tb->wd, dY[oh, ow] at row oh + TR, column ow + TC). Strides by phases: the dX positions               \
 * (ih, iw) with (ih + PH) % SH = a and iw % SW = b take the taps of list (a, b) (tb->tapk,                    \
 * tb->tapoff), 16 positions j, j+1, .. (iw = j * SW + b) at a time in NV native vectors, four such            \
 * tasks at once; each position's sum over its taps in (kh, kw) order, m in order (the same for any            \
 * vector width). */                                                                                           \
static void dw_dx1_##SFX(const conv_plan *q, const dw_tabs *tb, const T *dy, const T *w, T *dx,                \
                         int64_t n, int64_t c, T *dyp) {                                                       \
    enum { L = DW_VB / sizeof(T), NV = 16 / L };                                                               \
    const dw_geom *g = &tb->g;                                                                                 \
    int64_t isz = g->IH * g->IW, osz = g->OH * g->OW, ksz = g->KH * g->KW, wd = tb->wd;                        \
    int64_t SH = g->SH, SW = g->SW, TR = tb->tr, TC = tb->tc;                                                  \
    T *dxc = dx + (n * q->C + c) * isz;                                                                        \
    T *outp = SW > 1 ? dyp + tb->rowsd * wd : dxc; /* sw > 1: row phases, merged at the end */                 \
    T *wb = dyp + tb->rowsd * wd + (SW > 1 ? isz : 0);                                                         \
    for (int64_t m = c * q->Mg; m < (c + 1) * q->Mg; m++) {                                                    \
        const T *dyc = dy + (n * q->M + m) * osz, *wm = w + m * ksz;                                           \
        for (int64_t k = 0; k < ksz; k++) /* each tap's weight in 16 lanes */                                  \
            for (int j = 0; j < 16; j++) wb[k * 16 + j] = wm[k];                                               \
        for (int64_t r = 0; r < tb->rowsd; r++) {                                                              \
            T *d = dyp + r * wd;                                                                               \
            memset(d, 0, (size_t)wd * sizeof(T));                                                              \
            int64_t oh = r - TR;                                                                               \
            if (oh < 0 || oh >= g->OH) continue;                                                               \
            int64_t c1 = g->OW < wd - TC ? g->OW : wd - TC;                                                    \
            if (c1 > 0) memcpy(d + TC, dyc + oh * g->OW, (size_t)c1 * sizeof(T));                              \
        }                                                                                                      \
        bool first = m == c * q->Mg;                                                                           \
        for (int64_t a = 0; a < SH; a++) {                                                                     \
            int64_t ih0 = ((a - g->PH) % SH + SH) % SH;                                                        \
            if (ih0 >= g->IH) continue;                                                                        \
            int64_t nih = (g->IH - 1 - ih0) / SH + 1;                                                          \
            for (int64_t b = 0; b < SW && b < g->IW; b++) {                                                    \
                int64_t ph = a * SW + b, cnt = tb->tapcnt[ph];                                                 \
                const int64_t *tk = tb->tapk + ph * ksz, *to = tb->tapoff + ph * ksz;                          \
                int64_t nj = (g->IW - b + SW - 1) / SW, nch = (nj + 15) / 16, ntask = nih * nch;               \
                int64_t r0 = (ih0 + g->PH - a) / SH + TR, ti = 0, tc = 0; /* task: row, chunk */               \
                int64_t ocol = SW > 1 ? tb->off[b] : 0;                                                        \
                for (int64_t t0 = 0; t0 < ntask; t0 += 4) {                                                    \
                    int nt = ntask - t0 < 4 ? (int)(ntask - t0) : 4;                                           \
                    const T *bp[4];                                                                            \
                    T *o[4];                                                                                   \
                    int64_t len[4];                                                                            \
                    for (int j = 0; j < 4; j++) {                                                              \
                        int64_t j0 = tc * 16;                                                                  \
                        bp[j] = dyp + (r0 + ti) * wd + j0 + TC;                                                \
                        o[j] = outp + (ih0 + ti * SH) * g->IW + ocol + j0;                                     \
                        len[j] = nj - j0 < 16 ? nj - j0 : 16;                                                  \
                        if (j + 1 < nt && ++tc == nch) {                                                       \
                            tc = 0;                                                                            \
                            ti++;                                                                              \
                        }                                                                                      \
                    }                                                                                          \
                    if (++tc == nch) {                                                                         \
                        tc = 0;                                                                                \
                        ti++;                                                                                  \
                    }                                                                                          \
                    VN a0[NV], a1[NV], a2[NV], a3[NV], s, wv;                                                  \
                    for (int v = 0; v < NV; v++) a0[v] = a1[v] = a2[v] = a3[v] = (VN){0};                      \
                    if (nt == 4) {                                                                             \
                        for (int64_t k = 0; k < cnt; k++) {                                                    \
                            int64_t f = to[k];                                                                 \
                            for (int v = 0; v < NV; v++) {                                                     \
                                memcpy(&wv, wb + tk[k] * 16 + v * L, sizeof wv);                               \
                                memcpy(&s, bp[0] + f + v * L, sizeof s); a0[v] += wv * s;                      \
                                memcpy(&s, bp[1] + f + v * L, sizeof s); a1[v] += wv * s;                      \
                                memcpy(&s, bp[2] + f + v * L, sizeof s); a2[v] += wv * s;                      \
                                memcpy(&s, bp[3] + f + v * L, sizeof s); a3[v] += wv * s;                      \
                            }                                                                                  \
                        }                                                                                      \
                    } else {                                                                                   \
                        for (int64_t k = 0; k < cnt; k++) {                                                    \
                            int64_t f = to[k];                                                                 \
                            for (int v = 0; v < NV; v++) {                                                     \
                                memcpy(&wv, wb + tk[k] * 16 + v * L, sizeof wv);                               \
                                memcpy(&s, bp[0] + f + v * L, sizeof s); a0[v] += wv * s;                      \
                                if (nt > 1) { memcpy(&s, bp[1] + f + v * L, sizeof s); a1[v] += wv * s; }      \
                                if (nt > 2) { memcpy(&s, bp[2] + f + v * L, sizeof s); a2[v] += wv * s; }      \
                            }                                                                                  \
                        }                                                                                      \
                    }                                                                                          \
                    DW_STORE(T, VN, NV, L, o[0], a0, len[0], first);                                           \
                    if (nt > 1) DW_STORE(T, VN, NV, L, o[1], a1, len[1], first);                               \
                    if (nt > 2) DW_STORE(T, VN, NV, L, o[2], a2, len[2], first);                               \
                    if (nt > 3) DW_STORE(T, VN, NV, L, o[3], a3, len[3], first);                               \
                }                                                                                              \
            }                                                                                                  \
        }                                                                                                      \
    }                                                                                                          \
    if (SW > 1) dw_merge_##SFX(g, tb->off, outp, dxc);                                                         \
}                                                                                                              \
/* dW item (m): per image a zero-framed copy of X[n, c] split into sw column phases (xp: plane b,              \
 * row r, column j holds padded X[r, j * sw + b]; tb->rowsx rows, pitch tb->wdx); per output row 16            \
 * columns of dY at a time against each tap's X, 16 lanes per tap (in NV native vectors; the lanes             \
 * past a row's end masked to 0); float32 lanes flushed into float64 lanes after each image, the               \
 * 16 lanes summed in order. */                                                                                \
static void dw_dw1_##SFX(const conv_plan *q, const dw_tabs *tb, const T *dy, const T *x, T *dw,                \
                         int64_t m, VN *acc, double *dacc, T *xp) {                                            \
    enum { L = DW_VB / sizeof(T), NV = 16 / L };                                                               \
    const dw_geom *g = &tb->g;                                                                                 \
    int64_t isz = g->IH * g->IW, osz = g->OH * g->OW, ksz = g->KH * g->KW, wd = tb->wdx;                       \
    int64_t rows = tb->rowsx;                                                                                  \
    int64_t c = m / q->Mg;                                                                                     \
    const int64_t *toff = tb->toffx;                                                                           \
    for (int64_t i = 0; i < ksz * 16; i++) dacc[i] = 0;                                                        \
    for (int64_t n = 0; n < q->N; n++) {                                                                       \
        const T *dyc = dy + (n * q->M + m) * osz, *xc = x + (n * q->C + c) * isz;                              \
        for (int64_t b = 0; b < g->SW; b++)                                                                    \
            for (int64_t r = 0; r < rows; r++) {                                                               \
                T *d = xp + (b * rows + r) * wd;                                                               \
                memset(d, 0, (size_t)wd * sizeof(T));                                                          \
                int64_t ih = r - g->PH;                                                                        \
                if (ih < 0 || ih >= g->IH) continue;                                                           \
                const T *xr = xc + ih * g->IW;                                                                 \
                /* plane b, column j: padded column j * SW + b, X column j * SW + b - PW */                    \
                int64_t j0 = ceil_div(g->PW - b, g->SW), j1 = ceil_div(g->PW + g->IW - b, g->SW);              \
                if (j0 < 0) j0 = 0;                                                                            \
                if (j1 > wd) j1 = wd;                                                                          \
                if (g->SW == 1) {                                                                              \
                    if (j1 > j0) memcpy(d + j0, xr + j0 - g->PW, (size_t)(j1 - j0) * sizeof(T));               \
                } else                                                                                         \
                    for (int64_t j = j0; j < j1; j++) d[j] = xr[j * g->SW + b - g->PW];                        \
            }                                                                                                  \
        for (int64_t k = 0; k < ksz * NV; k++) acc[k] = (VN){0};                                               \
        for (int64_t oh = 0; oh < g->OH; oh++) {                                                               \
            const T *dyr = dyc + oh * g->OW, *xr = xp + oh * g->SH * wd;                                       \
            for (int64_t i0 = 0; i0 < g->OW; i0 += 16) {                                                       \
                VN dv[NV], s;                                                                                  \
                const T *xs = xr + i0;                                                                         \
                if (i0 + 16 <= g->OW) {                                                                        \
                    memcpy(dv, dyr + i0, sizeof dv);                                                           \
                    for (int64_t k = 0; k < ksz; k++)                                                          \
                        for (int v = 0; v < NV; v++) {                                                         \
                            memcpy(&s, xs + toff[k] + v * L, sizeof s);                                        \
                            acc[k * NV + v] += dv[v] * s;                                                      \
                        }                                                                                      \
                } else {                                                                                       \
                    T tmp[16] = {0};                                                                           \
                    MN mask[NV];                                                                               \
                    memset(mask, 0, sizeof mask);                                                             \
                    for (int v = 0; v < NV; v++)                                                               \
                        for (int j = 0; j < L; j++) mask[v][j] = i0 + v * L + j < g->OW ? -1 : 0;              \
                    memcpy(tmp, dyr + i0, (size_t)(g->OW - i0) * sizeof(T));                                   \
                    memcpy(dv, tmp, sizeof dv);                                                                \
                    for (int64_t k = 0; k < ksz; k++)                                                          \
                        for (int v = 0; v < NV; v++) {                                                         \
                            memcpy(&s, xs + toff[k] + v * L, sizeof s);                                        \
                            VN p = dv[v] * s;                                                                  \
                            MN pm;                                                                             \
                            memcpy(&pm, &p, sizeof pm);                                                        \
                            pm &= mask[v];                                                                     \
                            memcpy(&p, &pm, sizeof p);                                                         \
                            acc[k * NV + v] += p;                                                              \
                        }                                                                                      \
                }                                                                                              \
            }                                                                                                  \
        }                                                                                                      \
        for (int64_t k = 0; k < ksz; k++) {                                                                    \
            T l[16];                                                                                           \
            memcpy(l, &acc[k * NV], sizeof l);                                                                 \
            for (int j = 0; j < 16; j++) dacc[k * 16 + j] += (double)l[j];                                     \
        }                                                                                                      \
    }                                                                                                          \
    for (int64_t k = 0; k < ksz; k++) {                                                                        \
        double s = 0;                                                                                          \
        for (int j = 0; j < 16; j++) s += dacc[k * 16 + j];                                                    \
        dw[m * ksz + k] = (T)s;                                                                                \
    }                                                                                                          \
}

DEF_DWG(float, dw_nf, dw_mf, f32)
DEF_DWG(double, dw_nd, dw_md, f64)


/* dX and/or dW by the depthwise path (sizes checked non-empty by the caller) */
static int32_t dw_exec(opc_call *c, const conv_plan *q, const void *dy, const void *x, const void *w, void *dx,
                       void *dw, int nt) {
    dw_tabs tb;
    if (dw_tables(q, &tb)) return opc_fail(c, OPC_ERR_OUT_OF_MEMORY, "out of memory for the depthwise tables");
    const dw_geom *g = &tb.g;
    int64_t ksz = g->KH * g->KW, work = g->OH * g->OW * ksz; /* multiply-adds per (n, m) */
    int64_t es = (int64_t)opc_dtype_size(q->dtype);
    bool s1 = g->SH * g->SW <= DW_MAX_PHASES; /* dw_dx1, else the scatter of dw_dx */
    size_t scratch = g->SW > 1 ? (size_t)(g->IH * g->IW * es) : 0;
    size_t scratch_dx = s1 ? (size_t)((tb.rowsd * tb.wd + (g->SW > 1 ? g->IH * g->IW : 0) + 16 * ksz) * es) : scratch;
    size_t scratch_dw = (size_t)(g->SW * tb.rowsx * tb.wdx * es);
    int32_t status = OPC_OK;
    if (dx) {
        int64_t items = q->N * q->C;
        int64_t want = (int64_t)((double)items * (double)(q->Mg * work) / (double)opc_grain(16384)) + 1;
        int t = (int)(want < nt ? want : nt);
        if (t > items) t = (int)(items > 0 ? items : 1);
#pragma omp parallel num_threads(t)
        {
            void *sc = scratch_dx ? malloc(scratch_dx) : NULL;
            bool ok = !scratch_dx || sc;
            if (!ok) {
#pragma omp atomic write
                status = OPC_ERR_OUT_OF_MEMORY;
            }
#pragma omp for schedule(static)
            for (int64_t it = 0; it < items; it++) {
                if (!ok) continue;
                if (s1 && q->dtype == OPC_FLOAT) dw_dx1_f32(q, &tb, dy, w, dx, it / q->C, it % q->C, sc);
                else if (s1) dw_dx1_f64(q, &tb, dy, w, dx, it / q->C, it % q->C, sc);
                else if (q->dtype == OPC_FLOAT) dw_dx_f32(q, &tb, dy, w, dx, it / q->C, it % q->C, sc);
                else dw_dx_f64(q, &tb, dy, w, dx, it / q->C, it % q->C, sc);
            }
            free(sc);
        }
    }
    if (dw && !status) {
        int64_t items = q->M;
        int64_t want = (int64_t)((double)items * (double)(q->N * work) / (double)opc_grain(16384)) + 1;
        int t = (int)(want < nt ? want : nt);
        if (t > items) t = (int)(items > 0 ? items : 1);
#pragma omp parallel num_threads(t)
        {
            void *acc = aligned_alloc(64, (size_t)(ksz * 16) * sizeof(double));
            void *dacc = malloc((size_t)(ksz * 16) * sizeof(double));
            void *sc = scratch_dw ? malloc(scratch_dw) : NULL;
            bool ok = acc && dacc && (!scratch_dw || sc);
            if (!ok) {
#pragma omp atomic write
                status = OPC_ERR_OUT_OF_MEMORY;
            }
#pragma omp for schedule(static)
            for (int64_t m = 0; m < items; m++) {
                if (!ok) continue;
                if (q->dtype == OPC_FLOAT) dw_dw1_f32(q, &tb, dy, x, dw, m, acc, dacc, sc);
                else dw_dw1_f64(q, &tb, dy, x, dw, m, acc, dacc, sc);
            }
            free(acc);
            free(dacc);
            free(sc);
        }
    }
    free(tb.lo);
    if (status) return opc_fail(c, status, "out of memory for the depthwise buffers");
    return OPC_OK;
}

static int32_t conv_exec(opc_call *c, const conv_plan *q, const void *dy_in, const void *x_in, const void *w_in,
                         void *dx, void *dw, void *db) {
    conv_ctx x = {0};
    x.q = q;
    x.es = (int64_t)opc_dtype_size(q->dtype);
    x.dy = dy_in;
    x.x = x_in;
    x.w = w_in;
    x.dx = dx;
    x.dw = dw;
    x.gemm_threads = 1;
    int nt = c->threads;
    int64_t wsize = q->M * q->Kf;

    if (db) db_pass(q, x.dy, db, nt);

    bool need_dx = dx && q->N * q->C * q->in_sz > 0;
    bool need_dw = dw && wsize > 0;
    if (dx && !need_dx) { /* nothing to compute (empty dX) */ }
    if (need_dx && (q->P == 0 || q->M == 0)) { /* no contributions: dX = 0 */
        memset(dx, 0, (size_t)(q->N * q->C * q->in_sz * x.es));
        need_dx = false;
    }
    if (need_dw && (q->N == 0 || q->P == 0)) {
        memset(dw, 0, (size_t)(wsize * x.es));
        need_dw = false;
    }
    if (!need_dx && !need_dw) return OPC_OK;
    if (use_depthwise(q)) return dw_exec(c, q, x.dy, x.x, x.w, need_dx ? dx : NULL, need_dw ? dw : NULL, nt);

    x.nchunks = (q->P + q->PC - 1) / q->PC;
    /* dX channel blocks: up to 4 per (n, g) when there are few images, so small batches still
     * spread over threads; fixed by the shapes alone. */
    x.ncb = (q->N * q->G >= 8 || q->pointwise) ? 1 : (q->Cg < 4 ? q->Cg : 4);
    if (x.ncb < 1) x.ncb = 1;
    x.cb = (q->Cg + x.ncb - 1) / x.ncb;
    x.ncb = x.cb > 0 ? (q->Cg + x.cb - 1) / x.cb : 1;
    x.tdx = need_dx && use_transposed_dx(q);
    if (x.tdx) make_transposed(&x);
    int64_t dx_items = need_dx ? q->N * q->G * (x.tdx ? x.nchunks_t : x.ncb) : 0;
    x.w_items = need_dw ? q->N * q->G * x.nchunks : 0;
    x.nslots = x.w_items < MAX_SLOTS ? x.w_items : MAX_SLOTS;
    while (x.nslots > 1 && x.nslots * wsize * x.es > ((int64_t)256 << 20)) x.nslots--;
    const bool dw_whole = x.nslots >= WHOLE_ITEMS; /* each dW GEMM one call (see conv_gemm) */

    int32_t status = OPC_OK;
    char *bufs[256] = {0};
    int nbuf = nt < 256 ? nt : 256;
    if (nt > nbuf) nt = nbuf;
    size_t buf_bytes = q->pointwise ? 0 : (size_t)(q->Kf * q->PC * x.es);
    x.pk = CONV_PACKED && need_dw && q->dtype == OPC_FLOAT && dw_whole;
    x.col_bytes = (int64_t)buf_bytes;
    if (x.pk) buf_bytes += (size_t)opc_sgemm_packed_size(q->PC, q->Mg) * sizeof(float);
    if (x.tdx && (size_t)(x.qt.Kf * x.qt.PC * x.es) > buf_bytes) buf_bytes = (size_t)(x.qt.Kf * x.qt.PC * x.es);
    for (int t = 0; t < nbuf && buf_bytes; t++)
        if (!(bufs[t] = malloc(buf_bytes))) status = OPC_ERR_OUT_OF_MEMORY;
    if (need_dw && !status && !(x.slots = calloc((size_t)x.nslots, (size_t)(wsize * x.es))))
        status = OPC_ERR_OUT_OF_MEMORY;
    if (x.tdx && !status && !(x.wt = malloc((size_t)(q->M * q->Kf * x.es))))
        status = OPC_ERR_OUT_OF_MEMORY;
    if (status) {
        for (int t = 0; t < nbuf; t++) free(bufs[t]);
        free(x.slots);
        free(x.wt);
        return opc_fail(c, status, "out of memory for the column buffers");
    }
    if (x.tdx) transpose_weights(q, x.w, x.wt, x.es);

    int prev_blas = opc_blas_set_threads(1);
    if (need_dx) {
        x.whole = dx_items >= WHOLE_ITEMS;
        if (x.whole || (dx_items >= nt && nt > 1)) {
#pragma omp parallel for schedule(static) num_threads(nt)
            for (int64_t it = 0; it < dx_items; it++) {
                if (x.tdx) dx_item_t(&x, it, bufs[omp_get_thread_num()]);
                else dx_item(&x, it, bufs[omp_get_thread_num()]);
            }
        } else {
            x.gemm_threads = nt;
            for (int64_t it = 0; it < dx_items; it++) {
                if (x.tdx) dx_item_t(&x, it, bufs[0]);
                else dx_item(&x, it, bufs[0]);
            }
            x.gemm_threads = 1;
        }
    }
    if (need_dw) {
        x.whole = dw_whole;
        if (x.whole || (x.nslots >= nt && nt > 1)) {
#pragma omp parallel for schedule(static) num_threads(nt)
            for (int64_t sl = 0; sl < x.nslots; sl++) dw_slot(&x, sl, bufs[omp_get_thread_num()]);
        } else {
            x.gemm_threads = nt;
            for (int64_t sl = 0; sl < x.nslots; sl++) dw_slot(&x, sl, bufs[0]);
            x.gemm_threads = 1;
        }
        /* dW = sum of the slots in slot order */
        int64_t ns = x.nslots;
#pragma omp parallel for schedule(static) num_threads(nt)
        for (int64_t i = 0; i < wsize; i++) {
            if (q->dtype == OPC_FLOAT) {
                const float *sp = (const float *)x.slots;
                int64_t j = i; /* dW[g * Mg + m][kf]'s place in the slots */
                if (x.pk) j = (i / (q->Mg * q->Kf) * q->Kf + i % q->Kf) * q->Mg + i / q->Kf % q->Mg;
                float s = sp[j];
                for (int64_t k = 1; k < ns; k++) s += sp[k * wsize + j];
                ((float *)dw)[i] = s;
            } else {
                const double *sp = (const double *)x.slots;
                double s = sp[i];
                for (int64_t k = 1; k < ns; k++) s += sp[k * wsize + i];
                ((double *)dw)[i] = s;
            }
        }
    }
    opc_blas_set_threads(prev_blas);
    for (int t = 0; t < nbuf; t++) free(bufs[t]);
    free(x.slots);
    free(x.wt);
    return OPC_OK;
}

/* float16: the inputs widened to float32, the float32 kernel, each output rounded once */
static void f16_to_f32(const uint16_t *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = opc_f16_to_f32(src[i]);
}
static void f32_to_f16(const float *src, uint16_t *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = opc_f32_to_f16(src[i]);
}

static int32_t conv_exec_f16(opc_call *c, const conv_plan *q, opc_tensor *outs) {
    conv_plan q32 = *q;
    q32.dtype = OPC_FLOAT;
    int64_t n_in[3], n_out[3] = {q->N * q->C * q->in_sz, q->M * q->Kf, q->M};
    float *in32[3] = {0}, *out32[3] = {0};
    int32_t status = OPC_OK;
    for (int i = 0; i < 3; i++) {
        n_in[i] = opc_numel(c->in[i]);
        if (!(in32[i] = malloc((size_t)(n_in[i] + 1) * sizeof(float)))) status = OPC_ERR_OUT_OF_MEMORY;
        if (outs[i].data && !(out32[i] = malloc((size_t)(n_out[i] + 1) * sizeof(float))))
            status = OPC_ERR_OUT_OF_MEMORY;
    }
    if (status) {
        status = opc_fail(c, status, "out of memory for the float32 copies of float16 tensors");
    } else {
        for (int i = 0; i < 3; i++) f16_to_f32(c->in[i]->data, in32[i], n_in[i]);
        status = conv_exec(c, &q32, in32[0], in32[1], in32[2], out32[0], out32[1], out32[2]);
        for (int i = 0; i < 3 && !status; i++)
            if (out32[i]) f32_to_f16(out32[i], outs[i].data, n_out[i]);
    }
    for (int i = 0; i < 3; i++) {
        free(in32[i]);
        free(out32[i]);
    }
    return status;
}

int32_t opc_exec_conv(opc_call *c, const void *plan_v, opc_tensor *outs) {
    const conv_plan *q = plan_v;
    if (q->dtype == OPC_FLOAT16) return conv_exec_f16(c, q, outs);
    return conv_exec(c, q, c->in[0]->data, c->in[1]->data, c->in[2]->data, outs[0].data, outs[1].data,
                     outs[2].data);
}

/* ---- registry entries (listed in ops.def; held against the specs by tests/openmp/test_descriptors.py) ---- */

/* float16 computed in float32, rounded once */
static const int32_t DT_CONV[] = {OPC_FLOAT, OPC_DOUBLE, OPC_FLOAT16};
static const char *const CONV_IN[] = {"dY", "X", "W"};
static const uint8_t CONV_OPT[] = {0, 0, 0};
static const char *const CONV_OUT[] = {"dX", "dW", "dB"};
static const char *const CONV_ATTR[] = {"auto_pad", "kernel_shape", "pads", "strides", "dilations", "group"};

OPC_DEFINE_OP(ConvGrad) = {
    .desc = {.name = "ConvGrad", OPC_INPUTS(CONV_IN, CONV_OPT), OPC_OUTPUTS(CONV_OUT), OPC_DTYPES(DT_CONV),
             OPC_ATTRS(CONV_ATTR),
             .notes = "N-D conv (rank >= 3); all auto_pad modes honoured; any subset of outputs; explicit non-zero "
                      "pads together with auto_pad != NOTSET are rejected"},
    .prepare = opc_prep_conv, .exec = opc_exec_conv};
