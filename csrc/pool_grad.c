/* MaxPoolGrad and AveragePoolGrad (ai.onnx domain of onnxruntime-training): float32 and float64.
 *
 * Neither op can size dX from its inputs, so the caller passes dX's shape as the ints attribute
 * `dX_shape` (the shape the model declares for the output). Both work plane by plane (one plane =
 * one (n, c) pair): a thread owns whole dX planes, zeroes each and accumulates into it in dY order,
 * so every dX element is summed in the same order at any thread count.
 *
 * MaxPoolGrad: dX.flat[Indices[i]] += dY[i]. Indices are flat over the whole tensor; MaxPool's own
 * stay inside their plane. Every index is checked before it is used. An index that is valid but lies in
 * another plane cannot be handled by the plane owner, so the call then redoes the whole scatter in one
 * ordered serial pass (the same order: bitwise the same result).
 *
 * AveragePoolGrad: 1 to 3 spatial dims, handled as 3-D with leading unit dims. Each dY element,
 * divided by its window's count (input elements covered, or positions inside the padded extent with
 * count_include_pad), is added to the input elements of its window. */
#include <omp.h>
#include <stdlib.h>

#include "call.h"

/* ---- shared: dX_shape ----------------------------------------------------------------------- */

static int32_t get_dx_shape(opc_call *c, const opc_tensor *dy, int64_t *dims) {
    const int64_t *v;
    int64_t n;
    int32_t s = opc_attr_ints(c, "dX_shape", &v, &n);
    if (s) return s;
    if (n < 0)
        return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE,
                        "dX_shape is required: the shape the model declares for dX (X's shape)");
    if (n < 3 || n > 5)
        return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "dX_shape has %lld dims; pooling takes rank 3 to 5",
                        (long long)n);
    if (n != dy->rank)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "dY has rank %d but dX_shape rank %lld", (int)dy->rank,
                        (long long)n);
    int64_t total = 1;
    for (int64_t i = 0; i < n; i++) {
        if (v[i] < 0 || !opc_mul_ok(total, v[i], &total) || total > OPC_MAX_ELEMS)
            return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "dX_shape entry %lld (%lld) is negative or too large",
                            (long long)i, (long long)v[i]);
        dims[i] = v[i];
    }
    if (dims[0] != dy->shape[0] || dims[1] != dy->shape[1])
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "dY's batch and channels [%lld, %lld] differ from dX's [%lld, %lld]",
                        (long long)dy->shape[0], (long long)dy->shape[1], (long long)dims[0], (long long)dims[1]);
    return OPC_OK;
}

static void set_out(opc_shape *o, int32_t dtype, int32_t rank, const int64_t *dims) {
    o->dtype = dtype;
    o->rank = rank;
    for (int32_t i = 0; i < rank; i++) o->shape[i] = dims[i];
}

static int pool_threads(opc_call *c, int64_t planes, int64_t work) {
    int64_t want = work / opc_grain(32768) + 1;
    if (want > planes) want = planes;
    int nt = (int)(want < c->threads ? want : c->threads);
    return nt < 1 ? 1 : nt;
}

/* ---- MaxPoolGrad ---------------------------------------------------------------------------- */

typedef struct {
    int32_t dtype;
    int64_t planes, x_plane, y_plane, x_total;
} mp_plan;

