/* GatherGrad and GatherElementsGrad (com.microsoft): dY scattered back into a zero dX whose shape is
 * the `shape` input's values (int64, or int32). float32 and float64; float16 and bfloat16 summed in
 * float32 and rounded once. Indices int32 or int64, negatives in [-dim, -1] wrapped; every index is
 * checked before it is used, and an index outside [-dim, dim) fails the call.
 *
 * Thread invariance with duplicate indices, without atomics:
 * - GatherGrad: a serial counting pass lists, per row of the gathered axis, the indices that name it
 *   in increasing order (CSR). The output rows [outer x dim] are split among threads; each row sums
 *   its dY slices in that list's order in a row buffer and is stored once (non-temporal stores when dX
 *   is larger than the last-level cache, opc_stream_bytes: embedding tables are mostly zero rows).
 * - GatherElementsGrad: two elements of indices can only meet in dX when they differ in the axis
 *   coordinate alone, so each index "column" (all coordinates but the axis) is walked along the axis in
 *   order by one thread: dX's leading slabs (the dims before the axis) are split among threads and built
 *   whole in cache when small, else dX is zeroed and the columns are split.
 * Either way every dX element adds its terms in index order, at any thread count. */
#include <omp.h>
#include <stdlib.h>

#include "half_blocks.h"
#include "call.h"

#if defined(__SSE2__)
#include <immintrin.h>
#endif

/* work units (elements written plus elements added) per thread: less is not worth waking a thread for */
#define GG_GRAIN 262144

typedef struct {
    int32_t dtype, idx_dtype;
    int64_t outer, n, inner, m; /* dX [outer, n, inner]; dY [outer, m, inner]; m indices */
} gg_plan;

typedef struct {
    int32_t dtype, idx_dtype, rank, axis;
    int64_t n, x_total;               /* dX's axis length and element count */
    int64_t A, m, B;                  /* indices as [A, m, B] around the axis */
    int64_t idims[OPC_MAX_RANK];      /* indices' dims */
    int64_t xdims[OPC_MAX_RANK];      /* dX's dims */
    int64_t xstride[OPC_MAX_RANK];    /* dX's strides */
    bool same_tail;                   /* indices' dims after the axis equal dX's: column offset = b */
} ge_plan;

/* ---- shared validation ---------------------------------------------------------------------- */

static int32_t read_axis(opc_call *c, int32_t rank, int32_t *axis) {
    int64_t v;
    int32_t s = opc_attr_int(c, "axis", 0, &v);
    if (s) return s;
    if (v < -(int64_t)rank || v >= rank)
        return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "axis %lld is not in the valid range [%d, %d] for rank %d",
                        (long long)v, -(int)rank, (int)rank - 1, (int)rank);
    *axis = (int32_t)(v < 0 ? v + rank : v);
    return OPC_OK;
}

static int32_t check_types(opc_call *c, const opc_tensor *dy, const opc_tensor *idx) {
    int32_t s = opc_check_supported_dtype(c, dy->dtype);
    if (s) return s;
    if (idx->dtype != OPC_INT64 && idx->dtype != OPC_INT32)
        return opc_fail(c, OPC_ERR_UNSUPPORTED_DTYPE, "indices has dtype %s; int64 or int32 needed",
                        opc_dtype_name(idx->dtype));
    return OPC_OK;
}

static inline int64_t index_at(const void *idx, int32_t dt, int64_t i) { return opc_int_at(idx, dt, i); }

/* The one index rule of both ops: each of the `count` indices in [-n, n). OPC_OK, or the first offender. */
static int32_t check_indices(opc_call *c, const void *idx, int32_t dt, int64_t count, int64_t n) {
    int64_t at = opc_first_outside(idx, dt, count, -n, n, false, 0, c->threads);
    if (at < 0) return OPC_OK;
    return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "indices holds %lld at position %lld, outside [%lld, %lld]",
                    (long long)index_at(idx, dt, at), (long long)at, (long long)-n, (long long)n - 1);
}

/* An exec pass met an index out of range (the passes check every index as they count or scatter, so that
 * a call with outputs reads the indices once): the error check_indices gives a call without outputs. */
static int32_t bad_index(opc_call *c, const void *idx, int32_t dt, int64_t count, int64_t n) {
    int32_t s = check_indices(c, idx, dt, count, n);
    return s ? s : opc_fail(c, OPC_ERR_INTERNAL, "an index was out of range but none is on a second look");
}

/* ---- GatherGrad ----------------------------------------------------------------------------- */

