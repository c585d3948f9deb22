/* The helper floor every op file calls (implemented in call.c): call context, errors, attributes, tensors,
 * dtypes, threads, and the op entry type an op file defines with OPC_DEFINE_OP. Depends on nothing but the
 * public header; the registry (api.c) depends on the op files, never the other way. */
#ifndef OPC_CALL_H
#define OPC_CALL_H

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "opconform_kernels.h"

#define OPC_MAX_INPUTS 12
#define OPC_MAX_OUTPUTS 8
/* Largest element count / byte count we accept for one tensor: keeps every size product and
 * pointer offset far from int64 overflow. */
#define OPC_MAX_ELEMS ((int64_t)1 << 48)

typedef struct opc_call {
    const opc_op_desc *desc;
    int32_t n_inputs;
    const opc_tensor *in[OPC_MAX_INPUTS]; /* NULL when absent */
    int32_t n_attrs;
    const opc_attr *attrs;
    int32_t threads;
    char *err;
    size_t err_len;
} opc_call;

/* Per-op entry points. prepare validates inputs and attributes, fills the op's plan (at most
 * OPC_PLAN_BYTES) and the output shapes; check (optional) is the op's rule for the input values it reads
 * through (indices, labels, saved statistics); exec computes the wanted outputs (data != NULL).
 * opc_run: prepare; then, when no output is wanted, check and return (the library's only "nothing to
 * compute" return); else exec, which validates the values first, with check or in its own pass over
 * them that reports through check (the kernels that scan indices anyway, so that validation costs no
 * second pass over them). Either way a call is rejected, with the same message, whatever outputs it
 * wants. opc_infer runs prepare only: shapes never depend on the values check reads. */
#define OPC_PLAN_BYTES 2048
typedef int32_t (*opc_prepare_fn)(opc_call *c, void *plan, opc_shape *outs);
typedef int32_t (*opc_check_fn)(opc_call *c, const void *plan);
typedef int32_t (*opc_exec_fn)(opc_call *c, const void *plan, opc_tensor *outs);

typedef struct {
    opc_op_desc desc;
    opc_prepare_fn prepare;
    opc_exec_fn exec;
    opc_check_fn check; /* NULL: no value of an input can make the call invalid */
    /* Bit i set: input / output i is a sequence (opconform_kernels.h, OPC_SEQUENCE). The dispatcher validates a
     * sequence input whole (count, elements, dtypes, shapes) and rejects a sequence where a tensor is expected and
     * the reverse; prepare writes a sequence output's opc_shape with opc_seq_output, and opc_run checks the caller's
     * sequence output against the mirrored input's elements before exec. */
    uint32_t seq_inputs, seq_outputs;
} opc_op_entry;

/* An op's registry entry, defined once in the op's own C file next to its kernel (with its signature
 * arrays) and listed once in ops.def, from which api.c builds the registry:
 *     OPC_DEFINE_OP(ReluGrad) = {.desc = {.name = "ReluGrad", OPC_INPUTS(IN, OPT), OPC_OUTPUTS(OUT),
 *                                         OPC_DTYPES(DT), OPC_ATTRS(ATTR), .notes = "..."},
 *                                .prepare = ..., .exec = ..., .check = ...};
 * tests/openmp/test_descriptors.py holds every descriptor against the op's spec. */
#define OPC_DEFINE_OP(NAME) const opc_op_entry opc_op_##NAME
#define OPC_COUNT(a) ((int32_t)(sizeof(a) / sizeof((a)[0])))
/* names and optionality (0/1 per input); arrays of different lengths fail to compile */
#define OPC_INPUTS(names, optional)                                                                          \
    .n_inputs = OPC_COUNT(names), .input_names = (names),                                                    \
    .input_optional = (optional) + 0 * sizeof(char[OPC_COUNT(names) == (int32_t)sizeof(optional) ? 1 : -1])
