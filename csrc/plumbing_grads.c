/* The gradient graph's plumbing (com.microsoft): GatherNDGrad, SliceGrad, DivGrad and ReduceSumTraining.
 * float32, float64 and float16 (float16 summed in double and rounded once; SliceGrad only copies, so it takes
 * every 2-byte, 4-byte and 8-byte float type). Every index and axis value is checked before it is used, and
 * a malformed call fails with a status and a message.
 *
 * Thread invariance (bitwise, at any thread count), without atomics:
 * - GatherNDGrad: the tuples are sorted by (output row, position) once; the output is zeroed in parallel and
 *   its rows are split among threads at row boundaries of the sorted list, so each output row sums its slices
 *   in tuple order on one thread.
 * - SliceGrad: each dX row is written by one thread (zeros, then dY's elements copied): no arithmetic.
 * - DivGrad and ReduceSumTraining share one reduction (red_*): a contiguous input summed over a set of axes,
 *   in double. The summed sequence of each output element is cut into blocks whose size depends on the shapes
 *   only; blocks are summed in parallel in index order and their partials added in block order. DivGrad
 *   forms dY / B and -dY * A / B^2 in double at the broadcast shape (directly into the output where the input
 *   was not broadcast) and reduces them with the same code. */
#include <omp.h>
#include <stdlib.h>

#include "half_blocks.h"
#include "call.h"

#define PG_GRAIN 65536 /* elements per thread below which a thread is not worth waking */

static int pg_threads(const opc_call *c, int64_t work) {
    int64_t want = work / opc_grain(PG_GRAIN) + 1;
    return (int)(want < c->threads ? want : c->threads);
}

static inline double pg_load(const void *p, int32_t dt, int64_t i) {
    switch (dt) {
    case OPC_FLOAT: return ((const float *)p)[i];
    case OPC_DOUBLE: return ((const double *)p)[i];
    case OPC_FLOAT16: return opc_f16_to_f32(((const uint16_t *)p)[i]);
    default: return 0.0;
    }
}
static inline void pg_store(void *p, int32_t dt, int64_t i, double v) {
    switch (dt) {
    case OPC_FLOAT: ((float *)p)[i] = (float)v; break;
    case OPC_DOUBLE: ((double *)p)[i] = v; break;
    case OPC_FLOAT16: ((uint16_t *)p)[i] = opc_f32_to_f16((float)v); break;
    default: break;
    }
}

/* ==== the shared reduction: out[kept] = sum over the reduced axes of in (contiguous), in double ==== */

typedef struct {
    int32_t m;                  /* coalesced axes (size-1 axes dropped) */
    int64_t dim[OPC_MAX_RANK];  /* their lengths */
    bool red[OPC_MAX_RANK];     /* reduced or kept */
    int64_t total, n_out, n_red; /* input elements, output elements, terms per output element */
} red_plan;

/* dims[r] of the input, reduce[r] per axis (an axis of length 1 is neither: dropped). */
static void red_build(red_plan *p, const int64_t *dims, const bool *reduce, int32_t r) {
    p->m = 0;
    p->total = p->n_out = p->n_red = 1;
    for (int32_t i = 0; i < r; i++) {
        p->total *= dims[i];
        if (reduce[i]) p->n_red *= dims[i];
        else p->n_out *= dims[i];
        if (dims[i] == 1) continue;
        if (p->m > 0 && p->red[p->m - 1] == reduce[i]) {
            p->dim[p->m - 1] *= dims[i];
        } else {
            p->dim[p->m] = dims[i];
            p->red[p->m] = reduce[i];
            p->m++;
        }
    }
}

/* Input offset of (kept index o, reduced index s): o and s decoded over the kept and reduced axes, last fastest. */
static inline int64_t red_offset(const red_plan *p, int32_t m, int64_t o, int64_t s) {
    int64_t off = 0, stride = 1;
    for (int32_t i = m - 1; i >= 0; i--) {
        int64_t coord;
        if (p->red[i]) {
            coord = s % p->dim[i];
            s /= p->dim[i];
        } else {
            coord = o % p->dim[i];
            o /= p->dim[i];
        }
        off += coord * stride;
        stride *= p->dim[i];
    }
    return off;
}

#define RED_BLOCK ((int64_t)16384) /* terms (or rows of terms) per block: from the shapes only */
#define RED_COLS 1024             /* columns per chunk (whole pages of a float32 row) when the kept last axis is long */