int32_t opc_prep_gather_grad(opc_call *c, void *plan_v, opc_shape *outs) {
    gg_plan *p = plan_v;
    int32_t s;
    for (int32_t i = 0; i < 3; i++)
        if ((s = opc_require(c, i))) return s;
    const opc_tensor *idx = c->in[1], *dy = c->in[2];
    if ((s = check_types(c, dy, idx))) return s;
    int64_t dims[OPC_MAX_RANK];
    int32_t r = 0, axis = 0;
    if ((s = opc_read_shape_input(c, 0, true, "dX's shape", dims, &r)) || (s = read_axis(c, r, &axis))) return s;
    /* dY must be Gather's output: dims[:axis] + indices.shape + dims[axis+1:] */
    bool ok = dy->rank == r - 1 + idx->rank;
    for (int32_t i = 0; ok && i < dy->rank; i++) {
        int64_t want = i < axis ? dims[i] : i < axis + idx->rank ? idx->shape[i - axis] : dims[i - idx->rank + 1];
        ok = dy->shape[i] == want;
    }
    if (!ok) {
        char a[200], b[200], d[200];
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "dY has shape %s; Gather of shape %s by indices %s at axis %d gives another",
                        opc_shape_str(dy, a, sizeof a), opc_dims_str(dims, r, b, sizeof b), opc_shape_str(idx, d, sizeof d),
                        (int)axis);
    }
    p->dtype = dy->dtype;
    p->idx_dtype = idx->dtype;
    p->outer = p->inner = 1;
    for (int32_t i = 0; i < axis; i++) p->outer *= dims[i];
    for (int32_t i = axis + 1; i < r; i++) p->inner *= dims[i];
    p->n = dims[axis];
    p->m = opc_numel(idx);
    outs[0].dtype = dy->dtype;
    outs[0].rank = r;
    for (int32_t i = 0; i < r; i++) outs[0].shape[i] = dims[i];
    return OPC_OK;
}

int32_t opc_check_gather_grad(opc_call *c, const void *plan_v) {
    const gg_plan *p = plan_v;
    return check_indices(c, c->in[1]->data, p->idx_dtype, p->m, p->n);
}

/* row stores: plain or non-temporal (whole row built in cache first) */
#define GG_STORE(SFX, T, AT, CVT, STREAMV, LOADV, VW)                                                  \
    static inline void gg_store_##SFX(T *restrict dst, const AT *restrict acc, int64_t n, bool stream) { \
        int64_t i = 0;                                                                                  \
        if (stream && VW > 1) {                                                                         \
            for (; i < n && ((uintptr_t)(dst + i) & 15); i++) dst[i] = CVT(acc[i]);                     \
            for (; i + VW <= n; i += VW) STREAMV(dst + i, LOADV(acc + i));                              \
        }                                                                                               \
        for (; i < n; i++) dst[i] = CVT(acc[i]);                                                        \
    }
#define ID(v) (v)
#if defined(__SSE2__)
GG_STORE(f32, float, float, ID, _mm_stream_ps, _mm_loadu_ps, 4)
GG_STORE(f64, double, double, ID, _mm_stream_pd, _mm_loadu_pd, 2)
#define GG_FENCE() _mm_sfence()
#else
GG_STORE(f32, float, float, ID, (void), (void), 1)
GG_STORE(f64, double, double, ID, (void), (void), 1)
#define GG_FENCE()
#endif
static inline void gg_store_f16(uint16_t *restrict d, const float *restrict a, int64_t n, bool stream) {
    (void)stream;
    narrow_f16(a, d, n);
}
static inline void gg_store_bf16(uint16_t *restrict d, const float *restrict a, int64_t n, bool stream) {
    (void)stream;
    for (int64_t i = 0; i < n; i++) d[i] = opc_f32_to_bf16(a[i]);
}

/* Output rows [lo, hi) of [outer * n]: row (o, r) = sum over the listed indices j of dY[o, j, :], from 0 in
 * list order. Summed in a row buffer when the sums are wider than T or the row is streamed out; else in
 * place: the first term stored as 0 + g (the bits the buffer gives, -0 included), the rest added. */
