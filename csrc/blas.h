/* BLAS access: scipy-openblas32 (symbols prefixed scipy_, 32-bit blasint). */
#ifndef OPC_BLAS_H
#define OPC_BLAS_H

#include <stdbool.h>
#include <stdint.h>

#include <cblas.h> /* scipy_openblas32's header: declares scipy_cblas_sgemm, ... */
#undef I /* complex.h's imaginary unit, pulled in by cblas.h; we use I as a size */

/* Row-major C[M,N] = alpha * op(A)[M,K] op(B)[K,N] + beta * C for dtype OPC_FLOAT / OPC_DOUBLE.
 * Handles zero-sized M, N, K (K == 0 gives C = beta * C). Dimensions must fit in int32 (checked by
 * the ops' prepare step with opc_blas_dims_ok). */
void opc_gemm(int32_t dtype, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
              double alpha, const void *A, int64_t lda, const void *B, int64_t ldb, double beta,
              void *C, int64_t ldc);

/* opc_gemm split over `threads` OpenMP threads along the larger of M and N, each piece a
 * single-threaded BLAS call. Call outside parallel regions, with OpenBLAS set to 1 thread: the
 * library never lets OpenBLAS run its own (busy-waiting pthread) pool, so it cannot compete with
 * the OpenMP threads. Each C element is the same single dot product as in an unsplit call. */
void opc_gemm_par(int32_t dtype, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                  double alpha, const void *A, int64_t lda, const void *B, int64_t ldb, double beta,
                  void *C, int64_t ldc, int threads);

/* true when every value fits OpenBLAS's 32-bit integer arguments */
bool opc_blas_dims_ok(int64_t a, int64_t b, int64_t c);

/* Sets OpenBLAS's thread count, returning the previous one. */
int opc_blas_set_threads(int n);

#endif
