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

/* opc_gemm in blocks along the larger of M and N whose boundaries depend on M, N and K only
 * (opc_gemm_blocks), each block one single-threaded BLAS call, the blocks shared out whole over
 * `threads` OpenMP threads. Every C element is thus computed by a BLAS call of the same shape for
 * any thread count (OpenBLAS picks its kernels, edge tiles and small-matrix paths by shape), so the
 * result is bitwise the same for 1, 2, 3, ... threads. Call with OpenBLAS set to 1 thread (the
 * library never lets OpenBLAS run its own busy-waiting pool, which would compete with the OpenMP
 * threads); inside a parallel region pass threads = 1. */
void opc_gemm_par(int32_t dtype, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                  double alpha, const void *A, int64_t lda, const void *B, int64_t ldb, double beta,
                  void *C, int64_t ldc, int threads);

/* Blocking of opc_gemm_par: at most OPC_GEMM_MAX_BLOCKS blocks of at least OPC_GEMM_MIN_BLOCK rows
 * (or columns) and OPC_GEMM_MIN_WORK multiply-adds, sizes multiples of 16 but the last. These
 * thresholds shape the blocks, so they never go through opc_grain: forcing the split
 * (opc_set_force_split) changes which thread runs a block, never what a block computes. */
#define OPC_GEMM_MAX_BLOCKS 8
#define OPC_GEMM_MIN_BLOCK 128
#define OPC_GEMM_MIN_WORK 1.0e6
void opc_gemm_blocks(int64_t M, int64_t N, int64_t K, bool *split_m, int64_t *blk, int64_t *nblocks);

/* The number of blocks to cut an extent `ext` into, from shapes alone: the largest of 2, 4, 8, 12,
 * 16, 24, 32, 48, 64 (counts that share out evenly over common thread counts) not above
 * max_blocks whose blocks hold at least min_block; 1 if none. */
int64_t opc_block_count(int64_t ext, int64_t min_block, int64_t max_blocks);

/* true when every value fits OpenBLAS's 32-bit integer arguments */
bool opc_blas_dims_ok(int64_t a, int64_t b, int64_t c);

/* Sets OpenBLAS's thread count, returning the previous one. */
int opc_blas_set_threads(int n);

/* float32 GEMM with a pre-packed B, for the per-step products of the recurrences (small M, the same B
 * every step): a BLAS call repacks B on every call, which for M = batch costs about half as much as
 * the multiply itself. opc_sgemm_pack copies op(B) [K, N] (trans_b: B is [N, K]) into panels of
 * OPC_SP_NR columns, each [K][OPC_SP_NR], the last padded with zeros, into Bp of
 * opc_sgemm_packed_size(K, N) floats (64-byte aligned for speed, any alignment works).
 * opc_sgemm_packed then computes C[M, N] = A[M, K] op(B) (accumulate: C += ...). Each C element is
 * one fixed-order sum over k (FMA where the level has it), independent of M, of the other rows and
 * of the thread calling: results do not depend on how callers split rows or panels. */
int64_t opc_sgemm_packed_size(int64_t K, int64_t N);
void opc_sgemm_pack(bool trans_b, int64_t K, int64_t N, const float *B, int64_t ldb, float *Bp);
void opc_sgemm_packed(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *Bp, bool accumulate,
                      float *C, int64_t ldc);

#endif
