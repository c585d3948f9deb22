/*
 * opconform_kernels.h: the one public C interface of the opconform C/OpenMP kernel library.
 *
 * Plain C, no Python C-API. Every entry point validates everything it is given and reports
 * failures as a status code plus a NUL-terminated message in a caller-provided buffer; it never
 * aborts, and NaN/Inf are ordinary data.
 *
 * Calling sequence:
 *   1. opc_infer(op, inputs, attrs, ...) -> the dtype and shape of every output
 *      (the library applies the op's own shape rules; the caller needs none of them);
 *   2. the caller allocates the outputs it wants (C-contiguous, row-major);
 *   3. opc_run(op, inputs, attrs, outputs, threads, ...) computes them. opc_run re-validates
 *      everything, including that every wanted output has exactly the inferred dtype and shape.
 *
 * Tensors are dense, C-contiguous, row-major. Inputs are given in the op's positional order
 * (as in the ONNX / com.microsoft node). An absent optional input has rank < 0 (not OPC_SEQUENCE) or data == NULL.
 * An output with data == NULL is not wanted and is not computed; a call is validated the same way
 * whatever outputs it wants, none included (indices, labels and other values the op reads through
 * are checked by opc_run, not by opc_infer). Outputs must not overlap inputs or each other.
 *
 * Thread safety: calls may run concurrently from several threads except for ops that use BLAS
 * (ConvGrad, GRUTraining, GRUGrad, LSTMTraining, LSTMGrad), which adjust OpenBLAS's global thread count for the call.
 */
#ifndef OPCONFORM_KERNELS_H
#define OPCONFORM_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define OPC_API __attribute__((visibility("default")))
#else
#define OPC_API
#endif

#define OPC_ABI_VERSION 1
#define OPC_MAX_RANK 12 /* larger ranks are rejected with OPC_ERR_INVALID_ARGUMENT */

/* Element types: the ONNX TensorProto.DataType codes. */
enum {
    OPC_FLOAT = 1,
    OPC_INT32 = 6,
    OPC_INT64 = 7,
    OPC_BOOL = 9,          /* one byte per element, 0 = false, any other value true */
    OPC_FLOAT16 = 10,
    OPC_DOUBLE = 11,
    OPC_BFLOAT16 = 16
};

/* Status codes. */
enum {
    OPC_OK = 0,
    OPC_ERR_UNKNOWN_OP = 1,        /* no op of that name */
    OPC_ERR_INVALID_ARGUMENT = 2,  /* wrong ranks / shapes / missing required inputs / bad counts */
    OPC_ERR_UNSUPPORTED_DTYPE = 3, /* dtype not supported by this op, or inputs of mixed dtypes */
    OPC_ERR_UNKNOWN_ATTRIBUTE = 4, /* attribute name the op does not take, or given twice */
    OPC_ERR_INVALID_ATTRIBUTE = 5, /* wrong attribute type, length or value */
    OPC_ERR_NOT_IMPLEMENTED = 6,   /* a valid feature this library rejects (named in the message) */
    OPC_ERR_OUT_OF_MEMORY = 7,
    OPC_ERR_OUTPUT_MISMATCH = 8,   /* a wanted output's dtype/shape differs from opc_infer's */
    OPC_ERR_INTERNAL = 9
};

/* A tensor: dtype + rank + shape + data. */
typedef struct {
    int32_t dtype;         /* OPC_FLOAT, ... */
    int32_t rank;          /* < 0: absent (OPC_SEQUENCE excepted: a sequence, below) */
    const int64_t *shape;  /* rank entries, each >= 0 (may be NULL when rank == 0) */
    void *data;            /* NULL: absent input / unwanted output */
} opc_tensor;

/* A sequence (ONNX seq(tensor(T)), a list of tensors: the inputs and outputs of AdamWOptimizer, SGDOptimizerV2,
 * InplaceClipGradNorm) travels as one opc_tensor with
 *     rank  == OPC_SEQUENCE,
 *     dtype =  the element dtype (every element has exactly it),
 *     shape -> ONE int64: the element count (>= 0, at most OPC_MAX_SEQUENCE),
 *     data  -> an array of that many opc_tensor elements, each an ordinary dense tensor (rank 0..OPC_MAX_RANK,
 *              data != NULL unless it has no element); data may be NULL only when the count is 0.
 * A sequence input is present whatever its count (rank -1 stays "absent"). The ops declare which inputs and outputs
 * are sequences: a sequence where a tensor is expected, a tensor where a sequence is, a nested sequence, an element
 * of another dtype, a negative count, a NULL shape, or NULL element data with elements are rejected with
 * OPC_ERR_INVALID_ARGUMENT (OPC_ERR_UNSUPPORTED_DTYPE for a dtype). opc_infer describes a sequence output as an
 * opc_shape with rank == OPC_SEQUENCE, dtype = the element dtype and shape[0] = the index of the input sequence
 * whose element count and element shapes the output's elements have (every sequence output mirrors an input).
 * A wanted sequence output (data != NULL) is a sequence the caller allocated accordingly; opc_run checks its count
 * and every element's dtype and shape (OPC_ERR_OUTPUT_MISMATCH). A sequence output's element may be the very memory
 * of the element of the input it mirrors (an in-place update: the kernels read an element before writing it);
 * otherwise outputs must not overlap inputs or each other. */