#define GG_ROWS(SFX, T, AT, ADD, IN_PLACE)                                                              \
    static void gg_rows_##SFX(const T *restrict dy, T *restrict dx, const int64_t *restrict start,      \
                              const int64_t *restrict list, const gg_plan *p, AT *restrict acc,         \
                              int64_t lo, int64_t hi, bool stream) {                                    \
        const int64_t inner = p->inner;                                                                 \
        for (int64_t q = lo; q < hi; q++) {                                                             \
            const int64_t o = q / p->n, r = q % p->n;                                                   \
            const T *restrict g;                                                                        \
            if (!stream && q + 1 < hi) /* each row starts a new page, where the hardware prefetcher stops */ \
                opc_prefetch_w(dx + (q + 1) * inner, inner * (int64_t)sizeof(T));                       \
            if (!stream && start[r] == start[r + 1]) { /* no index names the row (most of a big table) */ \
                memset(dx + q * inner, 0, (size_t)inner * sizeof(T));                                   \
            } else if (!stream && IN_PLACE) {                                                           \
                T *restrict d = dx + q * inner;                                                         \
                g = dy + (o * p->m + list[start[r]]) * inner;                                           \
                for (int64_t k = 0; k < inner; k++) d[k] = (T)0 + g[k];                                 \
                for (int64_t e = start[r] + 1; e < start[r + 1]; e++) {                                 \
                    g = dy + (o * p->m + list[e]) * inner;                                              \
                    for (int64_t k = 0; k < inner; k++) d[k] += g[k];                                   \
                }                                                                                       \
            } else {                                                                                    \
                for (int64_t k = 0; k < inner; k++) acc[k] = 0;                                         \
                for (int64_t e = start[r]; e < start[r + 1]; e++)                                       \
                    ADD(acc, dy + (o * p->m + list[e]) * inner, inner);                                 \
                gg_store_##SFX(dx + q * inner, acc, inner, stream);                                     \
            }                                                                                           \
        }                                                                                               \
    }
/* acc += one dY slice, widened to the sums' type */
#define GG_ADD(SFX, T, AT, LD)                                                                          \
    static inline void gg_add_##SFX(AT *restrict acc, const T *restrict g, int64_t n) {                 \
        for (int64_t k = 0; k < n; k++) acc[k] += LD(g, k);                                             \
    }
#define LD_ID(g, k) (g)[k]
#define LD_F16(g, k) opc_f16_to_f32((g)[k])
#define LD_BF16(g, k) opc_bf16_to_f32((g)[k])
GG_ADD(f32, float, float, LD_ID)
GG_ADD(f64, double, double, LD_ID)
GG_ADD(bf16, uint16_t, float, LD_BF16)
/* float16 in blocks widened first (8 at a time with F16C, whose scalar form the avx2 build uses per element) */
static inline void gg_add_f16(float *restrict acc, const uint16_t *restrict g, int64_t n) {
    float w[HALF_BLOCK];
    for (int64_t k0 = 0; k0 < n; k0 += HALF_BLOCK) {
        const int64_t m = n - k0 < HALF_BLOCK ? n - k0 : HALF_BLOCK;
        widen_f16(g + k0, w, m);
        gg_add_f32(acc + k0, w, m);
    }
}
GG_ROWS(f32, float, float, gg_add_f32, true)
GG_ROWS(f64, double, double, gg_add_f64, true)
GG_ROWS(f16, uint16_t, float, gg_add_f16, false)
GG_ROWS(bf16, uint16_t, float, gg_add_bf16, false)

