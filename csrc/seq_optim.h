/* The sequence optimizers (com.microsoft AdamWOptimizer, SGDOptimizerV2, InplaceClipGradNorm): fused kernels over a
 * whole parameter list, exported directly (not through ops.def / opc_run: the op table's opc_tensor ABI has no
 * sequence type). A list is `count` tensors given as parallel arrays of data pointers with one element count per
 * index (sizes[i]: the i-th tensor of every list has that many elements; shapes are the caller's to compare). All
 * updates are in place (ORT's kernels alias updated_* to their inputs too); a caller that wants the inputs kept
 * passes copies. update_signal false is the caller's: it does not call (nothing changes, updated_flag false).
 *
 * float32 elements are computed in double and rounded once when stored; float64 in double. Every kernel splits
 * the concatenation of the list evenly across `threads` OpenMP threads (0: omp_get_max_threads()); the updates
 * are elementwise and the clip norm is summed in fixed blocks combined in a fixed order, so the results are
 * bitwise the same at any thread count. Returns OPC_OK or an OPC_ERR_* status with a message in err (errlen
 * bytes, may be NULL/0); a rejected call changes nothing. */
#ifndef OPC_SEQ_OPTIM_H
#define OPC_SEQ_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "opconform_kernels.h"

/* AdamW, adam_mode 0 (torch.optim.AdamW) or 1 (transformers' AdamW), see reference/ops/adamw.py. count >= 1;
 * correct_bias 0 or 1 (adam_mode 0 requires 1); step >= 1 when correct_bias is 1. */
OPC_API int32_t opc_adamw_f32(int64_t count, const int64_t *sizes, float *const *weights, const float *const *grads,
                              float *const *m1, float *const *m2, double lr, int64_t step, double alpha, double beta,
                              double epsilon, double weight_decay, int32_t correct_bias, int32_t adam_mode,
                              int32_t threads, char *err, size_t errlen);
OPC_API int32_t opc_adamw_f64(int64_t count, const int64_t *sizes, double *const *weights,
                              const double *const *grads, double *const *m1, double *const *m2, double lr,
                              int64_t step, double alpha, double beta, double epsilon, double weight_decay,
                              int32_t correct_bias, int32_t adam_mode, int32_t threads, char *err, size_t errlen);

/* SGDOptimizerV2: w <- w - lr * g. count >= 1. */
OPC_API int32_t opc_sgd_v2_f32(int64_t count, const int64_t *sizes, float *const *weights, const float *const *grads,
                               double lr, int32_t threads, char *err, size_t errlen);
OPC_API int32_t opc_sgd_v2_f64(int64_t count, const int64_t *sizes, double *const *weights,
                               const double *const *grads, double lr, int32_t threads, char *err, size_t errlen);

/* InplaceClipGradNorm: g <- g * min(max_norm / (||g||_2 + 1e-6), 1) over the whole list. count >= 0 (an empty list
 * is valid). norm_type NULL or "fro" (anything else OPC_ERR_INVALID_ATTRIBUTE). total_norm (may be NULL) receives
 * the joint L2 norm, summed in double. */
OPC_API int32_t opc_clip_grad_norm_f32(int64_t count, const int64_t *sizes, float *const *grads, double max_norm,
                                       const char *norm_type, double *total_norm, int32_t threads, char *err,
                                       size_t errlen);
OPC_API int32_t opc_clip_grad_norm_f64(int64_t count, const int64_t *sizes, double *const *grads, double max_norm,
                                       const char *norm_type, double *total_norm, int32_t threads, char *err,
                                       size_t errlen);

#endif