int32_t opc_prep_maxpool_grad(opc_call *c, void *plan_v, opc_shape *outs) {
    mp_plan *p = plan_v;
    int32_t s;
    if ((s = opc_require(c, 0)) || (s = opc_require(c, 1))) return s;
    const opc_tensor *dy = c->in[0], *idx = c->in[1];
    if ((s = opc_check_supported_dtype(c, dy->dtype))) return s;
    if (idx->dtype != OPC_INT64)
        return opc_fail(c, OPC_ERR_UNSUPPORTED_DTYPE, "Indices has dtype %s; int64 needed", opc_dtype_name(idx->dtype));
    char a[200], b[200];
    if (!opc_same_shape(dy, idx))
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "Indices shape %s differs from dY shape %s",
                        opc_shape_str(idx, a, sizeof a), opc_shape_str(dy, b, sizeof b));
    if (dy->rank < 3 || dy->rank > 5)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "dY has rank %d; MaxPool outputs have rank 3 to 5", (int)dy->rank);
    int64_t dims[5];
    if ((s = get_dx_shape(c, dy, dims))) return s;
    p->dtype = dy->dtype;
    p->planes = dims[0] * dims[1];
    p->x_plane = 1;
    p->y_plane = 1;
    for (int32_t i = 2; i < dy->rank; i++) p->x_plane *= dims[i], p->y_plane *= dy->shape[i];
    p->x_total = p->planes * p->x_plane;
    set_out(&outs[0], dy->dtype, dy->rank, dims);
    return OPC_OK;
}

/* Every index in [0, x_total): dX.flat's positions (none when dX is empty). */
int32_t opc_check_maxpool_grad(opc_call *c, const void *plan_v) {
    const mp_plan *p = plan_v;
    const int64_t *ix = c->in[1]->data;
    int64_t at = opc_first_outside(ix, OPC_INT64, p->planes * p->y_plane, 0, p->x_total, false, 0, c->threads);
    if (at < 0) return OPC_OK;
    if (p->x_total == 0) /* dY entries but no dX element to receive them */
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "Indices index an empty dX");
    return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "Indices holds %lld, outside [0, %lld) for dX", (long long)ix[at],
                    (long long)p->x_total);
}

/* AveragePoolGrad: bytes ahead of the dX row being built that are prefetched for writing, a row's worth
 * per row. The rows are written in order, but the hardware prefetcher fetched the lines for ownership
 * too late: writing dX ran about 30 % faster with this (2x2 stride-2 pooling, 32x64x112x112 float32 dX,
 * here). */
#define AP_AHEAD 2048

/* Planes [p0, p1): zero each dX plane and add its own dY entries in order. Returns 0, 1 (an index in
 * another plane: the caller redoes the scatter serially) or 2 (an index outside dX). Every 16 entries
 * the scatter prefetches the index and dY streams 2 KiB ahead and a share of the thread's next plane
 * for writing (its zeroing then finds the lines owned): the hardware prefetcher alone left the loads
 * waiting (8 %) and the zeroing waiting for ownership (a further 20 %, 32x64x112x112 float32 dX, here). */