int32_t opc_exec_gather_grad(opc_call *c, const void *plan_v, opc_tensor *outs) {
    const gg_plan *p = plan_v;
    if (!outs[0].data) return OPC_OK;
    const void *idx = c->in[1]->data, *dy = c->in[2]->data;
    void *dx = outs[0].data;
    /* counting pass: start[r]..start[r+1] lists the positions j naming row r, increasing; checks every index */
    int64_t *start = calloc((size_t)p->n + 2, sizeof(int64_t));
    int64_t *list = malloc((size_t)(p->m > 0 ? p->m : 1) * sizeof(int64_t));
    if (!start || !list) {
        free(start), free(list);
        return opc_fail(c, OPC_ERR_OUT_OF_MEMORY, "no memory for the index lists (%lld rows, %lld indices)",
                        (long long)p->n, (long long)p->m);
    }
    const int64_t n = p->n;
    bool bad = false;
    for (int64_t j = 0; j < p->m; j++) {
        int64_t v = index_at(idx, p->idx_dtype, j);
        v += v < 0 ? n : 0;
        if ((uint64_t)v >= (uint64_t)n) {
            bad = true;
            break;
        }
        start[v + 2]++;
    }
    if (bad) {
        free(start), free(list);
        return bad_index(c, idx, p->idx_dtype, p->m, n);
    }
    for (int64_t r = 0; r < n; r++) start[r + 2] += start[r + 1];
    for (int64_t j = 0; j < p->m; j++) { /* start[r + 1] is the fill cursor of row r; it ends at row r + 1's start */
        int64_t v = index_at(idx, p->idx_dtype, j);
        v += v < 0 ? n : 0;
        list[start[v + 1]++] = j;
    }
    const int64_t rows = p->outer * n;
    const size_t esize = opc_dtype_size(p->dtype), asize = p->dtype == OPC_DOUBLE ? sizeof(double) : sizeof(float);
    const bool stream = rows * p->inner * (int64_t)esize >= opc_stream_bytes();
    int64_t work = rows * p->inner + p->outer * p->m * p->inner;
    int64_t want = work / opc_grain(GG_GRAIN) + 1;
    if (want > rows) want = rows;
    int nt = (int)(want < c->threads ? want : c->threads);
    if (nt < 1) nt = 1;
    int failed = 0;
    if (rows > 0 && p->inner > 0) {
#pragma omp parallel num_threads(nt) if (nt > 1) reduction(| : failed)
        {
            int64_t lo, hi;
            opc_split(rows, omp_get_num_threads(), omp_get_thread_num(), 1, &lo, &hi);
            void *acc = lo < hi ? malloc((size_t)p->inner * asize) : NULL;
            if (lo < hi && !acc) {
                failed = 1;
            } else if (lo < hi) {
                switch (p->dtype) {
                case OPC_FLOAT: gg_rows_f32(dy, dx, start, list, p, acc, lo, hi, stream); break;
                case OPC_DOUBLE: gg_rows_f64(dy, dx, start, list, p, acc, lo, hi, stream); break;
                case OPC_FLOAT16: gg_rows_f16(dy, dx, start, list, p, acc, lo, hi, stream); break;
                case OPC_BFLOAT16: gg_rows_bf16(dy, dx, start, list, p, acc, lo, hi, stream); break;
                default: break;
                }
                if (stream) GG_FENCE();
            }
            free(acc);
        }
    }
    free(start), free(list);
    if (failed) return opc_fail(c, OPC_ERR_OUT_OF_MEMORY, "no memory for a row buffer of %lld elements", (long long)p->inner);
    return OPC_OK;
}

/* ---- GatherElementsGrad --------------------------------------------------------------------- */

int32_t opc_prep_gather_elements_grad(opc_call *c, void *plan_v, opc_shape *outs) {
    ge_plan *p = plan_v;
    int32_t s;
    for (int32_t i = 0; i < 3; i++)
        if ((s = opc_require(c, i))) return s;
    const opc_tensor *dy = c->in[0], *idx = c->in[2];
    if ((s = check_types(c, dy, idx))) return s;
    int64_t dims[OPC_MAX_RANK];
    int32_t r = 0, axis = 0;
    if ((s = opc_read_shape_input(c, 1, true, "dX's shape", dims, &r)) || (s = read_axis(c, r, &axis))) return s;
    char a[200], b[200];
    if (idx->rank != r)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "indices has rank %d; the forward input (shape %s) has rank %d",
                        (int)idx->rank, opc_dims_str(dims, r, a, sizeof a), (int)r);
    if (!opc_same_shape(dy, idx))
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "dY shape %s differs from indices shape %s",
                        opc_shape_str(dy, a, sizeof a), opc_shape_str(idx, b, sizeof b));
    for (int32_t d = 0; d < r; d++)
        if (d != axis && idx->shape[d] > dims[d])
            return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "indices dim %d is %lld, larger than the forward input's %lld (shape %s)",
                            (int)d, (long long)idx->shape[d], (long long)dims[d], opc_dims_str(dims, r, a, sizeof a));
    p->dtype = dy->dtype;
    p->idx_dtype = idx->dtype;
    p->rank = r;
    p->axis = axis;
    p->n = dims[axis];
    p->A = p->B = 1;
    p->same_tail = true;
    int64_t stride = 1;
    for (int32_t d = r - 1; d >= 0; d--) {
        p->xstride[d] = stride;
        stride *= dims[d];
        p->idims[d] = idx->shape[d];
        p->xdims[d] = dims[d];
        if (d < axis) p->A *= idx->shape[d];
        if (d > axis) p->B *= idx->shape[d], p->same_tail = p->same_tail && idx->shape[d] == dims[d];
    }
    p->x_total = stride;
    p->m = idx->shape[axis];
    outs[0].dtype = dy->dtype;
    outs[0].rank = r;
    for (int32_t i = 0; i < r; i++) outs[0].shape[i] = dims[i];
    return OPC_OK;
}

int32_t opc_check_gather_elements_grad(opc_call *c, const void *plan_v) {
    const ge_plan *p = plan_v;
    return check_indices(c, c->in[2]->data, p->idx_dtype, opc_numel(c->in[2]), p->n);
}

