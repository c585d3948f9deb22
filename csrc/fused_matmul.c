/* FusedMatMul (com.microsoft): Y = alpha * matmul(op(A), op(B)), numpy matmul semantics after the transposes.
 * op(X): a 1-D X is itself (a row [1, K] for A, a column [K, 1] for B; trans flags change nothing on a vector);
 * a 2-D X is X or X^T (transX); rank r >= 3: transBatchX reads X stored [P, b0..bn, Q] as [b0..bn, P, Q] (a row
 * stride of prod(b) * Q, no copy), then transX swaps the last two axes. Both transposes fold into the BLAS call:
 * each output matrix is one GEMM on strided rows with the trans flag set, no operand is copied (float32 and
 * float64 through OpenBLAS sgemm / dgemm; float16 and bfloat16 widened to float32 once, the float32 product
 * narrowed once). Batch axes broadcast (size-1 axes and rank differences, stride 0 on the broadcast axes); a
 * batched A (no transA, no transBatchA, not broadcast) times a B without batch is folded into one GEMM of
 * batch * M rows (BERT's [4,128,768] x [768,3072] is one 512 x 768 x 3072 product).
 * Thread invariance: every output matrix is cut into fixed blocks (fmm_blocks), which depend on M, N, K only; the
 * (matrix, block) items are shared out over the OpenMP threads, each item one single-threaded BLAS call
 * (OpenBLAS runs with 1 thread during the call): the same BLAS call of the same shape computes every element at
 * any thread count, so results are bitwise the same at 1, 2, 3, 4 threads.
 * K = 0 gives alpha * 0 everywhere (NaN for alpha inf or NaN). Rejected: rank-0 operands, K that differ, batch
 * axes that do not broadcast, trans flags other than 0 and 1, dimensions beyond BLAS's 32-bit integers. */
#include <omp.h>
#include <stdlib.h>

#include "blas.h"
#include "call.h"
#include "half_blocks.h"

typedef struct {
    int32_t dtype;
    bool ta, tb;         /* the BLAS trans flags (transX on an operand of rank >= 2) */
    bool fold;           /* one GEMM of nbatch * M rows */
    int32_t nbd;         /* output batch axes */
    int64_t M, N, K;
    int64_t lda, ldb;    /* row strides of the stored matrices */
    int64_t nbatch;      /* output matrices */
    int64_t nA, nB, nY;  /* element counts */
    double alpha;
    int64_t bdims[OPC_MAX_RANK];              /* output batch dims */
    int64_t sa[OPC_MAX_RANK], sb[OPC_MAX_RANK]; /* operand element strides per output batch axis (0: broadcast) */
} fmm_plan;

/* One operand as BLAS sees it: stored matrix rows x cols with row stride ld, batch dims and their strides
 * (right-aligned later), and whether op() transposes it. */
typedef struct {
    int32_t rank, nb;
    int64_t rows, cols, ld;
    bool trans;
    int64_t bd[OPC_MAX_RANK], bs[OPC_MAX_RANK];
} operand;

static int32_t describe(opc_call *c, const opc_tensor *t, bool is_b, int64_t tr, int64_t tbat, operand *o) {
    const int64_t *s = t->shape;
    int32_t r = t->rank;
    o->rank = r;
    o->nb = 0;
    o->trans = false;
    if (r == 1) {                     /* a row [1, K] (A) or a column [K, 1] (B) */
        o->rows = is_b ? s[0] : 1;
        o->cols = is_b ? 1 : s[0];
        o->ld = o->cols;
        return OPC_OK;
    }
    if (r >= 3 && tbat) { /* [P, b0..bn, Q]: batch b's row p at p * prod(b) * Q + b * Q */
        int64_t prod = 1;
        o->nb = r - 2;
        for (int32_t i = r - 2; i >= 1; i--) {
            o->bd[i - 1] = s[i];
            o->bs[i - 1] = prod * s[r - 1];
            if (!opc_mul_ok(prod, s[i], &prod)) return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "shape too large");
        }
        o->rows = s[0];
        o->cols = s[r - 1];
        if (!opc_mul_ok(prod, s[r - 1], &o->ld)) return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "shape too large");
    } else { /* [b0..bn, P, Q] */
        int64_t stride = s[r - 2] * s[r - 1];
        o->nb = r - 2;
        for (int32_t i = r - 3; i >= 0; i--) {
            o->bd[i] = s[i];
            o->bs[i] = stride;
            stride *= s[i];
        }
        o->rows = s[r - 2];
        o->cols = s[r - 1];
        o->ld = s[r - 1];
    }
    o->trans = tr != 0;
    return OPC_OK;
}