/* Sums input src (dtype sdt: a float type, or OPC_DOUBLE for DivGrad's buffer) into dst (dtype ddt). */
static int32_t red_run(opc_call *c, const red_plan *p, const void *src, int32_t sdt, void *dst, int32_t ddt) {
    if (p->n_out == 0) return OPC_OK;
    if (p->total == 0 || p->n_red == 0) { /* nothing to add: zeros */
        for (int64_t o = 0; o < p->n_out; o++) pg_store(dst, ddt, o, 0.0);
        return OPC_OK;
    }
    const bool inner_kept = p->m > 0 && !p->red[p->m - 1];
    if (p->m == 0 || p->n_red == 1) { /* nothing reduced: a conversion */
        int nt = pg_threads(c, p->total);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
        for (int64_t i = 0; i < p->total; i++) pg_store(dst, ddt, i, pg_load(src, sdt, i));
        return OPC_OK;
    }
    if (inner_kept) {
        /* rows of L kept elements: out row o (of n_out / L) = sum over reduced rows s, in blocks of rb rows */
        const int64_t L = p->dim[p->m - 1], rows_out = p->n_out / L, R = p->n_red;
        if (L >= 512) {
            /* long rows (a bias gradient's hidden axis): columns in chunks of RED_COLS, each chunk summed over every
             * reduced row in order by one thread, stored once: no partial sums */
            const int64_t nc = (L + RED_COLS - 1) / RED_COLS, items = rows_out * nc;
            int nt = pg_threads(c, p->total);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
            for (int64_t it = 0; it < items; it++) {
                const int64_t o = it / nc, c0 = (it % nc) * RED_COLS, w = c0 + RED_COLS < L ? RED_COLS : L - c0;
                double acc[RED_COLS];
                for (int64_t k = 0; k < w; k++) acc[k] = 0.0;
                for (int64_t s = 0; s < R; s++) {
                    const int64_t off = red_offset(p, p->m - 1, o, s) * L + c0;
                    if (sdt == OPC_DOUBLE)
                        for (int64_t k = 0; k < w; k++) acc[k] += ((const double *)src)[off + k];
                    else if (sdt == OPC_FLOAT)
                        for (int64_t k = 0; k < w; k++) acc[k] += (double)((const float *)src)[off + k];
                    else
                        for (int64_t k = 0; k < w; k++) acc[k] += pg_load(src, sdt, off + k);
                }
                for (int64_t k = 0; k < w; k++) pg_store(dst, ddt, o * L + c0 + k, acc[k]);
            }
            return OPC_OK;
        }
        int64_t rb = RED_BLOCK * 4 / L;
        if (rb < 1) rb = 1;
        const int64_t nb = (R + rb - 1) / rb, items = rows_out * nb;
        double *part = malloc((size_t)(items * L) * sizeof(double));
        if (!part) return opc_fail(c, OPC_ERR_OUT_OF_MEMORY, "no memory for %lld partial sums", (long long)(items * L));
        int nt = pg_threads(c, p->total);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
        for (int64_t it = 0; it < items; it++) {
            const int64_t o = it / nb, b = it % nb;
            double *acc = part + it * L;
            for (int64_t k = 0; k < L; k++) acc[k] = 0.0;
            const int64_t s1 = (b + 1) * rb < R ? (b + 1) * rb : R;
            for (int64_t s = b * rb; s < s1; s++) {
                /* the row's offset: (o, s) over the axes before the last, times L */
                const int64_t off = red_offset(p, p->m - 1, o, s) * L;
                if (sdt == OPC_DOUBLE)
                    for (int64_t k = 0; k < L; k++) acc[k] += ((const double *)src)[off + k];
                else if (sdt == OPC_FLOAT)
                    for (int64_t k = 0; k < L; k++) acc[k] += (double)((const float *)src)[off + k];
                else
                    for (int64_t k = 0; k < L; k++) acc[k] += pg_load(src, sdt, off + k);
            }
        }
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
        for (int64_t i = 0; i < p->n_out; i++) {
            const int64_t o = i / L, k = i % L;
            double v = 0.0;
            for (int64_t b = 0; b < nb; b++) v += part[(o * nb + b) * L + k];
            pg_store(dst, ddt, i, v);
        }
        free(part);
        return OPC_OK;
    }
    /* the last axis reduced, of length L: each output element sums n_red terms, runs of L contiguous; the
     * sequence of n_red terms cut into blocks of RED_BLOCK */
    const int64_t L = p->dim[p->m - 1], N = p->n_red, nb = (N + RED_BLOCK - 1) / RED_BLOCK, items = p->n_out * nb;
    double *part = malloc((size_t)items * sizeof(double));
    if (!part) return opc_fail(c, OPC_ERR_OUT_OF_MEMORY, "no memory for %lld partial sums", (long long)items);
    int nt = pg_threads(c, p->total);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int64_t it = 0; it < items; it++) {
        const int64_t o = it / nb, b = it % nb;
        const int64_t s0 = b * RED_BLOCK, s1 = s0 + RED_BLOCK < N ? s0 + RED_BLOCK : N;
        double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0}, v = 0.0; /* 8 interleaved lanes, added in lane order */
        for (int64_t s = s0; s < s1;) {
            const int64_t run_end = (s / L + 1) * L < s1 ? (s / L + 1) * L : s1;
            const int64_t off = red_offset(p, p->m, o, s);
            const int64_t n = run_end - s;
            int64_t k = 0;
            if (sdt == OPC_DOUBLE) {
                const double *x = (const double *)src + off;
                for (; k + 8 <= n; k += 8)
                    for (int l = 0; l < 8; l++) lane[l] += x[k + l];
                for (; k < n; k++) v += x[k];
            } else if (sdt == OPC_FLOAT) {
                const float *x = (const float *)src + off;
                for (; k + 8 <= n; k += 8)
                    for (int l = 0; l < 8; l++) lane[l] += (double)x[k + l];
                for (; k < n; k++) v += (double)x[k];
            } else {
                for (; k < n; k++) v += pg_load(src, sdt, off + k);
            }
            s = run_end;
        }
        for (int l = 0; l < 8; l++) v += lane[l];
        part[it] = v;
    }
    for (int64_t o = 0; o < p->n_out; o++) {
        double v = 0.0;
        for (int64_t b = 0; b < nb; b++) v += part[o * nb + b];
        pg_store(dst, ddt, o, v);
    }
    free(part);
    return OPC_OK;
}