/* dX offset of the leading (before-axis) coordinates of flat index a of indices' leading dims */
static int64_t ge_lead_offset(const ge_plan *p, int64_t a) {
    int64_t off = 0;
    for (int32_t d = p->axis - 1; d >= 0; d--) {
        off += (a % p->idims[d]) * p->xstride[d];
        a /= p->idims[d];
    }
    return off;
}

/* Steps along the axis whose index and dY segments are prefetched ahead: each step's segment lies on
 * another page (rows of indices and dY), where the hardware prefetcher stops; 8 % faster along axis 0. */
#define GE_AHEAD 8

/* The next slab (`ahead`, `lines` of it), prefetched for writing while the current one is scattered: line l
 * with the scatter's element l, rather than all lines in one burst, which left the fill buffers full and the
 * scatter's own loads waiting; 3-9 % faster along the last axis (8192 x 1024 X, 256 picks a row), 14-17 %
 * along a middle one (256 x 64 x 512). The last-axis loop spells the same loop out: through this function
 * GCC compiled it 15 % slower. */
static inline void ge_ahead(const char *ahead, int64_t lines, int64_t l0, int64_t l1) {
    for (int64_t l = l0; l < l1 && l < lines; l++) __builtin_prefetch(ahead + 64 * l, 1);
}

/* One leading index a of indices, columns [b0, b1): walks the axis in order, adding dY into base (dX at a's
 * leading offset, a slab buffer, or a tile buffer whose rows are xs apart and start at column c0). Returns 1
 * when an index is out of range (it is skipped, never used). */
#define GE_SCATTER(SFX, T, AT, LD, IT)                                                                  \
    static int ge_scatter_##SFX(const T *restrict dy, const IT *restrict ix, AT *restrict base,         \
                                const int64_t *restrict tail, const ge_plan *p, int64_t a, int64_t b0,  \
                                int64_t b1, int64_t xs, int64_t c0, const char *ahead, int64_t lines) { \
        int bad = 0;                                                                                    \
        const int64_t B = p->B, n = p->n;                                                               \
        if (B == 1) { /* the last axis: one element per step along it */                               \
            const IT *restrict ip = ix + a * p->m;                                                      \
            const T *restrict g = dy + a * p->m;                                                        \
            for (int64_t j = 0; j < p->m; j++) {                                                        \
                if (ahead && (j & 3) == 0)                                                              \
                    for (int64_t l = j; l < j + 4 && l < lines; l++) __builtin_prefetch(ahead + 64 * l, 1); \
                int64_t v = ip[j];                                                                      \
                v += v < 0 ? n : 0;                                                                     \
                if ((uint64_t)v >= (uint64_t)n) {                                                       \
                    bad = 1;                                                                            \
                    continue;                                                                           \
                }                                                                                       \
                base[v * xs] += LD(g, j);                                                               \
            }                                                                                           \
            if (ahead) ge_ahead(ahead, lines, (p->m + 3) / 4 * 4, lines); /* fewer elements than lines */ \
            return bad;                                                                                 \
        }                                                                                               \
        for (int64_t j = 0; j < p->m; j++) {                                                            \
            const IT *restrict ip = ix + (a * p->m + j) * B;                                            \
            const T *restrict g = dy + (a * p->m + j) * B;                                              \
            if (ahead) ge_ahead(ahead, lines, j * (b1 - b0), (j + 1) * (b1 - b0));                       \
            if (j + GE_AHEAD < p->m) { /* see GE_AHEAD */                                               \
                opc_prefetch((const char *)(ip + GE_AHEAD * B + b0), (b1 - b0) * (int64_t)sizeof(IT));  \
                opc_prefetch((const char *)(g + GE_AHEAD * B + b0), (b1 - b0) * (int64_t)sizeof(T));    \
            }                                                                                           \
            for (int64_t b = b0; b < b1; b++) {                                                         \
                int64_t v = ip[b];                                                                      \
                v += v < 0 ? n : 0;                                                                     \
                if ((uint64_t)v >= (uint64_t)n) {                                                       \
                    bad = 1;                                                                            \
                    continue;                                                                           \
                }                                                                                       \
                base[v * xs + (tail ? tail[b] : b) - c0] += LD(g, b);                                   \
            }                                                                                           \
        }                                                                                               \
        if (ahead) ge_ahead(ahead, lines, p->m * (b1 - b0), lines);                                     \
        return bad;                                                                                     \
    }
GE_SCATTER(f32_i64, float, float, LD_ID, int64_t)
GE_SCATTER(f32_i32, float, float, LD_ID, int32_t)
GE_SCATTER(f64_i64, double, double, LD_ID, int64_t)
GE_SCATTER(f64_i32, double, double, LD_ID, int32_t)
GE_SCATTER(f16_i64, uint16_t, float, LD_F16, int64_t)
GE_SCATTER(f16_i32, uint16_t, float, LD_F16, int32_t)