#define OPC_SEQUENCE (-2)
#define OPC_MAX_SEQUENCE ((int64_t)1 << 31)

/* Attribute kinds. */
enum {
    OPC_ATTR_INT = 1,
    OPC_ATTR_FLOAT = 2,
    OPC_ATTR_STRING = 3,
    OPC_ATTR_INTS = 4,
    OPC_ATTR_FLOATS = 5,
    OPC_ATTR_STRINGS = 6
};

/* An attribute by name; only the member(s) of its kind are read. A FLOAT attribute may also be
 * given as an INT. */
typedef struct {
    const char *name;
    int32_t kind;                /* OPC_ATTR_* */
    int64_t i;                   /* INT */
    double f;                    /* FLOAT */
    const char *s;               /* STRING */
    int64_t n;                   /* number of entries of INTS / FLOATS / STRINGS */
    const int64_t *ints;         /* INTS */
    const double *floats;        /* FLOATS */
    const char *const *strings;  /* STRINGS */
} opc_attr;

/* An output description filled by opc_infer (a sequence output: rank OPC_SEQUENCE, shape[0] the index of the
 * input sequence it mirrors; see opc_tensor). */
typedef struct {
    int32_t dtype;
    int32_t rank;
    int64_t shape[OPC_MAX_RANK];
} opc_shape;

/* Static description of an op, for queries. */
typedef struct {
    const char *name;               /* e.g. "SoftmaxGrad_13" (com.microsoft domain, opset 1) */
    int32_t n_inputs;               /* positional inputs */
    const char *const *input_names;
    const uint8_t *input_optional;  /* 1 = optional */
    int32_t n_outputs;
    const char *const *output_names;
    int32_t n_dtypes;               /* element types this library supports for the op */
    const int32_t *dtypes;
    int32_t n_attrs;                /* attribute names the op accepts */
    const char *const *attr_names;
    const char *notes;              /* features rejected with OPC_ERR_NOT_IMPLEMENTED, etc. */
    /* Accepted beyond the op schema (its spec): dtypes and attributes the library's own tests use (float64
     * precision checks, a layout fixed at 0). dtypes and attr_names above stay within the schema's; the
     * harness offers runs only those. */
    int32_t n_extra_dtypes;
    const int32_t *extra_dtypes;
    int32_t n_extra_attrs;
    const char *const *extra_attr_names;
} opc_op_desc;

/* Number of ops, and the i-th (NULL when out of range). */
OPC_API int32_t opc_op_count(void);
OPC_API const opc_op_desc *opc_op_at(int32_t index);
/* The op of that name, or NULL. */
OPC_API const opc_op_desc *opc_find_op(const char *name);

/* Output dtypes and shapes. out_shapes must have room for n_outputs entries, and n_outputs must be
 * the op's output count. Returns OPC_OK or an error status with a message in err. */
OPC_API int32_t opc_infer(const char *op,
                          int32_t n_inputs, const opc_tensor *inputs,
                          int32_t n_attrs, const opc_attr *attrs,
                          int32_t n_outputs, opc_shape *out_shapes,
                          char *err, size_t err_len);

/* Compute the wanted outputs (data != NULL). threads: OpenMP threads for this call (>= 1);
 * 0 means omp_get_max_threads(). n_inputs may be less than the op's input count (trailing inputs
 * absent); n_outputs must equal the op's output count. */
OPC_API int32_t opc_run(const char *op,
                        int32_t n_inputs, const opc_tensor *inputs,
                        int32_t n_attrs, const opc_attr *attrs,
                        int32_t n_outputs, opc_tensor *outputs,
                        int32_t threads,
                        char *err, size_t err_len);

/* Benchmark helper: a[i] = b[i] + s * c[i] on `threads` OpenMP threads (STREAM triad); no checks
 * beyond NULL pointers and n <= 0 (both make it return without touching memory). */
OPC_API void opc_triad_f32(float *a, const float *b, const float *c, float s, int64_t n, int32_t threads);

/* Testing aid for thread invariance: with force != 0, every kernel splits its work across the threads
 * it is given however small the input (normally small inputs run on one thread, because starting
 * threads would cost more than it saves), so a 1- vs 2-thread comparison exercises the split on the
 * small cases of a test tier. Process-wide; returns the previous setting. Results must not change. */
OPC_API int32_t opc_set_force_split(int32_t force);

/* Outputs of at least opc_stream_bytes() bytes are written with non-temporal stores (by the kernels that
 * build their rows in cache first: GatherGrad, GatherElementsGrad): by default the last-level cache's size,
 * read once. opc_set_stream_bytes sets it process-wide (a negative value restores the default) and returns
 * the previous setting (-1: the default); tests use it to run both store paths. Results never change. */
OPC_API int64_t opc_stream_bytes(void);
OPC_API int64_t opc_set_stream_bytes(int64_t bytes);

/* Build facts as a JSON object text (compiler, flags, OpenMP version, BLAS, sanitizers). */
OPC_API const char *opc_build_info(void);
OPC_API int32_t opc_abi_version(void);
/* Name of a status code ("OPC_OK", "OPC_ERR_INVALID_ARGUMENT", ...). */
OPC_API const char *opc_status_name(int32_t status);

#ifdef __cplusplus
}
#endif
#endif /* OPCONFORM_KERNELS_H */
