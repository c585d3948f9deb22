#include "blas.h"

#include <limits.h>
#include <omp.h>
#include <string.h>

#include "opconform_kernels.h"

bool opc_blas_dims_ok(int64_t a, int64_t b, int64_t c) {
    return a >= 0 && b >= 0 && c >= 0 && a < INT_MAX && b < INT_MAX && c < INT_MAX;
}

int opc_blas_set_threads(int n) {
    int prev = scipy_openblas_get_num_threads();
    if (n != prev) scipy_openblas_set_num_threads(n);
    return prev;
}

static blasint ld(int64_t v) { return (blasint)(v < 1 ? 1 : v); }

void opc_gemm(int32_t dtype, bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha,
              const void *A, int64_t lda, const void *B, int64_t ldb, double beta, void *C,
              int64_t ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) { /* nothing to multiply: C = beta * C */
        for (int64_t i = 0; i < M; i++) {
            if (dtype == OPC_FLOAT) {
                float *c = (float *)C + i * ldc;
                for (int64_t j = 0; j < N; j++) c[j] = beta == 0.0 ? 0.0f : (float)beta * c[j];
            } else {
                double *c = (double *)C + i * ldc;
                for (int64_t j = 0; j < N; j++) c[j] = beta == 0.0 ? 0.0 : beta * c[j];
            }
        }
        return;
    }
    enum CBLAS_TRANSPOSE TA = ta ? CblasTrans : CblasNoTrans, TB = tb ? CblasTrans : CblasNoTrans;
    if (dtype == OPC_FLOAT)
        scipy_cblas_sgemm(CblasRowMajor, TA, TB, (blasint)M, (blasint)N, (blasint)K, (float)alpha,
                          (const float *)A, ld(lda), (const float *)B, ld(ldb), (float)beta,
                          (float *)C, ld(ldc));
    else
        scipy_cblas_dgemm(CblasRowMajor, TA, TB, (blasint)M, (blasint)N, (blasint)K, alpha,
                          (const double *)A, ld(lda), (const double *)B, ld(ldb), beta, (double *)C,
                          ld(ldc));
}

int64_t opc_block_count(int64_t ext, int64_t min_block, int64_t max_blocks) {
    /* counts that share out evenly over 2, 4 and (from 12 on) 3 threads */
    static const int64_t counts[] = {64, 48, 32, 24, 16, 12, 8, 4, 2};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
        if (counts[i] <= max_blocks && ext / counts[i] >= min_block) return counts[i];
    return 1;
}

void opc_gemm_blocks(int64_t M, int64_t N, int64_t K, bool *split_m, int64_t *blk, int64_t *nblocks) {
    int64_t ext = M >= N ? M : N;
    double work = (double)M * (double)N * (double)(K > 0 ? K : 1);
    /* each block at least OPC_GEMM_MIN_WORK multiply-adds: below that a fork costs more than it saves */
    double by_work = work / OPC_GEMM_MIN_WORK;
    int64_t most = by_work < OPC_GEMM_MAX_BLOCKS ? (int64_t)by_work : OPC_GEMM_MAX_BLOCKS;
    int64_t nb = opc_block_count(ext, OPC_GEMM_MIN_BLOCK, most);
    int64_t b = (ext + nb - 1) / nb;
    b = (b + 15) / 16 * 16; /* whole register tiles in every block but the last */
    if (b > ext) b = ext;
    *split_m = M >= N;
    *blk = b > 0 ? b : 1;
    *nblocks = ext > 0 ? (ext + *blk - 1) / *blk : 0;
}

void opc_gemm_par(int32_t dtype, bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha,
                  const void *A, int64_t lda, const void *B, int64_t ldb, double beta, void *C,
                  int64_t ldc, int threads) {
    size_t es = dtype == OPC_FLOAT ? 4 : 8;
    bool split_m;
    int64_t blk, nb;
    opc_gemm_blocks(M, N, K, &split_m, &blk, &nb);
    int64_t ext = split_m ? M : N;
    int nt = threads < nb ? threads : (int)nb;
#pragma omp parallel for schedule(static) num_threads(nt > 1 ? nt : 1) if (nt > 1)
    for (int64_t i = 0; i < nb; i++) {
        int64_t lo = i * blk, n = lo + blk < ext ? blk : ext - lo;
        if (split_m) {
            const char *a = (const char *)A + (size_t)(ta ? lo : lo * lda) * es;
            opc_gemm(dtype, ta, tb, n, N, K, alpha, a, lda, B, ldb, beta, (char *)C + (size_t)(lo * ldc) * es, ldc);
        } else {
            const char *b = (const char *)B + (size_t)(tb ? lo * ldb : lo) * es;
            opc_gemm(dtype, ta, tb, M, n, K, alpha, A, lda, b, ldb, beta, (char *)C + (size_t)lo * es, ldc);
        }
    }
}