#define OPC_OUTPUTS(names) .n_outputs = OPC_COUNT(names), .output_names = (names)
#define OPC_DTYPES(codes) .n_dtypes = OPC_COUNT(codes), .dtypes = (codes)
#define OPC_ATTRS(names) .n_attrs = OPC_COUNT(names), .attr_names = (names)
#define OPC_EXTRA_DTYPES(codes) .n_extra_dtypes = OPC_COUNT(codes), .extra_dtypes = (codes)
#define OPC_EXTRA_ATTRS(names) .n_extra_attrs = OPC_COUNT(names), .extra_attr_names = (names)

/* The whole library is built once per ISA level (CMakeLists.txt: -march per level, one .so each), so
 * hot loops need no per-function clones; CLONES is kept as a marker of the vectorised loops. */
#define CLONES

/* errors ------------------------------------------------------------------------------------ */
int32_t opc_fail(opc_call *c, int32_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* attributes -------------------------------------------------------------------------------- */
const opc_attr *opc_attr_get(const opc_call *c, const char *name);
/* Each returns OPC_OK (value or default written) or an error status with the message set. */
int32_t opc_attr_int(opc_call *c, const char *name, int64_t dflt, int64_t *out);
int32_t opc_attr_float(opc_call *c, const char *name, double dflt, double *out, bool *given);
/* *out = NULL, *n = -1 when absent. */
int32_t opc_attr_ints(opc_call *c, const char *name, const int64_t **out, int64_t *n);
int32_t opc_attr_floats(opc_call *c, const char *name, const double **out, int64_t *n);
/* *out = dflt when absent. */
int32_t opc_attr_string(opc_call *c, const char *name, const char *dflt, const char **out);
int32_t opc_attr_strings(opc_call *c, const char *name, const char *const **out, int64_t *n);

/* tensors ----------------------------------------------------------------------------------- */
/* sequences (validated by the dispatcher: count >= 0, elements dense tensors of the sequence's dtype) */
static inline int64_t opc_seq_count(const opc_tensor *s) { return s->shape[0]; }
static inline const opc_tensor *opc_seq_at(const opc_tensor *s, int64_t i) { return &((const opc_tensor *)s->data)[i]; }
/* outs[k] = a sequence of dtype `dtype` whose elements mirror input sequence `input`'s */
void opc_seq_output(opc_shape *out, int32_t dtype, int32_t input);
/* A sequence argument whole: what (input/output) and name in the messages. With `like` (an output's mirrored
 * input), the count and every element's dtype and shape must equal like's (OPC_ERR_OUTPUT_MISMATCH). */
int32_t opc_check_sequence(opc_call *c, const opc_tensor *t, const char *what, const char *name,
                           const opc_tensor *like);
/* A tensor argument's rank, shape and dtype code (rank <= OPC_MAX_RANK, dims >= 0, element count in range). */
int32_t opc_check_dense(opc_call *c, const opc_tensor *t, const char *what, const char *name);
int64_t opc_numel(const opc_tensor *t); /* shape checked already by the dispatcher */
size_t opc_dtype_size(int32_t dtype);
const char *opc_dtype_name(int32_t dtype);
bool opc_same_shape(const opc_tensor *a, const opc_tensor *b);
/* "[2, 3, 4]" into buf */
const char *opc_shape_str(const opc_tensor *t, char *buf, size_t len);
const char *opc_dims_str(const int64_t *dims, int32_t rank, char *buf, size_t len);
/* Reads input `which`, a 1-D int64 (or, with allow_int32, int32) tensor of 1..OPC_MAX_RANK dims >= 0 whose product
 * fits OPC_MAX_ELEMS, into dims and *rank: the `shape` input of GatherGrad, GatherNDGrad and SliceGrad. `of` names
 * whose shape it is in the messages ("dX's shape"). */
int32_t opc_read_shape_input(opc_call *c, int32_t which, bool allow_int32, const char *of, int64_t *dims,
                             int32_t *rank);
/* Requires input i present; message names it. */
int32_t opc_require(opc_call *c, int32_t i);
/* Checks every present input among idx[0..n) has dtype dt (names the first mismatch). */
int32_t opc_check_dtypes(opc_call *c, int32_t dt, const int32_t *idx, int32_t n);
/* Checks dt is among the op's supported dtypes. */
int32_t opc_check_supported_dtype(opc_call *c, int32_t dt);
/* The first position i in [0, count) whose integer value (dtype OPC_INT32 or OPC_INT64) lies outside
 * [lo, hi) and is not `skip` (when has_skip), or -1 when there is none. Scanned in blocks, in parallel
 * (up to `threads`) for large counts; the position found is the first whatever the thread count. */
int64_t opc_first_outside(const void *data, int32_t dtype, int64_t count, int64_t lo, int64_t hi,
                          bool has_skip, int64_t skip, int32_t threads);
/* value i of an OPC_INT32 or OPC_INT64 tensor's data */
static inline int64_t opc_int_at(const void *data, int32_t dtype, int64_t i) {
    return dtype == OPC_INT64 ? ((const int64_t *)data)[i] : ((const int32_t *)data)[i];
}
void opc_shape_from(opc_shape *s, const opc_tensor *t);

/* checked int64 arithmetic: false on overflow */
static inline bool opc_mul_ok(int64_t a, int64_t b, int64_t *r) { return !__builtin_mul_overflow(a, b, r); }

/* threads ----------------------------------------------------------------------------------- */
/* Set by opc_set_force_split (thread-invariance checks): small inputs split across threads too. */
extern int32_t opc_force_split;
/* The least work (elements, FLOPs, ...) worth a thread: `grain` normally, 1 when splitting is forced.
 * Every "too small to parallelise" threshold goes through this. */
static inline int64_t opc_grain(int64_t grain) { return opc_force_split ? 1 : grain; }

/* Splits [0, n) into per-thread ranges whose boundaries are multiples of `align`. */
static inline void opc_split(int64_t n, int nth, int tid, int64_t align, int64_t *lo, int64_t *hi) {
    int64_t blocks = (n + align - 1) / align;
    int64_t per = blocks / nth, rem = blocks % nth;
    int64_t b0 = tid * per + (tid < rem ? tid : rem);
    int64_t b1 = b0 + per + (tid < rem ? 1 : 0);
    *lo = b0 * align < n ? b0 * align : n;
    *hi = b1 * align < n ? b1 * align : n;
}

/* memory ------------------------------------------------------------------------------------ */
/* Prefetch [p, p + bytes) for writing, a 64-byte line at a time, at most OPC_PREFETCH_MAX bytes (a
 * page). For outputs written in order that the hardware prefetcher fetches too late (it stops at page
 * boundaries, and stores wait for their lines): the pool and gather gradients, where each use was
 * measured. None of the three levels has PRFCHW, so the write hint compiles to prefetcht0, which is what
 * was measured: a line no other core holds arrives exclusive, and the store needs no further request.
 * Prefetching never faults, so the range may run past an array's end. */
#define OPC_PREFETCH_MAX 4096
static inline void opc_prefetch_w(const void *p, int64_t bytes) {
    if (bytes > OPC_PREFETCH_MAX) bytes = OPC_PREFETCH_MAX;
    for (int64_t l = 0; l < bytes; l += 64) __builtin_prefetch((const char *)p + l, 1);
}
/* The same for reading: inputs read in short segments, each on another page. */
static inline void opc_prefetch(const void *p, int64_t bytes) {
    if (bytes > OPC_PREFETCH_MAX) bytes = OPC_PREFETCH_MAX;
    for (int64_t l = 0; l < bytes; l += 64) __builtin_prefetch((const char *)p + l, 0);
}

/* 16-bit float conversions (exact widening; round-to-nearest-even narrowing, NaN kept NaN). */
static inline float opc_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline uint16_t opc_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t nan_bits = (u >> 16) | 0x0040u; /* quiet NaN, sign kept */
    uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    return (uint16_t)(((u & 0x7FFFFFFFu) > 0x7F800000u) ? nan_bits : rounded);
}
/* float16 <-> float32. GCC 12 converts _Float16 one element at a time (a libgcc call at the baseline level),
 * so the baseline and avx512 builds use plain integer and float operations it vectorises; the avx2 build
 * keeps F16C's one instruction per element, which its 8-lane integer form did not beat (SoftmaxGrad float16
 * 0.76x). Same bits either way: exact widening, round-to-nearest-even narrowing, NaN quieted with its top
 * payload bits (tests/openmp/test_half_conversion.py checks all 2^32 float32 and all 2^16 float16 inputs
 * against F16C). The integer form touches no float32 subnormal except an input that rounds to zero, so FTZ
 * and DAZ change nothing. */