static int ge_scatter(const ge_plan *p, const void *dy, const void *ix, void *base, const int64_t *tail, int64_t a,
                      int64_t b0, int64_t b1, int64_t xs, int64_t c0, const char *ahead, int64_t lines) {
    const bool i64 = p->idx_dtype == OPC_INT64;
#define GE_ARGS dy, ix, base, tail, p, a, b0, b1, xs, c0, ahead, lines
    switch (p->dtype) {
    case OPC_FLOAT: return i64 ? ge_scatter_f32_i64(GE_ARGS) : ge_scatter_f32_i32(GE_ARGS);
    case OPC_DOUBLE: return i64 ? ge_scatter_f64_i64(GE_ARGS) : ge_scatter_f64_i32(GE_ARGS);
    case OPC_FLOAT16: return i64 ? ge_scatter_f16_i64(GE_ARGS) : ge_scatter_f16_i32(GE_ARGS);
    default: return 0;
    }
#undef GE_ARGS
}

/* The indices' leading index a whose columns land in dX's leading slab s, or -1 when indices (smaller than dX
 * before the axis) have none there. */
static int64_t ge_slab_to_a(const ge_plan *p, int64_t s) {
    int64_t a = 0, scale = 1;
    for (int32_t d = p->axis - 1; d >= 0; d--) {
        int64_t coord = s % p->xdims[d];
        s /= p->xdims[d];
        if (coord >= p->idims[d]) return -1;
        a += coord * scale;
        scale *= p->idims[d];
    }
    return a;
}

static void ge_store(const ge_plan *p, void *dst, const void *buf, int64_t n, bool stream) {
    switch (p->dtype) {
    case OPC_FLOAT: gg_store_f32(dst, buf, n, stream); break;
    case OPC_DOUBLE: gg_store_f64(dst, buf, n, stream); break;
    case OPC_FLOAT16: gg_store_f16(dst, buf, n, stream); break;
    default: break;
    }
}

/* dX's leading slabs (one value of the dims before the axis: n * stride(axis) elements) at most this many bytes
 * are built whole in a thread's buffer, in cache, and stored once; larger ones (axis 0 of a big X) are zeroed in
 * place, and the index columns split among threads instead. Either way every element sums in index order. */
#define GE_SLAB_BYTES ((int64_t)256 << 10)
/* Column mode's [n, tile] block of dX: the scatter into it is random along n, so it should stay in L2; but
 * each axis step reads a row segment of `tile` indices from another page, and short segments defeat the
 * prefetchers. 1 MiB (64 float columns at n = 4096) measured 1.5x faster than 256 KiB on an AVX-512
 * Xeon (2 MiB L2); wider blocks gained nothing more. The block is summed in a contiguous buffer and copied
 * out: in place, its rows lie dX's row stride apart, which with a power-of-2 width (4 KiB at 1024 floats)
 * maps the whole block onto 1/16 of L2's sets, evicting it as it is built; the buffer made the bench's
 * axis-0 workload 2.7x faster. */
#define GE_TILE_BYTES ((int64_t)1 << 20)

/* A tile's [n, t1 - t0] buffer of asize-byte sums (float32 for float16 data) into dX's rows (at `base`, the
 * leading offset), columns t0.. or tail[t0..]. */
static void ge_tile_out(const ge_plan *p, char *base, const char *buf, const int64_t *tail, int64_t t0, int64_t t1,
                        size_t esize, size_t asize) {
    const int64_t tw = t1 - t0, xs = p->xstride[p->axis];
    for (int64_t v = 0; v < p->n; v++) {
        char *row = base + v * xs * (int64_t)esize;
        const char *from = buf + v * tw * (int64_t)asize;
        if (p->dtype == OPC_FLOAT16 && !tail)
            gg_store_f16((uint16_t *)row + t0, (const float *)from, tw, false);
        else if (p->dtype == OPC_FLOAT16)
            for (int64_t b = t0; b < t1; b++) ((uint16_t *)row)[tail[b]] = opc_f32_to_f16(((const float *)from)[b - t0]);
        else if (!tail)
            memcpy(row + t0 * (int64_t)esize, from, (size_t)tw * esize);
        else if (esize == sizeof(double))
            for (int64_t b = t0; b < t1; b++) ((double *)row)[tail[b]] = ((const double *)from)[b - t0];
        else
            for (int64_t b = t0; b < t1; b++) ((float *)row)[tail[b]] = ((const float *)from)[b - t0];
    }
}