#define MP_KERNELS(SFX, T)                                                                         \
    static int mp_planes_##SFX(const T *restrict dy, const int64_t *restrict ix, T *restrict dx,     \
                               const mp_plan *p, int64_t p0, int64_t p1) {                         \
        int status = 0;                                                                            \
        const int64_t lines = (p->x_plane * (int64_t)sizeof(T) + 63) / 64;                         \
        const int64_t groups = p->y_plane > 0 ? (p->y_plane + 15) / 16 : 1; /* of 16 entries */     \
        const int64_t per = (lines + groups - 1) / groups; /* next-plane lines per group */         \
        for (int64_t q = p0; q < p1; q++) {                                                        \
            const int64_t base = q * p->x_plane;                                                   \
            T *restrict plane = dx + base;                                                         \
            const char *next = q + 1 < p1 ? (const char *)(plane + p->x_plane) : NULL;             \
            for (int64_t j = 0; j < p->x_plane; j++) plane[j] = 0;                                 \
            const T *restrict g = dy + q * p->y_plane;                                             \
            const int64_t *restrict k = ix + q * p->y_plane;                                       \
            for (int64_t j = 0; j < p->y_plane; j++) {                                             \
                if ((j & 15) == 0) { /* see MP_KERNELS */                                          \
                    __builtin_prefetch(k + j + 256);                                               \
                    __builtin_prefetch(g + j + 512);                                               \
                    for (int64_t l = j / 16 * per; next && l < j / 16 * per + per && l < lines; l++) \
                        __builtin_prefetch(next + 64 * l, 1);                                      \
                }                                                                                  \
                uint64_t off = (uint64_t)k[j] - (uint64_t)base; /* wraps for k < base */           \
                if (off < (uint64_t)p->x_plane) {                                                  \
                    plane[off] += g[j];                                                            \
                } else if (k[j] < 0 || k[j] >= p->x_total) {                                       \
                    return 2;                                                                      \
                } else {                                                                           \
                    status = 1;                                                                    \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        return status;                                                                             \
    }                                                                                              \
    static void mp_serial_##SFX(const T *restrict dy, const int64_t *restrict ix, T *restrict dx,   \
                                const mp_plan *p) {                                                \
        for (int64_t j = 0; j < p->x_total; j++) dx[j] = 0;                                        \
        int64_t n = p->planes * p->y_plane;                                                        \
        for (int64_t j = 0; j < n; j++) dx[ix[j]] += dy[j]; /* every index checked already */      \
    }

MP_KERNELS(f32, float)
MP_KERNELS(f64, double)

int32_t opc_exec_maxpool_grad(opc_call *c, const void *plan_v, opc_tensor *outs) {
    const mp_plan *p = plan_v;
    if (!outs[0].data) return OPC_OK;
    const void *dy = c->in[0]->data;
    const int64_t *ix = c->in[1]->data;
    void *dx = outs[0].data;
    if (p->x_total == 0) /* no dX element: any dY entry's index is out of range */
        return opc_check_maxpool_grad(c, plan_v);
    int nt = pool_threads(c, p->planes, p->x_total + 3 * p->planes * p->y_plane);
    int worst = 0;
#define RUN(SFX, T)                                                                                \
    _Pragma("omp parallel num_threads(nt) if(nt > 1) reduction(max : worst)") {                    \
        int64_t lo, hi;                                                                            \
        opc_split(p->planes, omp_get_num_threads(), omp_get_thread_num(), 1, &lo, &hi);            \
        worst = mp_planes_##SFX((const T *)dy, ix, (T *)dx, p, lo, hi);                            \
    }                                                                                              \
    if (worst == 1) mp_serial_##SFX((const T *)dy, ix, (T *)dx, p);
    switch (p->dtype) {
    case OPC_FLOAT: RUN(f32, float) break;
    case OPC_DOUBLE: RUN(f64, double) break;
    default: break;
    }
#undef RUN
    if (worst == 2) { /* an index outside dX: the error a call without outputs gets */
        int32_t s = opc_check_maxpool_grad(c, plan_v);
        return s ? s : opc_fail(c, OPC_ERR_INTERNAL, "an index was out of range but none is on a second look");
    }
    return OPC_OK;
}

/* ---- AveragePoolGrad ------------------------------------------------------------------------ */

typedef struct {
    int32_t dtype;
    bool include_pad;
    int64_t planes;
    int64_t in[3], out[3], k[3], s[3], pb[3], pe[3]; /* 3-D view: leading unit dims */
} ap_plan;

static int32_t ap_ints(opc_call *c, const char *name, int64_t nd, int64_t want, int64_t dflt, int64_t low,
                       int64_t *dst) {
    const int64_t *v;
    int64_t n;
    int32_t s = opc_attr_ints(c, name, &v, &n);
    if (s) return s;
    if (n <= 0) { /* absent or empty: the default */
        for (int64_t i = 0; i < want; i++) dst[i] = dflt;
        return OPC_OK;
    }
    if (n != want)
        return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "%s has %lld entries, %lld needed for %lld spatial dim(s)", name,
                        (long long)n, (long long)want, (long long)nd);
    for (int64_t i = 0; i < n; i++) {
        if (v[i] < low || v[i] > ((int64_t)1 << 40))
            return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "%s entry %lld is %lld; must be in [%lld, 2^40]", name,
                            (long long)i, (long long)v[i], (long long)low);
        dst[i] = v[i];
    }
    return OPC_OK;
}