/* ==== ReduceSumTraining ====================================================================== */

typedef struct {
    int32_t dtype, rank;
    int64_t dims[OPC_MAX_RANK];
    bool reduce[OPC_MAX_RANK];
} rst_plan;

int32_t opc_prep_reduce_sum_training(opc_call *c, void *plan_v, opc_shape *outs) {
    rst_plan *p = plan_v;
    int32_t s;
    if ((s = opc_require(c, 0)) || (s = opc_require(c, 1))) return s;
    const opc_tensor *x = c->in[0], *ax = c->in[1];
    if ((s = opc_check_supported_dtype(c, x->dtype))) return s;
    char a[200];
    if (ax->dtype != OPC_INT64)
        return opc_fail(c, OPC_ERR_UNSUPPORTED_DTYPE, "axes has dtype %s; int64 needed", opc_dtype_name(ax->dtype));
    if (ax->rank != 1)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "axes must be 1-D, got shape %s", opc_shape_str(ax, a, sizeof a));
    int64_t keep, noop;
    if ((s = opc_attr_int(c, "keepdims", 1, &keep)) || (s = opc_attr_int(c, "noop_with_empty_axes", 0, &noop))) return s;
    if (keep != 0 && keep != 1)
        return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "keepdims %lld must be 0 or 1", (long long)keep);
    if (noop != 0 && noop != 1)
        return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "noop_with_empty_axes %lld must be 0 or 1", (long long)noop);
    const int32_t r = x->rank;
    const int64_t n = ax->shape[0];
    if (n > 0 && !ax->data) return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "axes has no data");
    for (int32_t i = 0; i < r; i++) p->reduce[i] = n == 0 && !noop;
    for (int64_t j = 0; j < n; j++) {
        const int64_t v = ((const int64_t *)ax->data)[j];
        if (v < -(int64_t)r || v >= r)
            return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "axes holds %lld, outside [%d, %d] for data of rank %d",
                            (long long)v, -(int)r, (int)r - 1, (int)r);
        const int64_t w = v < 0 ? v + r : v;
        if (p->reduce[w])
            return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "axes names axis %lld twice", (long long)w);
        p->reduce[w] = true;
    }
    p->dtype = x->dtype;
    p->rank = r;
    outs[0].dtype = x->dtype;
    outs[0].rank = 0;
    for (int32_t i = 0; i < r; i++) {
        p->dims[i] = x->shape[i];
        if (!p->reduce[i]) outs[0].shape[outs[0].rank++] = x->shape[i];
        else if (keep) outs[0].shape[outs[0].rank++] = 1;
    }
    return OPC_OK;
}

int32_t opc_exec_reduce_sum_training(opc_call *c, const void *plan_v, opc_tensor *outs) {
    const rst_plan *p = plan_v;
    if (!outs[0].data) return OPC_OK;
    red_plan rp;
    red_build(&rp, p->dims, p->reduce, p->rank);
    return red_run(c, &rp, c->in[0]->data, p->dtype, outs[0].data, p->dtype);
}

/* ==== DivGrad ================================================================================= */

typedef struct {
    int32_t dtype, rank;
    int64_t y[OPC_MAX_RANK], a[OPC_MAX_RANK], b[OPC_MAX_RANK]; /* dY's dims, A's and B's padded to its rank */
    int64_t sa[OPC_MAX_RANK], sb[OPC_MAX_RANK];                /* A's and B's strides over dY's axes (0: broadcast) */
    int64_t total;
} dg_plan;

int32_t opc_prep_div_grad(opc_call *c, void *plan_v, opc_shape *outs) {
    dg_plan *p = plan_v;
    int32_t s;
    for (int32_t i = 0; i < 3; i++)
        if ((s = opc_require(c, i))) return s;
    const opc_tensor *dy = c->in[0], *A = c->in[1], *B = c->in[2];
    if ((s = opc_check_supported_dtype(c, dy->dtype))) return s;
    const int32_t idx[] = {0, 1, 2};
    if ((s = opc_check_dtypes(c, dy->dtype, idx, 3))) return s;
    char x1[200], x2[200], x3[200];
    const int32_t r = A->rank > B->rank ? A->rank : B->rank;
    bool ok = dy->rank == r;
    int64_t total = 1;
    for (int32_t i = 0; i < r; i++) {
        const int64_t da = i - (r - A->rank) >= 0 ? A->shape[i - (r - A->rank)] : 1;
        const int64_t db = i - (r - B->rank) >= 0 ? B->shape[i - (r - B->rank)] : 1;
        if (da != db && da != 1 && db != 1)
            return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "A %s and B %s do not broadcast",
                            opc_shape_str(A, x1, sizeof x1), opc_shape_str(B, x2, sizeof x2));
        const int64_t dm = da == 1 ? db : da;
        ok = ok && dy->shape[i] == dm;
        p->a[i] = da;
        p->b[i] = db;
        p->y[i] = dm;
        total *= dm;
    }
    if (!ok)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "dY has shape %s; A %s and B %s broadcast to another",
                        opc_shape_str(dy, x3, sizeof x3), opc_shape_str(A, x1, sizeof x1), opc_shape_str(B, x2, sizeof x2));
    int64_t sa = 1, sb = 1;
    for (int32_t i = r - 1; i >= 0; i--) {
        p->sa[i] = p->a[i] == 1 ? 0 : sa;
        p->sb[i] = p->b[i] == 1 ? 0 : sb;
        sa *= p->a[i];
        sb *= p->b[i];
    }
    p->dtype = dy->dtype;
    p->rank = r;
    p->total = total;
    opc_shape_from(&outs[0], A);
    opc_shape_from(&outs[1], B);
    return OPC_OK;
}