int32_t opc_exec_gather_elements_grad(opc_call *c, const void *plan_v, opc_tensor *outs) {
    const ge_plan *p = plan_v;
    if (!outs[0].data) return OPC_OK;
    const void *dy = c->in[0]->data, *ix = c->in[2]->data;
    void *dx = outs[0].data;
    const int64_t cols = p->A * p->B, total = p->x_total, slab = p->n * p->xstride[p->axis];
    const int64_t slabs = slab > 0 ? total / slab : 0;
    const size_t esize = opc_dtype_size(p->dtype), asize = p->dtype == OPC_DOUBLE ? sizeof(double) : sizeof(float);
    const bool wide = p->dtype == OPC_FLOAT16; /* summed in float32, rounded once */
    /* Column mode sums through a tile buffer (see GE_TILE_BYTES) unless one axis step is one element (the last
     * axis) or the axis is so long that even the narrowest tile outgrows the budget. float16 needs a buffer of
     * sums: the tile buffer when it fits, else whole slabs (a single slab of a big X along axis 0 was one
     * thread scattering into 16 MiB: 4.8x float32). */
    const bool tiles_fit = p->B > 1 && p->n * 16 * (int64_t)asize <= GE_TILE_BYTES;
    const bool by_slab = slab * (int64_t)asize <= GE_SLAB_BYTES || (wide && !tiles_fit);
    const bool stream = total * (int64_t)esize >= opc_stream_bytes();
    int64_t *tail = !p->same_tail && p->B > 0 ? malloc((size_t)p->B * sizeof(int64_t)) : NULL;
    if (!p->same_tail && p->B > 0 && !tail) return opc_fail(c, OPC_ERR_OUT_OF_MEMORY, "no memory for the column offsets");
    if (tail) /* dX offset of each trailing (after-axis) coordinate of indices */
        for (int64_t b = 0; b < p->B; b++) {
            int64_t off = 0, rest = b;
            for (int32_t d = p->rank - 1; d > p->axis; d--) {
                off += (rest % p->idims[d]) * p->xstride[d];
                rest /= p->idims[d];
            }
            tail[b] = off;
        }
    /* column mode: all columns of indices cover dX's (then their dims are equal, so same_tail too), and
     * the index columns walked together, `tile` at a time, keep their [n, tile] block of dX in cache */
    const int64_t xs = p->xstride[p->axis];
    const bool covers = p->n > 0 && cols == total / p->n;
    int64_t tile = p->n > 0 ? (GE_TILE_BYTES / (p->n * (int64_t)asize)) & ~(int64_t)15 : 16;
    if (tile < 16) tile = 16;
    int64_t work = total + 2 * cols * p->m;
    int64_t want = work / opc_grain(GG_GRAIN) + 1, most = by_slab ? slabs : (cols > total ? cols : total);
    if (want > most) want = most;
    int nt = (int)(want < c->threads ? want : c->threads);
    if (nt < 1) nt = 1;
    int bad = 0;
    if (by_slab && slabs == 0) { /* dX is empty: indices name an empty axis, or there are none */
        bad = cols * p->m > 0;
    } else if (by_slab) {
#pragma omp parallel num_threads(nt) if (nt > 1) reduction(| : bad)
        {
            int64_t lo, hi;
            opc_split(slabs, omp_get_num_threads(), omp_get_thread_num(), 1, &lo, &hi);
            /* a slab goes through a buffer when it is summed wider than it is stored, or streamed out */
            const bool in_place = !wide && !stream;
            /* lines of the next slab prefetched while a slab is scattered in place: at most OPC_PREFETCH_MAX */
            const int64_t slab_bytes = slab * (int64_t)esize;
            const int64_t lines = ((slab_bytes < OPC_PREFETCH_MAX ? slab_bytes : OPC_PREFETCH_MAX) + 63) / 64;
            void *buf = lo < hi && !in_place ? malloc((size_t)slab * asize) : NULL;
            if (lo < hi && !in_place && !buf) {
                bad = 2;
            } else {
                for (int64_t s = lo; s < hi; s++) {
                    void *out = (char *)dx + s * slab_bytes, *sums = in_place ? out : buf;
                    /* the next slab, likely on another page (see ge_ahead) */
                    const char *next = in_place && s + 1 < hi ? (const char *)out + slab_bytes : NULL;
                    memset(sums, 0, (size_t)slab * asize);
                    int64_t a = ge_slab_to_a(p, s);
                    if (a >= 0) bad |= ge_scatter(p, dy, ix, sums, tail, a, 0, p->B, p->xstride[p->axis], 0, next, lines);
                    else if (next) ge_ahead(next, lines, 0, lines);
                    if (!in_place) ge_store(p, out, buf, slab, stream);
                }
                if (stream) GG_FENCE();
            }
            free(buf);
        }
    } else {
#pragma omp parallel num_threads(nt) if (nt > 1) reduction(| : bad)
        {
            const int th = omp_get_thread_num(), nth = omp_get_num_threads();
            int64_t lo, hi;
            if (!covers) { /* dX columns no index reaches stay zero: zero everything first */
                opc_split(total, nth, th, 16, &lo, &hi);
                if (hi > lo) memset((char *)dx + lo * (int64_t)esize, 0, (size_t)(hi - lo) * esize);
#pragma omp barrier
            }
            opc_split(cols, nth, th, 16, &lo, &hi);
            char *tb = tiles_fit && lo < hi ? malloc((size_t)(p->n * tile) * asize) : NULL;
            if (tiles_fit && lo < hi && !tb) lo = hi, bad = 2;
            for (int64_t a = lo / (p->B > 0 ? p->B : 1); lo < hi && a * p->B < hi; a++) {
                const int64_t b0 = a * p->B < lo ? lo - a * p->B : 0, b1 = (a + 1) * p->B > hi ? hi - a * p->B : p->B;
                char *base = (char *)dx + ge_lead_offset(p, a) * (int64_t)esize;
                for (int64_t t0 = b0; t0 < b1; t0 += tile) { /* the tile's [n, tile] block of dX stays in cache */
                    const int64_t t1 = t0 + tile < b1 ? t0 + tile : b1;
                    if (tb) {
                        memset(tb, 0, (size_t)(p->n * (t1 - t0)) * asize);
                        bad |= ge_scatter(p, dy, ix, tb, NULL, a, t0, t1, t1 - t0, t0, NULL, 0);
                        ge_tile_out(p, base, tb, tail, t0, t1, esize, asize);
                        continue;
                    }
                    if (covers) /* every dX column is an index column (same dims): zero the tile's block here */
                        for (int64_t v = 0; v < p->n; v++)
                            memset(base + (v * xs + t0) * (int64_t)esize, 0, (size_t)(t1 - t0) * esize);
                    bad |= ge_scatter(p, dy, ix, base, tail, a, t0, t1, xs, 0, NULL, 0);
                }
            }
            free(tb);
        }
    }
    free(tail);
    if (bad & 2) return opc_fail(c, OPC_ERR_OUT_OF_MEMORY, "no memory for a slab or tile buffer");
    if (bad) return bad_index(c, ix, p->idx_dtype, cols * p->m, p->n);
    return OPC_OK;
}