int32_t opc_prep_avgpool_grad(opc_call *c, void *plan_v, opc_shape *outs) {
    ap_plan *p = plan_v;
    int32_t s;
    if ((s = opc_require(c, 0))) return s;
    const opc_tensor *dy = c->in[0];
    if ((s = opc_check_supported_dtype(c, dy->dtype))) return s;
    if (dy->rank < 3 || dy->rank > 5)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "dY has rank %d; AveragePool outputs have rank 3 to 5",
                        (int)dy->rank);
    int64_t dims[5];
    if ((s = get_dx_shape(c, dy, dims))) return s;
    int64_t nd = dy->rank - 2, k[3], st[3], pads[6], cip, ceil_mode;
    const int64_t *kv;
    int64_t kn;
    if ((s = opc_attr_ints(c, "kernel_shape", &kv, &kn))) return s;
    if (kn != nd)
        return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "kernel_shape %s: one entry per spatial dim (%lld) is required",
                        kn < 0 ? "is missing" : "has the wrong length", (long long)nd);
    if ((s = ap_ints(c, "kernel_shape", nd, nd, 1, 1, k))) return s;
    if ((s = ap_ints(c, "strides", nd, nd, 1, 1, st))) return s;
    if ((s = ap_ints(c, "pads", nd, 2 * nd, 0, 0, pads))) return s;
    if ((s = opc_attr_int(c, "count_include_pad", 0, &cip))) return s;
    if ((s = opc_attr_int(c, "ceil_mode", 0, &ceil_mode))) return s;
    if ((cip != 0 && cip != 1) || (ceil_mode != 0 && ceil_mode != 1))
        return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "count_include_pad (%lld) and ceil_mode (%lld) must be 0 or 1",
                        (long long)cip, (long long)ceil_mode);
    const char *auto_pad;
    if ((s = opc_attr_string(c, "auto_pad", "NOTSET", &auto_pad))) return s;
    bool same_upper = !strcmp(auto_pad, "SAME_UPPER"), same_lower = !strcmp(auto_pad, "SAME_LOWER");
    bool valid = !strcmp(auto_pad, "VALID");
    if (!same_upper && !same_lower && !valid && strcmp(auto_pad, "NOTSET"))
        return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "auto_pad '%s' is not NOTSET, SAME_UPPER, SAME_LOWER or VALID",
                        auto_pad);
    bool any_pad = false;
    for (int64_t i = 0; i < 2 * nd; i++) any_pad |= pads[i] != 0;
    if (any_pad && strcmp(auto_pad, "NOTSET"))
        return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "explicit pads cannot be combined with auto_pad=%s", auto_pad);
    int32_t off = (int32_t)(3 - nd);
    for (int32_t i = 0; i < 3; i++) p->in[i] = p->out[i] = p->k[i] = p->s[i] = 1, p->pb[i] = p->pe[i] = 0;
    for (int64_t i = 0; i < nd; i++) {
        int64_t in = dims[2 + i], o, pb = pads[i], pe = pads[i + nd];
        if (same_upper || same_lower) {
            o = (in + st[i] - 1) / st[i];
            int64_t total = (o - 1) * st[i] + k[i] - in;
            if (total < 0) total = 0;
            pb = same_upper ? total / 2 : (total + 1) / 2;
            pe = total - pb;
        } else {
            if (valid) pb = pe = 0;
            int64_t span = in + pb + pe - k[i];
            if (span < 0)
                return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "kernel %lld does not fit dX's padded spatial dim %lld",
                                (long long)k[i], (long long)(in + pb + pe));
            o = (ceil_mode ? (span + st[i] - 1) / st[i] : span / st[i]) + 1;
            if (ceil_mode && (o - 1) * st[i] >= in + pb) o--; /* a window starting in the end pad */
        }
        if (pb >= k[i] || pe >= k[i])
            return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "pads [%lld, %lld] must be smaller than the kernel %lld",
                            (long long)pb, (long long)pe, (long long)k[i]);
        if (o < 1) return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "no output for spatial dim %lld", (long long)in);
        if (o != dy->shape[2 + i]) {
            char a[200];
            return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "dY shape %s is not the AveragePool output of dX (spatial dim %lld: %lld expected)",
                            opc_shape_str(dy, a, sizeof a), (long long)i, (long long)o);
        }
        p->in[off + i] = in, p->out[off + i] = o, p->k[off + i] = k[i], p->s[off + i] = st[i];
        p->pb[off + i] = pb, p->pe[off + i] = pe;
    }
    p->dtype = dy->dtype;
    p->include_pad = cip != 0;
    p->planes = dims[0] * dims[1];
    set_out(&outs[0], dy->dtype, dy->rank, dims);
    return OPC_OK;
}