/* ---- float32 GEMM with a pre-packed B (opc_sgemm_packed) ------------------------------------ */

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

/* register tile: SP_MR rows x SP_NV vectors of SP_VL floats (OPC_SP_NR = SP_VL * SP_NV columns) */
#if defined(__AVX512F__)
#define SP_VL 16
#define SP_MR 8
typedef __m512 spv;
#define SP_LOAD(p) _mm512_loadu_ps(p)
#define SP_STORE(p, v) _mm512_storeu_ps((p), (v))
#define SP_SET1(x) _mm512_set1_ps(x)
#define SP_ZERO() _mm512_setzero_ps()
#define SP_ADD(a, b) _mm512_add_ps((a), (b))
#define SP_FMA(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#elif defined(__AVX2__) && defined(__FMA__)
#define SP_VL 8
#define SP_MR 6
typedef __m256 spv;
#define SP_LOAD(p) _mm256_loadu_ps(p)
#define SP_STORE(p, v) _mm256_storeu_ps((p), (v))
#define SP_SET1(x) _mm256_set1_ps(x)
#define SP_ZERO() _mm256_setzero_ps()
#define SP_ADD(a, b) _mm256_add_ps((a), (b))
#define SP_FMA(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#else /* any other level (x86-64 baseline: SSE2): GCC vectors of 4, a multiply and an add (no FMA) */
#define SP_VL 4
#define SP_MR 4
typedef float spv __attribute__((vector_size(16)));
typedef float spv_u __attribute__((vector_size(16), aligned(4)));
#define SP_LOAD(p) (*(const spv_u *)(p))
#define SP_STORE(p, v) (*(spv_u *)(p) = (v))
#define SP_SET1(x) ((spv){(x), (x), (x), (x)})
#define SP_ZERO() ((spv){0.0f, 0.0f, 0.0f, 0.0f})
#define SP_ADD(a, b) ((a) + (b))
#define SP_FMA(a, b, c) ((a) * (b) + (c))
#endif
#define SP_NV 2
#define SP_NR (SP_VL * SP_NV)
/* The panel's lines are prefetched into L1 this many k steps ahead (past a panel's end: the next panel's first,
 * which follow it in memory). The panel and the A rows together outgrow L1 in the LSTM step products (A = Hp,
 * 32 x 256), so the panel would come back from L2 on demand: LSTMTraining 1.5-3 % faster at AVX-512 (interleaved
 * A/B, 5 runs), no change with AVX2 (one line per k there). A prefetch never faults: running past the last panel
 * is harmless. */
#define SP_PF 16

int64_t opc_sgemm_packed_size(int64_t K, int64_t N) { return (N + SP_NR - 1) / SP_NR * SP_NR * (K > 0 ? K : 1); }