/* g = dY / B (which 0) or -dY * A / B^2 (which 1) over flat dY indices [lo, hi): stored into dst (dtype ddt) at i,
 * or, with dst NULL, summed in double (in index order, 8 interleaved lanes added in lane order at the end) and
 * returned. */
#define DG_ROW(T, DT, STORE)                                                                                   \
    do {                                                                                                      \
        const T *g = (const T *)dy + i, *av = (const T *)A + ia, *bv = (const T *)B + ib;                     \
        if (!dst) {                                                                                           \
            int64_t k = 0;                                                                                    \
            for (; k + 8 <= n; k += 8)                                                                        \
                for (int l = 0; l < 8; l++) {                                                                 \
                    const double bb = bv[(k + l) * lb];                                                       \
                    lane[l] += which == 0 ? (double)g[k + l] / bb : -(double)g[k + l] * (double)av[(k + l) * la] / (bb * bb); \
                }                                                                                             \
            for (; k < n; k++) {                                                                              \
                const double bb = bv[k * lb];                                                                 \
                tail += which == 0 ? (double)g[k] / bb : -(double)g[k] * (double)av[k * la] / (bb * bb);      \
            }                                                                                                 \
        } else if (which == 0) {                                                                              \
            DT *d = (DT *)dst + i;                                                                            \
            for (int64_t k = 0; k < n; k++) d[k] = STORE((double)g[k] / (double)bv[k * lb]);                  \
        } else {                                                                                              \
            DT *d = (DT *)dst + i;                                                                            \
            for (int64_t k = 0; k < n; k++) {                                                                 \
                const double bb = bv[k * lb];                                                                 \
                d[k] = STORE(-(double)g[k] * (double)av[k * la] / (bb * bb));                                 \
            }                                                                                                 \
        }                                                                                                     \
    } while (0)
#define AS_F(v) ((float)(v))
#define AS_D(v) (v)

static double dg_range(const dg_plan *p, const opc_tensor *const *in, int which, void *dst, int32_t ddt, int64_t lo,
                       int64_t hi) {
    const int32_t r = p->rank, dt = p->dtype;
    const void *dy = in[0]->data, *A = in[1]->data, *B = in[2]->data;
    double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0}, tail = 0.0;
    int64_t coord[OPC_MAX_RANK], rest = lo, ia = 0, ib = 0;
    for (int32_t i = r - 1; i >= 0; i--) {
        coord[i] = rest % p->y[i];
        rest /= p->y[i];
        ia += coord[i] * p->sa[i];
        ib += coord[i] * p->sb[i];
    }
    const int64_t L = r > 0 ? p->y[r - 1] : 1, la = r > 0 ? p->sa[r - 1] : 0, lb = r > 0 ? p->sb[r - 1] : 0;
    for (int64_t i = lo; i < hi;) {
        const int64_t c0 = r > 0 ? coord[r - 1] : 0;
        int64_t n = L - c0 < hi - i ? L - c0 : hi - i;
        if (dt == OPC_FLOAT && (!dst || ddt == OPC_FLOAT)) DG_ROW(float, float, AS_F);
        else if (dt == OPC_FLOAT && ddt == OPC_DOUBLE) DG_ROW(float, double, AS_D);
        else if (dt == OPC_DOUBLE) DG_ROW(double, double, AS_D);
        else {
            for (int64_t k = 0; k < n; k++) {
                const double g = pg_load(dy, dt, i + k), bb = pg_load(B, dt, ib + k * lb);
                const double v = which == 0 ? g / bb : -g * pg_load(A, dt, ia + k * la) / (bb * bb);
                if (dst) pg_store(dst, ddt, i + k, v);
                else tail += v;
            }
        }
        i += n;
        /* advance the coordinates by n (to the next row start, or the end) */
        ia += n * la;
        ib += n * lb;
        if (r == 0) break;
        coord[r - 1] += n;
        for (int32_t d = r - 1; d > 0 && coord[d] == p->y[d]; d--) {
            ia -= p->y[d] * p->sa[d];
            ib -= p->y[d] * p->sb[d];
            coord[d] = 0;
            coord[d - 1]++;
            ia += p->sa[d - 1];
            ib += p->sb[d - 1];
        }
    }
    double v = 0.0;
    for (int l = 0; l < 8; l++) v += lane[l];
    return v + tail;
}