/* ---- registry entries (listed in ops.def; held against the specs by tests/openmp/test_descriptors.py) ---- */

/* shape int64 (or int32) values are dX's shape; indices int32 or int64 */
static const char *const GG_IN[] = {"shape", "indices", "dY"};
static const char *const GEG_IN[] = {"dY", "shape", "indices"};
static const uint8_t GG_OPT[] = {0, 0, 0};
static const char *const GG_OUT[] = {"dX"};
static const char *const GG_ATTR[] = {"axis"};
static const int32_t DT_GG[] = {OPC_FLOAT, OPC_DOUBLE, OPC_FLOAT16, OPC_BFLOAT16};
static const int32_t DT_GEG[] = {OPC_FLOAT, OPC_DOUBLE, OPC_FLOAT16};

OPC_DEFINE_OP(GatherGrad) = {
    .desc = {.name = "GatherGrad", OPC_INPUTS(GG_IN, GG_OPT), OPC_OUTPUTS(GG_OUT), OPC_DTYPES(DT_GG),
             OPC_ATTRS(GG_ATTR),
             .notes = "dX = zeros(shape values); dX[.., indices[j], ..] += dY[.., j, ..] along axis (default 0); "
                      "indices in [-dim, dim) checked; 16-bit summed in float32"},
    .prepare = opc_prep_gather_grad, .exec = opc_exec_gather_grad, .check = opc_check_gather_grad};

OPC_DEFINE_OP(GatherElementsGrad) = {
    .desc = {.name = "GatherElementsGrad", OPC_INPUTS(GEG_IN, GG_OPT), OPC_OUTPUTS(GG_OUT), OPC_DTYPES(DT_GEG),
             OPC_ATTRS(GG_ATTR),
             .notes = "dX = zeros(shape values); dX[p with p[axis] = indices[p]] += dY[p]; indices in [-dim, dim) "
                      "checked; float16 summed in float32"},
    .prepare = opc_prep_gather_elements_grad, .exec = opc_exec_gather_elements_grad,
    .check = opc_check_gather_elements_grad};