/* One window along one dim: [lo, hi) of the input, and its count for the divisor. */
static inline void ap_range(const ap_plan *p, int d, int64_t o, int64_t *lo, int64_t *hi, int64_t *n) {
    int64_t start = o * p->s[d] - p->pb[d], end = start + p->k[d];
    int64_t plo = start, phi = end < p->in[d] + p->pe[d] ? end : p->in[d] + p->pe[d];
    *lo = start > 0 ? start : 0;
    *hi = end < p->in[d] ? end : p->in[d];
    *n = p->include_pad ? phi - plo : *hi - *lo;
}

/* Index tables, from shapes only: per dim d the counts cnt[d][o] of each window and, for the two outer
 * dims, the windows [cover_lo, cover_hi) covering each input index. */
typedef struct {
    int64_t *cnt[3], *cover_lo[2], *cover_hi[2], *e0, *e1, *jlo, *jhi, *block;
    int64_t pair_lo, pair_hi; /* kernel 2, stride 2: the windows e whose both elements lie inside the row */
} ap_tables;

static bool ap_tables_make(const ap_plan *p, ap_tables *t) {
    int64_t total = p->out[0] + p->out[1] + p->out[2] + 2 * (p->in[0] + p->in[1]) + 2 * (p->out[2] + p->k[2]);
    t->block = malloc((size_t)total * sizeof(int64_t));
    if (!t->block) return false;
    int64_t *at = t->block;
    for (int d = 0; d < 3; d++) {
        t->cnt[d] = at, at += p->out[d];
        for (int64_t o = 0; o < p->out[d]; o++) {
            int64_t lo, hi;
            ap_range(p, d, o, &lo, &hi, &t->cnt[d][o]);
        }
        if (d == 2) break;
        t->cover_lo[d] = at, at += p->in[d];
        t->cover_hi[d] = at, at += p->in[d];
        for (int64_t i = 0; i < p->in[d]; i++) { /* windows o with o*s - pb <= i < o*s - pb + k */
            int64_t from = i + p->pb[d] - p->k[d], lo = from < 0 ? 0 : from / p->s[d] + 1;
            int64_t hi = (i + p->pb[d]) / p->s[d] + 1;
            if (hi > p->out[d]) hi = p->out[d];
            t->cover_lo[d][i] = lo < hi ? lo : hi;
            t->cover_hi[d][i] = hi;
        }
    }
    /* last dim: window e covers [e0, e1); kernel offset j lands inside the row for e in [jlo, jhi) */
    t->e0 = at, t->e1 = at + p->out[2], t->jlo = at + 2 * p->out[2], t->jhi = t->jlo + p->k[2];
    for (int64_t e = 0; e < p->out[2]; e++) {
        int64_t n;
        ap_range(p, 2, e, &t->e0[e], &t->e1[e], &n);
    }
    const int64_t W = p->in[2], S = p->s[2], PB = p->pb[2];
    for (int64_t j = 0; j < p->k[2]; j++) {
        int64_t lo = PB > j ? (PB - j + S - 1) / S : 0, hi = W - 1 + PB - j < 0 ? 0 : (W - 1 + PB - j) / S + 1;
        t->jlo[j] = lo;
        t->jhi[j] = hi < p->out[2] ? hi : p->out[2];
    }
    if (p->k[2] == 2) {
        t->pair_lo = t->jlo[0] > t->jlo[1] ? t->jlo[0] : t->jlo[1];
        t->pair_hi = t->jhi[0] < t->jhi[1] ? t->jhi[0] : t->jhi[1];
        if (t->pair_hi < t->pair_lo) t->pair_hi = t->pair_lo;
    }
    return true;
}