int32_t opc_prep_fused_matmul(opc_call *c, void *plan_v, opc_shape *outs) {
    fmm_plan *p = plan_v;
    memset(p, 0, sizeof *p);
    int32_t s;
    if ((s = opc_require(c, 0)) || (s = opc_require(c, 1))) return s;
    const opc_tensor *a = c->in[0], *b = c->in[1];
    if ((s = opc_check_supported_dtype(c, a->dtype))) return s;
    static const int32_t both[] = {0, 1};
    if ((s = opc_check_dtypes(c, a->dtype, both, 2))) return s;
    static const char *const flags[] = {"transA", "transB", "transBatchA", "transBatchB"};
    int64_t f[4];
    for (int i = 0; i < 4; i++) {
        if ((s = opc_attr_int(c, flags[i], 0, &f[i]))) return s;
        if (f[i] != 0 && f[i] != 1)
            return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "%s %lld must be 0 or 1", flags[i], (long long)f[i]);
    }
    if ((s = opc_attr_float(c, "alpha", 1.0, &p->alpha, NULL))) return s;
    char sa[200], sb[200];
    opc_shape_str(a, sa, sizeof sa);
    opc_shape_str(b, sb, sizeof sb);
    if (a->rank < 1 || b->rank < 1)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "FusedMatMul needs operands of rank >= 1, got A %s and B %s", sa, sb);
    operand oa, ob;
    if ((s = describe(c, a, false, f[0], f[2], &oa)) || (s = describe(c, b, true, f[1], f[3], &ob))) return s;
    int64_t M = oa.trans ? oa.cols : oa.rows, Ka = oa.trans ? oa.rows : oa.cols;
    int64_t Kb = ob.trans ? ob.cols : ob.rows, N = ob.trans ? ob.rows : ob.cols;
    if (Ka != Kb)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT,
                        "inner dimensions differ: op(A) has K = %lld (A %s), op(B) has K = %lld (B %s)", (long long)Ka,
                        sa, (long long)Kb, sb);
    /* broadcast the batch axes, right-aligned */
    int32_t nbd = oa.nb > ob.nb ? oa.nb : ob.nb;
    int32_t out_rank = nbd + (a->rank >= 2) + (b->rank >= 2);
    if (out_rank > OPC_MAX_RANK) return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "output rank %d too large", out_rank);
    int64_t nbatch = 1;
    bool a_full = true; /* A is not broadcast along any output batch axis */
    for (int32_t i = 0; i < nbd; i++) {
        int32_t ia = i - (nbd - oa.nb), ib = i - (nbd - ob.nb);
        int64_t da = ia >= 0 ? oa.bd[ia] : 1, db = ib >= 0 ? ob.bd[ib] : 1;
        if (da != db && da != 1 && db != 1)
            return opc_fail(c, OPC_ERR_INVALID_ARGUMENT,
                            "the batch axes of op(A) (A %s) and op(B) (B %s) do not broadcast: %lld against %lld", sa, sb,
                            (long long)da, (long long)db);
        int64_t d = da == 1 ? db : da;
        p->bdims[i] = d;
        p->sa[i] = (ia >= 0 && da == d && d != 1) ? oa.bs[ia] : 0;
        p->sb[i] = (ib >= 0 && db == d && d != 1) ? ob.bs[ib] : 0;
        if (da != d) a_full = false;
        if (!opc_mul_ok(nbatch, d, &nbatch)) return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "shape too large");
    }
    int64_t ny;
    if (!opc_mul_ok(nbatch, M, &ny) || !opc_mul_ok(ny, N, &ny) || ny > OPC_MAX_ELEMS)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "output too large");
    bool b_bcast = true;
    for (int32_t i = 0; i < nbd; i++)
        if (p->sb[i] != 0) b_bcast = false;
    p->fold = nbatch > 1 && b_bcast && a_full && !oa.trans && a->rank >= 3 && !f[2];
    int64_t rows = p->fold ? nbatch * M : M;
    if (!opc_blas_dims_ok(rows, N, Ka) || !opc_blas_dims_ok(oa.ld, ob.ld, 0))
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "dimensions beyond BLAS's 32-bit integers (A %s, B %s)", sa, sb);
    p->dtype = a->dtype;
    p->ta = oa.trans;
    p->tb = ob.trans;
    p->nbd = nbd;
    p->M = M;
    p->N = N;
    p->K = Ka;
    p->lda = oa.ld;
    p->ldb = ob.ld;
    p->nbatch = nbatch;
    p->nA = opc_numel(a);
    p->nB = opc_numel(b);
    p->nY = ny;
    outs[0].dtype = a->dtype;
    outs[0].rank = out_rank;
    for (int32_t i = 0; i < nbd; i++) outs[0].shape[i] = p->bdims[i];
    int32_t k = nbd;
    if (a->rank >= 2) outs[0].shape[k++] = M;
    if (b->rank >= 2) outs[0].shape[k++] = N;
    return OPC_OK;
}

