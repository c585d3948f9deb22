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