int32_t opc_exec_div_grad(opc_call *c, const void *plan_v, opc_tensor *outs) {
    const dg_plan *p = plan_v;
    const opc_tensor *const *in = c->in;
    double *buf = NULL;
    int32_t s = OPC_OK;
    for (int which = 0; which < 2 && s == OPC_OK; which++) {
        if (!outs[which].data) continue;
        const int64_t *own = which == 0 ? p->a : p->b;
        bool reduce[OPC_MAX_RANK], any = false;
        for (int32_t i = 0; i < p->rank; i++) {
            reduce[i] = own[i] == 1 && p->y[i] != 1;
            any = any || reduce[i];
        }
        const int nt = pg_threads(c, p->total);
        void *dst = outs[which].data;
        int32_t ddt = p->dtype;
        int64_t own_total = 1;
        for (int32_t i = 0; i < p->rank; i++) own_total *= own[i];
        if (any && own_total == 1) { /* one sum (a scalar input's gradient): on the fly, in fixed blocks */
            const int64_t nb = (p->total + RED_BLOCK - 1) / RED_BLOCK;
            double *part = malloc((size_t)(nb > 0 ? nb : 1) * sizeof(double));
            if (!part) {
                free(buf);
                return opc_fail(c, OPC_ERR_OUT_OF_MEMORY, "no memory for %lld partial sums", (long long)nb);
            }
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
            for (int64_t b = 0; b < nb; b++) {
                const int64_t lo = b * RED_BLOCK, hi = lo + RED_BLOCK < p->total ? lo + RED_BLOCK : p->total;
                part[b] = dg_range(p, in, which, NULL, OPC_DOUBLE, lo, hi);
            }
            double v = 0.0;
            for (int64_t b = 0; b < nb; b++) v += part[b];
            free(part);
            pg_store(dst, p->dtype, 0, v);
            continue;
        }
        if (any) {
            if (!buf) buf = malloc((size_t)(p->total > 0 ? p->total : 1) * sizeof(double));
            if (!buf) return opc_fail(c, OPC_ERR_OUT_OF_MEMORY, "no memory for %lld gradient terms", (long long)p->total);
            dst = buf;
            ddt = OPC_DOUBLE;
        }
#pragma omp parallel num_threads(nt) if (nt > 1)
        {
            int64_t lo, hi;
            opc_split(p->total, omp_get_num_threads(), omp_get_thread_num(), 64, &lo, &hi);
            if (lo < hi) dg_range(p, in, which, dst, ddt, lo, hi);
        }
        if (any) {
            red_plan rp;
            red_build(&rp, p->y, reduce, p->rank);
            s = red_run(c, &rp, buf, OPC_DOUBLE, outs[which].data, p->dtype);
        }
    }
    free(buf);
    return s;
}

/* ==== SliceGrad =============================================================================== */

typedef struct {
    int32_t dtype, rank;
    int64_t dims[OPC_MAX_RANK];  /* dX */
    int64_t start[OPC_MAX_RANK], step[OPC_MAX_RANK], count[OPC_MAX_RANK]; /* per axis (unsliced: 0, 1, dim) */
} sg_plan;

static int32_t sg_ints(opc_call *c, int32_t which, const char *name, int32_t dt, int64_t n, int64_t *out) {
    const opc_tensor *t = c->in[which];
    char a[200];
    if (t->dtype != dt)
        return opc_fail(c, OPC_ERR_UNSUPPORTED_DTYPE, "%s has dtype %s; starts, ends, axes and steps share one type (%s)",
                        name, opc_dtype_name(t->dtype), opc_dtype_name(dt));
    if (t->rank != 1 || t->shape[0] != n)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "%s has shape %s; starts has %lld values and each of ends, axes and "
                        "steps needs as many (1-D)", name, opc_shape_str(t, a, sizeof a), (long long)n);
    if (n > 0 && !t->data) return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "%s has no data", name);
    for (int64_t i = 0; i < n; i++) out[i] = opc_int_at(t->data, dt, i);
    return OPC_OK;
}

int32_t opc_prep_slice_grad(opc_call *c, void *plan_v, opc_shape *outs) {
    sg_plan *p = plan_v;
    int32_t s;
    for (int32_t i = 0; i < 4; i++)
        if ((s = opc_require(c, i))) return s;
    const opc_tensor *dy = c->in[0], *st = c->in[2];
    if ((s = opc_check_supported_dtype(c, dy->dtype))) return s;
    int32_t r = 0;
    if ((s = opc_read_shape_input(c, 1, false, "the output's shape", p->dims, &r))) return s;
    char a[200], b[200];
    const int32_t dt = st->dtype;
    if (dt != OPC_INT64 && dt != OPC_INT32)
        return opc_fail(c, OPC_ERR_UNSUPPORTED_DTYPE, "starts has dtype %s; int32 or int64 needed", opc_dtype_name(dt));
    if (st->rank != 1)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "starts must be 1-D, got shape %s", opc_shape_str(st, a, sizeof a));
    const int64_t n = st->shape[0];
    if (n > r)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "%lld starts for X of rank %d", (long long)n, (int)r);
    int64_t starts[OPC_MAX_RANK], ends[OPC_MAX_RANK], axes[OPC_MAX_RANK], steps[OPC_MAX_RANK];
    if ((s = sg_ints(c, 2, "starts", dt, n, starts)) || (s = sg_ints(c, 3, "ends", dt, n, ends))) return s;
    const bool has_axes = c->n_inputs > 4 && c->in[4], has_steps = c->n_inputs > 5 && c->in[5];
    if (has_axes && (s = sg_ints(c, 4, "axes", dt, n, axes))) return s;
    if (has_steps && (s = sg_ints(c, 5, "steps", dt, n, steps))) return s;
    for (int32_t i = 0; i < r; i++) p->start[i] = 0, p->step[i] = 1, p->count[i] = p->dims[i];
    bool seen[OPC_MAX_RANK] = {false};
    for (int64_t j = 0; j < n; j++) {
        int64_t ax = has_axes ? axes[j] : j;
        if (ax < -(int64_t)r || ax >= r)
            return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "axes holds %lld, outside [%d, %d] for X of rank %d",
                            (long long)ax, -(int)r, (int)r - 1, (int)r);
        ax += ax < 0 ? r : 0;
        if (seen[ax]) return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "axes names axis %lld twice", (long long)ax);
        seen[ax] = true;
        const int64_t k = has_steps ? steps[j] : 1, dim = p->dims[ax];
        if (k == 0) return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "steps holds 0 (axis %lld)", (long long)ax);
        int64_t st0 = starts[j], en = ends[j];
        st0 += st0 < 0 ? dim : 0;
        en += en < 0 ? dim : 0;
        int64_t cnt;
        if (k > 0) {
            st0 = st0 < 0 ? 0 : st0 > dim ? dim : st0;
            en = en < 0 ? 0 : en > dim ? dim : en;
            cnt = en > st0 ? 1 + (en - st0 - 1) / k : 0;
        } else {
            st0 = st0 < 0 ? 0 : st0 > dim - 1 ? dim - 1 : st0;
            en = en < -1 ? -1 : en > dim - 1 ? dim - 1 : en;
            cnt = st0 > en ? 1 + (int64_t)((uint64_t)(st0 - en - 1) / ((uint64_t)0 - (uint64_t)k)) : 0;
        }
        p->start[ax] = st0;
        p->step[ax] = k;
        p->count[ax] = cnt;
    }
    bool ok = dy->rank == r;
    for (int32_t i = 0; ok && i < r; i++) ok = dy->shape[i] == p->count[i];
    if (!ok)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "dY has shape %s; the slice of X %s has shape %s",
                        opc_shape_str(dy, a, sizeof a), opc_dims_str(p->dims, r, b, sizeof b),
                        opc_dims_str(p->count, r, (char[200]){0}, 200));
    p->dtype = dy->dtype;
    p->rank = r;
    outs[0].dtype = dy->dtype;
    outs[0].rank = r;
    for (int32_t i = 0; i < r; i++) outs[0].shape[i] = p->dims[i];
    return OPC_OK;
}