/* ---- compute ---------------------------------------------------------------------------------- */

/* offsets (elements) of output matrix `bi`'s operands */
static void batch_offsets(const fmm_plan *p, int64_t bi, int64_t *oa, int64_t *ob) {
    int64_t a = 0, b = 0;
    for (int32_t i = p->nbd - 1; i >= 0; i--) {
        int64_t d = p->bdims[i], idx = bi % d;
        bi /= d;
        a += idx * p->sa[i];
        b += idx * p->sb[i];
    }
    *oa = a;
    *ob = b;
}

/* The blocks of one output matrix, from M, N, K only (never the thread count): along the larger of M and N (every
 * block repacks the whole of the operand not split, so splitting the larger extent repacks the smaller operand), at
 * most FMM_MAX_BLOCKS blocks of at least OPC_GEMM_MIN_BLOCK rows or columns and OPC_GEMM_MIN_WORK multiply-adds, sizes
 * multiples of 16 but the last. At most 4, not opc_gemm_blocks' 8: half the repacking, and 4 blocks keep 1-4 threads
 * busy. */
#define FMM_MAX_BLOCKS 4
static void fmm_blocks(int64_t M, int64_t N, int64_t K, bool *split_m, int64_t *blk, int64_t *nblocks) {
    int64_t ext = M >= N ? M : N;
    double by_work = (double)M * (double)N * (double)(K > 0 ? K : 1) / OPC_GEMM_MIN_WORK;
    int64_t most = by_work < FMM_MAX_BLOCKS ? (int64_t)by_work : FMM_MAX_BLOCKS;
    int64_t nb = opc_block_count(ext, OPC_GEMM_MIN_BLOCK, most);
    int64_t b = (ext + nb - 1) / nb;
    b = (b + 15) / 16 * 16;
    if (b > ext) b = ext;
    *split_m = M >= N;
    *blk = b > 0 ? b : 1;
    *nblocks = ext > 0 ? (ext + *blk - 1) / *blk : 0;
}

/* Y = alpha op(A) op(B) in `gd` (OPC_FLOAT or OPC_DOUBLE) over nt threads, OpenBLAS at 1 thread. */
static void compute(const fmm_plan *p, int32_t gd, const void *A, const void *B, void *Y, int nt) {
    size_t es = gd == OPC_FLOAT ? 4 : 8;
    int64_t M = p->fold ? p->nbatch * p->M : p->M, nmat = p->fold ? 1 : p->nbatch;
    bool split_m;
    int64_t blk, nblk;
    fmm_blocks(M, p->N, p->K, &split_m, &blk, &nblk);
    int64_t items = nmat * nblk, ext = split_m ? M : p->N;
    int n = (int)(items < nt ? items : nt);
    /* BLAS reads neither operand when alpha is 0 (C = beta C): the product with alpha 1, then times 0, so that
     * 0 * inf and 0 * NaN give NaN as the math does */
    const double alpha = p->alpha == 0.0 ? 1.0 : p->alpha;
    int prev = opc_blas_set_threads(1);
#pragma omp parallel for schedule(static) num_threads(n > 1 ? n : 1) if (n > 1)
    for (int64_t it = 0; it < items; it++) {
        int64_t bi = it / nblk, i = it % nblk, offa = 0, offb = 0;
        if (!p->fold) batch_offsets(p, bi, &offa, &offb);
        const char *a = (const char *)A + (size_t)offa * es, *b = (const char *)B + (size_t)offb * es;
        char *y = (char *)Y + (size_t)(bi * M * p->N) * es;
        int64_t lo = i * blk, len = lo + blk < ext ? blk : ext - lo;
        if (split_m)
            opc_gemm(gd, p->ta, p->tb, len, p->N, p->K, alpha, a + (size_t)(p->ta ? lo : lo * p->lda) * es, p->lda,
                     b, p->ldb, 0.0, y + (size_t)(lo * p->N) * es, p->N);
        else
            opc_gemm(gd, p->ta, p->tb, M, len, p->K, alpha, a, p->lda, b + (size_t)(p->tb ? lo * p->ldb : lo) * es,
                     p->ldb, 0.0, y + (size_t)lo * es, p->N);
    }
    opc_blas_set_threads(prev);
    if (p->alpha == 0.0) {
        int64_t ny = p->nY;
        if (gd == OPC_FLOAT)
            for (int64_t i = 0; i < ny; i++) ((float *)Y)[i] *= 0.0f;
        else
            for (int64_t i = 0; i < ny; i++) ((double *)Y)[i] *= 0.0;
    }
}