/* Planes [p0, p1): dY * (1 / count) into the thread's `sdy`, then every dX row built once (in cache) from the
 * windows covering it, windows (a, b) ascending, then kernel offset by kernel offset along the last dim
 * (row[e*S + j - PB] += sdy[e]: many short windows), or copied from the row before when the same windows
 * cover both (stride = kernel: half the rows of a 2x2 pool; 18 % faster at baseline, 7 % at AVX2); or, for
 * long windows, the plane zeroed and every window's box added in (a, b, e) order. Which one follows from the
 * shapes, so every element is summed in the same order at any thread count. */
#define AP_KERNELS(SFX, T)                                                                         \
    /* kernel 2, stride 2 along the last dim: each element gets one contribution per window row, so   \
     * the pairs can be written together (a vectorisable interleaved store), edges one by one. The    \
     * row's first window row sets its interior pairs to 0 + v (what zeroing then adding gives, -0    \
     * included) instead of adding to zeros: the row is then written once, not zeroed and reread. */  \
    static inline void ap_pairs_##SFX(T *restrict at, const T *restrict src, const ap_tables *t,     \
                                      bool first) {                                                \
        const int64_t lo = t->pair_lo, hi = t->pair_hi;                                            \
        if (first) {                                                                               \
            for (int64_t e = lo; e < hi; e++) {                                                    \
                T v = (T)0 + src[e];                                                               \
                at[2 * e] = v;                                                                     \
                at[2 * e + 1] = v;                                                                 \
            }                                                                                      \
        } else {                                                                                   \
            for (int64_t e = lo; e < hi; e++) {                                                    \
                T v = src[e];                                                                      \
                at[2 * e] += v;                                                                    \
                at[2 * e + 1] += v;                                                                \
            }                                                                                      \
        }                                                                                          \
        for (int64_t j = 0; j < 2; j++) {                                                          \
            for (int64_t e = t->jlo[j]; e < t->jhi[j] && e < lo; e++) at[2 * e + j] += src[e];     \
            for (int64_t e = hi > t->jlo[j] ? hi : t->jlo[j]; e < t->jhi[j]; e++) at[2 * e + j] += src[e]; \
        }                                                                                          \
    }                                                                                              \
    static void ap_planes_##SFX(const T *restrict dy, T *restrict dx, const ap_plan *p,            \
                                const ap_tables *t, const T *restrict rcp, T *restrict sdy,        \
                                int64_t p0, int64_t p1) {                                          \
        const int64_t xs = p->in[0] * p->in[1] * p->in[2], ys = p->out[0] * p->out[1] * p->out[2]; \
        const int64_t W = p->in[2], OW = p->out[2], S = p->s[2], PB = p->pb[2], K = p->k[2];       \
        const bool by_window = K >= OW; /* the summation order follows the shapes only */          \
        const T *xend = dx + p1 * xs;                                                              \
        for (int64_t q = p0; q < p1; q++) {                                                        \
            const T *restrict g = dy + q * ys;                                                     \
            for (int64_t j = 0; j < ys; j++) sdy[j] = g[j] * rcp[j];                               \
            T *restrict x = dx + q * xs;                                                           \
            if (by_window) { /* long windows: zero the plane, add each window's box, contiguous runs */ \
                for (int64_t l = 0; l < xs; l++) x[l] = 0;                                         \
                for (int64_t a = 0; a < p->out[0]; a++) {                                          \
                    int64_t a0, a1, na;                                                            \
                    ap_range(p, 0, a, &a0, &a1, &na);                                              \
                    for (int64_t b = 0; b < p->out[1]; b++) {                                      \
                        int64_t b0, b1, nb;                                                        \
                        ap_range(p, 1, b, &b0, &b1, &nb);                                          \
                        const T *restrict src = sdy + (a * p->out[1] + b) * OW;                    \
                        for (int64_t e = 0; e < OW; e++) {                                         \
                            T v = src[e];                                                          \
                            if (t->e0[e] == 0 && t->e1[e] == W) { /* whole rows: one run per i */  \
                                for (int64_t i = a0; i < a1; i++) {                                \
                                    T *restrict run = x + (i * p->in[1] + b0) * W;                 \
                                    for (int64_t l = 0; l < (b1 - b0) * W; l++) run[l] += v;       \
                                }                                                                  \
                                continue;                                                          \
                            }                                                                      \
                            for (int64_t i = a0; i < a1; i++)                                      \
                                for (int64_t j = b0; j < b1; j++) {                                \
                                    T *restrict row = x + (i * p->in[1] + j) * W;                  \
                                    for (int64_t l = t->e0[e]; l < t->e1[e]; l++) row[l] += v;     \
                                }                                                                  \
                        }                                                                          \
                    }                                                                              \
                }                                                                                  \
                continue;                                                                          \
            }                                                                                      \
            for (int64_t i0 = 0; i0 < p->in[0]; i0++) /* short windows: each row built once */    \
                for (int64_t i1 = 0; i1 < p->in[1]; i1++) {                                        \
                    T *restrict row = x + (i0 * p->in[1] + i1) * W;                                \
                    const T *ahead = row + AP_AHEAD / (int64_t)sizeof(T);                          \
                    if (ahead < xend) /* within the thread's planes */                             \
                        opc_prefetch_w(ahead, (xend - ahead < W ? xend - ahead : W) * (int64_t)sizeof(T)); \
                    if (i1 > 0 && t->cover_lo[1][i1] == t->cover_lo[1][i1 - 1] &&                  \
                        t->cover_hi[1][i1] == t->cover_hi[1][i1 - 1]) { /* the same windows: a copy */ \
                        memcpy(row, row - W, (size_t)W * sizeof(T));                               \
                        continue;                                                                  \
                    }                                                                              \
                    const bool pairs = K == 2 && S == 2; /* 2x2-style pairs: one contribution each */ \
                    bool first = pairs && t->cover_lo[0][i0] < t->cover_hi[0][i0] &&               \
                                 t->cover_lo[1][i1] < t->cover_hi[1][i1];                          \
                    if (!first) {                                                                  \
                        for (int64_t l = 0; l < W; l++) row[l] = 0;                                \
                    } else { /* only what the first window row's interior pairs leave unset */     \
                        for (int64_t l = 0; l < 2 * t->pair_lo - PB; l++) row[l] = 0;              \
                        for (int64_t l = 2 * t->pair_hi - PB; l < W; l++) row[l] = 0;              \
                    }                                                                              \
                    for (int64_t a = t->cover_lo[0][i0]; a < t->cover_hi[0][i0]; a++)              \
                        for (int64_t b = t->cover_lo[1][i1]; b < t->cover_hi[1][i1]; b++) {        \
                            const T *restrict src = sdy + (a * p->out[1] + b) * OW;                \
                            if (pairs) {                                                           \
                                ap_pairs_##SFX(row - PB, src, t, first);                           \
                                first = false;                                                     \
                                continue;                                                          \
                            }                                                                      \
                            for (int64_t j = 0; j < K; j++) { /* one strided run per kernel offset */ \
                                T *restrict at = row + j - PB;                                     \
                                for (int64_t e = t->jlo[j]; e < t->jhi[j]; e++) at[e * S] += src[e]; \
                            }                                                                      \
                        }                                                                          \
                }                                                                                  \
        }                                                                                          \
    }