int32_t opc_exec_slice_grad(opc_call *c, const void *plan_v, opc_tensor *outs) {
    const sg_plan *p = plan_v;
    if (!outs[0].data) return OPC_OK;
    const int32_t r = p->rank;
    const size_t es = opc_dtype_size(p->dtype);
    const int64_t L = p->dims[r - 1];
    int64_t rows = 1;
    for (int32_t i = 0; i < r - 1; i++) rows *= p->dims[i];
    if (L == 0 || rows == 0) return OPC_OK;
    const char *dy = c->in[0]->data;
    char *dx = outs[0].data;
    const int64_t ylen = p->count[r - 1], st = p->start[r - 1], k = p->step[r - 1];
    const int nt = pg_threads(c, rows * L);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int64_t q = 0; q < rows; q++) {
        char *row = dx + q * L * (int64_t)es;
        /* the dY row this dX row receives, or none */
        int64_t rest = q, yrow = 0, ystride = 1;
        bool hit = true;
        for (int32_t i = r - 2; i >= 0 && hit; i--) {
            const int64_t coord = rest % p->dims[i], off = coord - p->start[i];
            rest /= p->dims[i];
            if (off % p->step[i] != 0) hit = false;
            const int64_t j = off / p->step[i];
            if (j < 0 || j >= p->count[i]) hit = false;
            yrow += j * ystride;
            ystride *= p->count[i];
        }
        if (!hit || ylen == 0) {
            memset(row, 0, (size_t)L * es);
            continue;
        }
        const char *src = dy + yrow * ylen * (int64_t)es;
        if (k == 1) {
            memset(row, 0, (size_t)st * es);
            memcpy(row + st * (int64_t)es, src, (size_t)ylen * es);
            memset(row + (st + ylen) * (int64_t)es, 0, (size_t)(L - st - ylen) * es);
        } else {
            memset(row, 0, (size_t)L * es);
            for (int64_t j = 0; j < ylen; j++) memcpy(row + (st + j * k) * (int64_t)es, src + j * (int64_t)es, es);
        }
    }
    return OPC_OK;
}

/* ==== GatherNDGrad ============================================================================ */

typedef struct {
    int32_t dtype, rank, k, b;
    int64_t dims[OPC_MAX_RANK];
    int64_t nb, M, R, inner; /* batches, tuples per batch, rows per batch (indexed positions), slice length */
} gnd_plan;