static void widen_all(bool bf16, const uint16_t *h, float *f, int64_t n, int nt) {
    int64_t nblocks = (n + HALF_BLOCK - 1) / HALF_BLOCK;
    int t = (int)(nblocks < nt ? nblocks : nt);
#pragma omp parallel for schedule(static) num_threads(t > 1 ? t : 1) if (t > 1)
    for (int64_t i = 0; i < nblocks; i++) {
        int64_t lo = i * HALF_BLOCK, len = lo + HALF_BLOCK < n ? HALF_BLOCK : n - lo;
        widen_half(bf16, h + lo, f + lo, len);
    }
}

static void narrow_all(bool bf16, const float *f, uint16_t *h, int64_t n, int nt) {
    int64_t nblocks = (n + HALF_BLOCK - 1) / HALF_BLOCK;
    int t = (int)(nblocks < nt ? nblocks : nt);
#pragma omp parallel for schedule(static) num_threads(t > 1 ? t : 1) if (t > 1)
    for (int64_t i = 0; i < nblocks; i++) {
        int64_t lo = i * HALF_BLOCK, len = lo + HALF_BLOCK < n ? HALF_BLOCK : n - lo;
        narrow_half(bf16, f + lo, h + lo, len);
    }
}

int32_t opc_exec_fused_matmul(opc_call *c, const void *plan_v, opc_tensor *outs) {
    const fmm_plan *p = plan_v;
    void *y = outs[0].data;
    if (!y || p->nY == 0) return OPC_OK;
    int nt = c->threads > 0 ? c->threads : 1;
    /* at least ~64k multiply-adds per thread */
    double work = (double)p->nY * (double)(p->K > 0 ? p->K : 1);
    double want = work / (double)opc_grain(65536) + 1.0;
    if (want < nt) nt = (int)want;
    if (p->K == 0) { /* an empty sum: alpha * 0 (IEEE: NaN for alpha inf or NaN, -0 for a negative alpha) */
        double z = p->alpha * 0.0;
        for (int64_t i = 0; i < p->nY; i++) {
            switch (p->dtype) {
            case OPC_FLOAT: ((float *)y)[i] = (float)z; break;
            case OPC_DOUBLE: ((double *)y)[i] = z; break;
            case OPC_FLOAT16: ((uint16_t *)y)[i] = opc_f32_to_f16((float)z); break;
            default: ((uint16_t *)y)[i] = opc_f32_to_bf16((float)z); break;
            }
        }
        return OPC_OK;
    }
    const void *A = c->in[0]->data, *B = c->in[1]->data;
    if (p->dtype == OPC_FLOAT || p->dtype == OPC_DOUBLE) {
        compute(p, p->dtype, A, B, y, nt);
        return OPC_OK;
    }
    bool bf16 = p->dtype == OPC_BFLOAT16;
    float *fa = malloc((size_t)p->nA * sizeof(float)), *fb = malloc((size_t)p->nB * sizeof(float));
    float *fy = malloc((size_t)p->nY * sizeof(float));
    if (!fa || !fb || !fy) {
        free(fa);
        free(fb);
        free(fy);
        return opc_fail(c, OPC_ERR_OUT_OF_MEMORY, "out of memory for the float32 copies");
    }
    widen_all(bf16, A, fa, p->nA, nt);
    widen_all(bf16, B, fb, p->nB, nt);
    compute(p, OPC_FLOAT, fa, fb, fy, nt);
    narrow_all(bf16, fy, y, p->nY, nt);
    free(fa);
    free(fb);
    free(fy);
    return OPC_OK;
}

/* ---- registry entry (listed in ops.def; held against the spec by tests/openmp/test_descriptors.py) ---- */

static const int32_t DT_FMM[] = {OPC_FLOAT16, OPC_FLOAT, OPC_DOUBLE, OPC_BFLOAT16};
static const char *const FMM_IN[] = {"A", "B"};
static const uint8_t FMM_OPT[] = {0, 0};
static const char *const FMM_OUT[] = {"Y"};
static const char *const FMM_ATTR[] = {"alpha", "transA", "transB", "transBatchA", "transBatchB"};

OPC_DEFINE_OP(FusedMatMul) = {
    .desc = {.name = "FusedMatMul", OPC_INPUTS(FMM_IN, FMM_OPT), OPC_OUTPUTS(FMM_OUT), OPC_DTYPES(DT_FMM),
             OPC_ATTRS(FMM_ATTR),
             .notes = "Y = alpha * matmul(op(A), op(B)); transposes folded into OpenBLAS sgemm/dgemm calls; float16 "
                      "and bfloat16 through float32; trans flags 0 or 1"},
    .prepare = opc_prep_fused_matmul, .exec = opc_exec_fused_matmul};