#if defined(__AVX2__)
/* dst[i * ldd + r] = src[r * ld + i] for an 8 x 8 block: the unpack / shuffle / lane-swap transpose */
static inline void sp_transpose8(const float *src, int64_t ld, float *dst, int64_t ldd) {
    __m256 r[8], t[8], u[8];
    for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(src + i * ld);
    for (int i = 0; i < 8; i += 2) { /* t: pairs of rows interleaved */
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) { /* u: quads of rows, one column per 128-bit lane */
        u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
        u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (int i = 0; i < 4; i++) { /* low lanes hold columns 0-3, high lanes 4-7 */
        _mm256_storeu_ps(dst + i * ldd, _mm256_permute2f128_ps(u[i], u[i + 4], 0x20));
        _mm256_storeu_ps(dst + (i + 4) * ldd, _mm256_permute2f128_ps(u[i], u[i + 4], 0x31));
    }
}
#endif

void opc_sgemm_pack(bool trans_b, int64_t K, int64_t N, const float *B, int64_t ldb, float *Bp) {
    for (int64_t n0 = 0; n0 < N; n0 += SP_NR) {
        float *panel = Bp + n0 * K;
        const int64_t nc = N - n0 < SP_NR ? N - n0 : SP_NR;
#if defined(__AVX2__)
        if (trans_b && nc == SP_NR) { /* a full panel: 8 x 8 blocks transposed in registers, the K % 8 tail below */
            const int64_t k8 = K / 8 * 8;
            for (int64_t n = 0; n < SP_NR; n += 8) /* 8 rows of B read in order, into the panel (in L1) */
                for (int64_t k = 0; k < k8; k += 8)
                    sp_transpose8(B + (n0 + n) * ldb + k, ldb, panel + k * SP_NR + n, SP_NR);
            for (int64_t n = 0; n < SP_NR; n++)
                for (int64_t k = k8; k < K; k++) panel[k * SP_NR + n] = B[(n0 + n) * ldb + k];
            continue;
        }
#endif
        if (trans_b) { /* B's rows are the panel's columns: read each row in order (the panel stays in L1) */
            for (int64_t n = 0; n < SP_NR; n++) {
                const float *src = B + (n0 + n) * ldb;
                if (n < nc)
                    for (int64_t k = 0; k < K; k++) panel[k * SP_NR + n] = src[k];
                else
                    for (int64_t k = 0; k < K; k++) panel[k * SP_NR + n] = 0.0f;
            }
            continue;
        }
        for (int64_t k = 0; k < K; k++) {
            float *dst = panel + k * SP_NR;
            for (int64_t n = 0; n < nc; n++) dst[n] = B[k * ldb + n0 + n];
            for (int64_t n = nc; n < SP_NR; n++) dst[n] = 0.0f;
        }
    }
}

/* mr rows (a constant after inlining) of one panel: nc valid columns of C */
static inline __attribute__((always_inline)) void sp_tile(const int mr, int64_t K, const float *A, int64_t lda,
                                                          const float *bp, bool acc, float *C, int64_t ldc,
                                                          int64_t nc) {
    spv c[SP_MR][SP_NV];
#pragma GCC unroll 8
    for (int r = 0; r < mr; r++)
#pragma GCC unroll 2
        for (int v = 0; v < SP_NV; v++) c[r][v] = SP_ZERO();
    for (int64_t k = 0; k < K; k++) {
        spv b[SP_NV];
#pragma GCC unroll 2
        for (int v = 0; v < SP_NV; v++) b[v] = SP_LOAD(bp + k * SP_NR + v * SP_VL);
#pragma GCC unroll 2
        for (int v = 0; v < SP_NR; v += 16) __builtin_prefetch(bp + (k + SP_PF) * SP_NR + v, 0, 3);
#pragma GCC unroll 8
        for (int r = 0; r < mr; r++) {
            spv a = SP_SET1(A[r * lda + k]);
#pragma GCC unroll 2
            for (int v = 0; v < SP_NV; v++) c[r][v] = SP_FMA(a, b[v], c[r][v]);
        }
    }
    if (nc == SP_NR) {
#pragma GCC unroll 8
        for (int r = 0; r < mr; r++)
#pragma GCC unroll 2
            for (int v = 0; v < SP_NV; v++) {
                float *p = C + r * ldc + v * SP_VL;
                SP_STORE(p, acc ? SP_ADD(SP_LOAD(p), c[r][v]) : c[r][v]);
            }
    } else {
        float tmp[SP_NR];
        for (int r = 0; r < mr; r++) {
#pragma GCC unroll 2
            for (int v = 0; v < SP_NV; v++) SP_STORE(tmp + v * SP_VL, c[r][v]);
            float *p = C + r * ldc;
            for (int64_t n = 0; n < nc; n++) p[n] = acc ? p[n] + tmp[n] : tmp[n];
        }
    }
}

void opc_sgemm_packed(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *Bp, bool accumulate,
                      float *C, int64_t ldc) {
    if (M <= 0 || N <= 0) return;
    for (int64_t n0 = 0; n0 < N; n0 += SP_NR) {
        const float *panel = Bp + n0 * (K > 0 ? K : 1);
        const int64_t nc = N - n0 < SP_NR ? N - n0 : SP_NR;
        int64_t m = 0;
        for (; m + SP_MR <= M; m += SP_MR) sp_tile(SP_MR, K, A + m * lda, lda, panel, accumulate, C + m * ldc + n0, ldc, nc);
        switch (M - m) { /* the last rows, each count its own unrolled tile */
        case 1: sp_tile(1, K, A + m * lda, lda, panel, accumulate, C + m * ldc + n0, ldc, nc); break;
        case 2: sp_tile(2, K, A + m * lda, lda, panel, accumulate, C + m * ldc + n0, ldc, nc); break;
        case 3: sp_tile(3, K, A + m * lda, lda, panel, accumulate, C + m * ldc + n0, ldc, nc); break;
#if SP_MR > 4
        case 4: sp_tile(4, K, A + m * lda, lda, panel, accumulate, C + m * ldc + n0, ldc, nc); break;
        case 5: sp_tile(5, K, A + m * lda, lda, panel, accumulate, C + m * ldc + n0, ldc, nc); break;
#endif
#if SP_MR > 6
        case 6: sp_tile(6, K, A + m * lda, lda, panel, accumulate, C + m * ldc + n0, ldc, nc); break;
        case 7: sp_tile(7, K, A + m * lda, lda, panel, accumulate, C + m * ldc + n0, ldc, nc); break;
#endif
        default: break;
        }
    }
}