int32_t opc_prep_gather_nd_grad(opc_call *c, void *plan_v, opc_shape *outs) {
    gnd_plan *p = plan_v;
    int32_t s;
    for (int32_t i = 0; i < 3; i++)
        if ((s = opc_require(c, i))) return s;
    const opc_tensor *idx = c->in[1], *up = c->in[2];
    if ((s = opc_check_supported_dtype(c, up->dtype))) return s;
    if (idx->dtype != OPC_INT64)
        return opc_fail(c, OPC_ERR_UNSUPPORTED_DTYPE, "indices has dtype %s; int64 needed", opc_dtype_name(idx->dtype));
    int32_t r = 0;
    if ((s = opc_read_shape_input(c, 0, false, "the output's shape", p->dims, &r))) return s;
    int64_t bd;
    if ((s = opc_attr_int(c, "batch_dims", 0, &bd))) return s;
    const int32_t q = idx->rank;
    if (q < 1) return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "indices must have rank >= 1 (its last dim is the tuple length)");
    if (bd < 0 || bd >= (q < r ? q : r))
        return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "batch_dims %lld must lie in [0, min(rank(indices) %d, rank(data) %d))",
                        (long long)bd, (int)q, (int)r);
    const int32_t b = (int32_t)bd;
    const int64_t k = idx->shape[q - 1];
    if (k < 1 || k > r - b)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "indices' last dim %lld must lie in [1, rank(data) - batch_dims] = [1, %d]",
                        (long long)k, (int)(r - b));
    char a1[200], a2[200];
    for (int32_t i = 0; i < b; i++)
        if (idx->shape[i] != p->dims[i])
            return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "the batch dims of indices %s and data %s differ",
                            opc_shape_str(idx, a1, sizeof a1), opc_dims_str(p->dims, r, a2, sizeof a2));
    /* update = indices.shape[:-1] + dims[b+k:] */
    bool ok = up->rank == q - 1 + (r - b - (int32_t)k);
    for (int32_t i = 0; ok && i < up->rank; i++)
        ok = up->shape[i] == (i < q - 1 ? idx->shape[i] : p->dims[b + k + (i - (q - 1))]);
    if (!ok)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "update has shape %s; GatherND of data %s by indices %s gives another",
                        opc_shape_str(up, a1, sizeof a1), opc_dims_str(p->dims, r, a2, sizeof a2),
                        opc_shape_str(idx, (char[200]){0}, 200));
    p->dtype = up->dtype;
    p->rank = r;
    p->k = (int32_t)k;
    p->b = b;
    p->nb = p->M = p->R = p->inner = 1;
    for (int32_t i = 0; i < b; i++) p->nb *= p->dims[i];
    for (int32_t i = b; i < q - 1; i++) p->M *= idx->shape[i];
    for (int32_t i = b; i < b + k; i++) p->R *= p->dims[i];
    for (int32_t i = b + (int32_t)k; i < r; i++) p->inner *= p->dims[i];
    outs[0].dtype = up->dtype;
    outs[0].rank = r;
    for (int32_t i = 0; i < r; i++) outs[0].shape[i] = p->dims[i];
    return OPC_OK;
}

/* Each tuple's output row (n * R + its linear position), or the first bad index's position (-1: none). */
static int64_t gnd_rows(const gnd_plan *p, const int64_t *idx, int64_t *key) {
    const int64_t T = p->nb * p->M;
    for (int64_t t = 0; t < T; t++) {
        int64_t lin = 0;
        for (int32_t j = 0; j < p->k; j++) {
            const int64_t dim = p->dims[p->b + j];
            int64_t v = idx[t * p->k + j];
            v += v < 0 ? dim : 0;
            if (v < 0 || v >= dim) return t * p->k + j;
            lin = lin * dim + v;
        }
        key[2 * t] = (t / p->M) * p->R + lin;
        key[2 * t + 1] = t;
    }
    return -1;
}

static int gnd_cmp(const void *x, const void *y) {
    const int64_t *a = x, *b = y;
    if (a[0] != b[0]) return a[0] < b[0] ? -1 : 1;
    return a[1] < b[1] ? -1 : a[1] > b[1];
}

int32_t opc_check_gather_nd_grad(opc_call *c, const void *plan_v) {
    const gnd_plan *p = plan_v;
    const int64_t *idx = c->in[1]->data;
    const int64_t T = p->nb * p->M;
    for (int64_t t = 0; t < T * p->k; t++) {
        const int64_t dim = p->dims[p->b + t % p->k], v = idx[t];
        if (v < -dim || v >= dim)
            return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "indices holds %lld at position %lld, outside [%lld, %lld]",
                            (long long)v, (long long)t, (long long)-dim, (long long)dim - 1);
    }
    return OPC_OK;
}