AP_KERNELS(f32, float)
AP_KERNELS(f64, double)

int32_t opc_exec_avgpool_grad(opc_call *c, const void *plan_v, opc_tensor *outs) {
    const ap_plan *p = plan_v;
    if (!outs[0].data) return OPC_OK;
    int64_t xs = p->in[0] * p->in[1] * p->in[2], ys = p->out[0] * p->out[1] * p->out[2];
    if (p->planes == 0 || xs == 0) return OPC_OK;
    const void *dy = c->in[0]->data;
    void *dx = outs[0].data;
    ap_tables t;
    if (!ap_tables_make(p, &t)) return opc_fail(c, OPC_ERR_OUT_OF_MEMORY, "cannot allocate the window tables");
    int nt = pool_threads(c, p->planes, p->planes * 2 * xs);
    int failed = 0;
    /* every plane divides by the same window counts: one table of their reciprocals, as T (a multiply
     * per element: a vector divide costs ~10x its throughput; counts that are powers of 2 stay exact) */
#define RUN(SFX, T)                                                                                \
    {                                                                                              \
        T *rcp = malloc((size_t)(ys + 1) * sizeof(T));                                             \
        for (int64_t a = 0, j = 0; rcp && a < p->out[0]; a++)                                      \
            for (int64_t b = 0; b < p->out[1]; b++)                                                \
                for (int64_t e = 0; e < p->out[2]; e++, j++)                                       \
                    rcp[j] = (T)1 / (T)(t.cnt[0][a] * t.cnt[1][b] * t.cnt[2][e]);                   \
        failed = !rcp;                                                                             \
        _Pragma("omp parallel num_threads(nt) if(nt > 1) reduction(max : failed)") if (rcp) {      \
            int64_t lo, hi;                                                                        \
            opc_split(p->planes, omp_get_num_threads(), omp_get_thread_num(), 1, &lo, &hi);        \
            T *sdy = malloc((size_t)(ys + 1) * sizeof(T));                                         \
            if (sdy) ap_planes_##SFX((const T *)dy, (T *)dx, p, &t, rcp, sdy, lo, hi);             \
            failed = !sdy;                                                                         \
            free(sdy);                                                                             \
        }                                                                                          \
        free(rcp);                                                                                 \
    }
    switch (p->dtype) {
    case OPC_FLOAT: RUN(f32, float) break;
    case OPC_DOUBLE: RUN(f64, double) break;
    default: break;
    }
#undef RUN
    free(t.block);
    if (failed) return opc_fail(c, OPC_ERR_OUT_OF_MEMORY, "cannot allocate a %lld-element scratch plane", (long long)ys);
    return OPC_OK;
}

