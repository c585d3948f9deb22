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

void opc_gemm_par(int32_t dtype, bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha,
                  const void *A, int64_t lda, const void *B, int64_t ldb, double beta, void *C,
                  int64_t ldc, int threads) {
    size_t es = dtype == OPC_FLOAT ? 4 : 8;
    double work = (double)M * (double)N * (double)(K > 0 ? K : 1);
    int nt = threads;
    if (work < 2e6) nt = 1; /* below ~2 MFLOP a fork costs more than it saves */
    bool split_m = M >= N;
    int64_t ext = split_m ? M : N;
    if (ext < 32 * (int64_t)nt) nt = (int)(ext / 32 > 0 ? ext / 32 : 1);
    if (nt <= 1) {
        opc_gemm(dtype, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        int n = omp_get_num_threads(), id = omp_get_thread_num();
        int64_t per = (ext / n + 15) / 16 * 16, lo = per * id, hi = lo + per < ext ? lo + per : ext;
        if (id == n - 1) hi = ext;
        if (lo < hi) {
            if (split_m) {
                const char *a = (const char *)A + (size_t)(ta ? lo : lo * lda) * es;
                opc_gemm(dtype, ta, tb, hi - lo, N, K, alpha, a, lda, B, ldb, beta,
                         (char *)C + (size_t)(lo * ldc) * es, ldc);
            } else {
                const char *b = (const char *)B + (size_t)(tb ? lo * ldb : lo) * es;
                opc_gemm(dtype, ta, tb, M, hi - lo, K, alpha, A, lda, b, ldb, beta,
                         (char *)C + (size_t)lo * es, ldc);
            }
        }
    }
}