#if defined(__F16C__) && !defined(__AVX512F__)
static inline float opc_f16_to_f32(uint16_t h) {
    _Float16 v;
    memcpy(&v, &h, 2);
    return (float)v;
}
static inline uint16_t opc_f32_to_f16(float f) {
    _Float16 v = (_Float16)f;
    uint16_t h;
    memcpy(&h, &v, 2);
    return h;
}
#else
static inline float opc_f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, mag = h & 0x7fffu;
    const float tiny = (float)(int32_t)(h & 0x3ffu) * 0x1p-24f; /* a subnormal half: mantissa * 2^-24, exact */
    uint32_t sub;
    memcpy(&sub, &tiny, 4);
    const uint32_t normal = (mag << 13) + ((uint32_t)(127 - 15) << 23); /* the exponent rebiased */
    const uint32_t special = (mag << 13) | 0x7f800000u | ((int32_t)mag > 0x7c00 ? 0x00400000u : 0u);
    /* signed compares (every magnitude is below 2^31): SSE has no unsigned vector compare */
    const uint32_t u = sign | ((int32_t)mag >= 0x7c00 ? special : (int32_t)mag >= 0x0400 ? normal : sub);
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline uint16_t opc_f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    const uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    /* below 2^-14 (a subnormal half): adding 0.5 rounds |f| to a multiple of 2^-24, the half's step */
    float mag, sum;
    memcpy(&mag, &a, 4);
    sum = mag + 0.5f;
    uint32_t sub;
    memcpy(&sub, &sum, 4);
    sub -= 0x3f000000u;
    const uint32_t r = a - ((uint32_t)(127 - 15) << 23); /* a normal half: rebiased, mantissa rounded to even */
    const uint32_t normal = (r + 0x0fffu + ((r >> 13) & 1u)) >> 13;
    const uint32_t nan = 0x7e00u | ((a >> 13) & 0x3ffu);
    /* from 65520 (halfway past the largest half, 65504) up: infinity */
    const int32_t m = (int32_t)a; /* signed compares, as in opc_f16_to_f32 */
    const uint32_t h = m > 0x7f800000 ? nan : m >= 0x477ff000 ? 0x7c00u : m >= 0x38800000 ? normal : sub;
    return (uint16_t)(sign | h);
}
#endif

/* double -> float16 rounded once (not twice, via float): round to odd at float precision (29 extra bits), then
 * float -> float16 (round to nearest even). Needs math.h (isfinite, nextafterf, INFINITY). */
static inline uint16_t opc_f64_to_f16(double x) {
    float f = (float)x;
    if ((double)f != x && isfinite(f)) {
        uint32_t u;
        memcpy(&u, &f, 4);
        if (!(u & 1u)) f = nextafterf(f, x > (double)f ? INFINITY : -INFINITY);
    }
    return opc_f32_to_f16(f);
}

#endif