/* ---- registry entries (listed in ops.def; held against the specs by tests/openmp/test_descriptors.py) ---- */

/* ai.onnx domain: dX_shape is the shape the model declares for dX */
static const int32_t DT_POOL[] = {OPC_FLOAT, OPC_DOUBLE};
static const char *const MPG_IN[] = {"dY", "Indices"};
static const uint8_t MPG_OPT[] = {0, 0};
/* MaxPool's attributes, copied onto the node by ORT's gradient builder: taken, not read (Indices say where) */
static const char *const MPG_ATTR[] = {"dX_shape", "kernel_shape", "strides", "pads", "dilations", "ceil_mode",
                                       "auto_pad", "storage_order"};
static const char *const APG_IN[] = {"dY"};
static const uint8_t APG_OPT[] = {0};
static const char *const APG_ATTR[] = {"kernel_shape", "strides", "auto_pad", "pads", "count_include_pad",
                                       "ceil_mode", "dX_shape"};
static const char *const POOL_OUT[] = {"dX"};

OPC_DEFINE_OP(MaxPoolGrad) = {
    .desc = {.name = "MaxPoolGrad", OPC_INPUTS(MPG_IN, MPG_OPT), OPC_OUTPUTS(POOL_OUT), OPC_DTYPES(DT_POOL),
             OPC_ATTRS(MPG_ATTR),
             .notes = "dX.flat[Indices] += dY; dX_shape (required) is X's shape; every index checked"},
    .prepare = opc_prep_maxpool_grad, .exec = opc_exec_maxpool_grad, .check = opc_check_maxpool_grad};

OPC_DEFINE_OP(AveragePoolGrad) = {
    .desc = {.name = "AveragePoolGrad", OPC_INPUTS(APG_IN, APG_OPT), OPC_OUTPUTS(POOL_OUT), OPC_DTYPES(DT_POOL),
             OPC_ATTRS(APG_ATTR),
             .notes = "1-D to 3-D; auto_pad, pads, strides, count_include_pad, ceil_mode; dX_shape (required) is "
                      "X's shape"},
    .prepare = opc_prep_avgpool_grad, .exec = opc_exec_avgpool_grad};