int32_t opc_exec_gather_nd_grad(opc_call *c, const void *plan_v, opc_tensor *outs) {
    const gnd_plan *p = plan_v;
    int32_t s;
    if ((s = opc_check_gather_nd_grad(c, p))) return s;
    if (!outs[0].data) return OPC_OK;
    const int64_t T = p->nb * p->M, inner = p->inner, total = p->nb * p->R * inner;
    const int32_t dt = p->dtype;
    const size_t es = opc_dtype_size(dt);
    int64_t *key = malloc((size_t)(T > 0 ? 2 * T : 1) * sizeof(int64_t));
    if (!key) return opc_fail(c, OPC_ERR_OUT_OF_MEMORY, "no memory for %lld tuples", (long long)T);
    if (gnd_rows(p, c->in[1]->data, key) >= 0) {
        free(key);
        return opc_fail(c, OPC_ERR_INTERNAL, "an index was out of range after the check");
    }
    qsort(key, (size_t)T, 2 * sizeof(int64_t), gnd_cmp);
    const char *up = c->in[2]->data;
    char *out = outs[0].data;
    const int nt = pg_threads(c, total + T * inner);
    bool oom = false;
#pragma omp parallel num_threads(nt) if (nt > 1) reduction(| : oom)
    {
        const int th = omp_get_thread_num(), nth = omp_get_num_threads();
        int64_t lo, hi;
        opc_split(total, nth, th, 64, &lo, &hi);
        if (hi > lo) memset(out + lo * (int64_t)es, 0, (size_t)(hi - lo) * es);
#pragma omp barrier
        /* the sorted list split at row boundaries: a thread's share starts at the first tuple of a new row */
        opc_split(T, nth, th, 1, &lo, &hi);
        while (lo > 0 && lo < T && key[2 * lo] == key[2 * (lo - 1)]) lo++;
        while (hi > 0 && hi < T && key[2 * hi] == key[2 * (hi - 1)]) hi++;
        double *acc = dt == OPC_FLOAT16 && lo < hi ? malloc((size_t)inner * sizeof(double)) : NULL;
        if (dt == OPC_FLOAT16 && lo < hi && !acc) {
            oom = true;
            lo = hi;
        }
        for (int64_t e = lo; e < hi;) {
            const int64_t row = key[2 * e];
            int64_t e1 = e;
            while (e1 < hi && key[2 * e1] == row) e1++;
            if (dt == OPC_FLOAT) {
                float *d = (float *)out + row * inner;
                for (int64_t t = e; t < e1; t++) {
                    const float *g = (const float *)up + key[2 * t + 1] * inner;
                    for (int64_t j = 0; j < inner; j++) d[j] += g[j];
                }
            } else if (dt == OPC_DOUBLE) {
                double *d = (double *)out + row * inner;
                for (int64_t t = e; t < e1; t++) {
                    const double *g = (const double *)up + key[2 * t + 1] * inner;
                    for (int64_t j = 0; j < inner; j++) d[j] += g[j];
                }
            } else {
                for (int64_t j = 0; j < inner; j++) acc[j] = 0.0;
                for (int64_t t = e; t < e1; t++)
                    for (int64_t j = 0; j < inner; j++) acc[j] += pg_load(up, dt, key[2 * t + 1] * inner + j);
                for (int64_t j = 0; j < inner; j++) pg_store(out, dt, row * inner + j, acc[j]);
            }
            e = e1;
        }
        free(acc);
    }
    free(key);
    if (oom) return opc_fail(c, OPC_ERR_OUT_OF_MEMORY, "no memory for a row of sums");
    return OPC_OK;
}

/* ==== registry entries (listed in ops.def; held against the specs by tests/openmp/test_descriptors.py) ==== */

static const int32_t DT_PG[] = {OPC_FLOAT, OPC_DOUBLE, OPC_FLOAT16};

static const char *const GND_IN[] = {"shape", "indices", "update"};
static const uint8_t GND_OPT[] = {0, 0, 0};
static const char *const GND_OUT[] = {"output"};
static const char *const GND_ATTR[] = {"batch_dims"};
OPC_DEFINE_OP(GatherNDGrad) = {
    .desc = {.name = "GatherNDGrad", OPC_INPUTS(GND_IN, GND_OPT), OPC_OUTPUTS(GND_OUT), OPC_DTYPES(DT_PG),
             OPC_ATTRS(GND_ATTR),
             .notes = "output = zeros(shape values); output[n, indices[n, m]] += update[n, m] (batch_dims b); int64 "
                      "indices in [-dim, dim) checked; duplicates summed in tuple order; float16 summed in double"},
    .prepare = opc_prep_gather_nd_grad, .exec = opc_exec_gather_nd_grad, .check = opc_check_gather_nd_grad};

static const char *const SG_IN[] = {"dY", "shape", "starts", "ends", "axes", "steps"};
static const uint8_t SG_OPT[] = {0, 0, 0, 0, 1, 1};
static const char *const SG_OUT[] = {"dX"};
OPC_DEFINE_OP(SliceGrad) = {
    .desc = {.name = "SliceGrad", OPC_INPUTS(SG_IN, SG_OPT), OPC_OUTPUTS(SG_OUT), OPC_DTYPES(DT_PG),
             .notes = "dX = zeros(shape values); dX[Slice-13 index] = dY; starts/ends/axes/steps int32 or int64, "
                      "clamped as ONNX says; step 0, bad or repeated axes, dY of another shape rejected"},
    .prepare = opc_prep_slice_grad, .exec = opc_exec_slice_grad};

static const char *const DG_IN[] = {"dY", "A", "B"};
static const uint8_t DG_OPT[] = {0, 0, 0};
static const char *const DG_OUT[] = {"dA", "dB"};
OPC_DEFINE_OP(DivGrad) = {
    .desc = {.name = "DivGrad", OPC_INPUTS(DG_IN, DG_OPT), OPC_OUTPUTS(DG_OUT), OPC_DTYPES(DT_PG),
             .notes = "dA = unbroadcast(dY / B), dB = unbroadcast(-dY * A / B^2) (either output optional); formed and "
                      "summed in double in fixed blocks"},
    .prepare = opc_prep_div_grad, .exec = opc_exec_div_grad};

static const char *const RST_IN[] = {"data", "axes"};
static const uint8_t RST_OPT[] = {0, 0};
static const char *const RST_OUT[] = {"reduced"};
static const char *const RST_ATTR[] = {"keepdims", "noop_with_empty_axes"};
OPC_DEFINE_OP(ReduceSumTraining) = {
    .desc = {.name = "ReduceSumTraining", OPC_INPUTS(RST_IN, RST_OPT), OPC_OUTPUTS(RST_OUT), OPC_DTYPES(DT_PG),
             OPC_ATTRS(RST_ATTR),
             .notes = "ReduceSum-13 with axes an int64 input; summed in double in fixed blocks; axes out of range or "
                      "repeated rejected"},
    .prepare = opc_prep_reduce_sum_training, .exec = opc_exec_reduce_sum_training};
