/* Fused list kernels of the sequence optimizers: AdamWOptimizer, SGDOptimizerV2, InplaceClipGradNorm (declared and
 * described in seq_optim.h). The list's tensors are laid end to end as one virtual range [0, total); each thread
 * takes an even, 16-aligned slice of it (opc_split) and walks the tensors its slice overlaps. The updates are
 * elementwise, so the split changes no bit. The clip norm: every tensor is cut into fixed NORM_BLOCK-element blocks
 * (independent of the thread count); each block's sum of squares is taken in double with 8 interleaved partial
 * sums combined in a fixed order; the block sums are then added in list order by one thread. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "call.h"
#include "seq_optim.h"

#define MAX_LIST ((int64_t)1 << 31)
#define NORM_BLOCK 16384

static int32_t fail(char *err, size_t errlen, int32_t status, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return status;
}

/* offsets[i] = elements before tensor i (offsets[count] = total); validates count, sizes and pointers. The
 * pointer arrays are checked as given (NULL array or NULL entry of a non-empty tensor rejected). */
typedef struct {
    const void *const *p;
    const char *name;
} list_arg;

static int32_t layout(int64_t count, int64_t min_count, const int64_t *sizes, const list_arg *lists, int n_lists,
                      int64_t **offsets_out, char *err, size_t errlen) {
    *offsets_out = NULL;
    if (count < min_count)
        return fail(err, errlen, OPC_ERR_INVALID_ARGUMENT,
                    count < 0 ? "count %lld is negative" : "count %lld: the sequences must hold at least one tensor",
                    (long long)count);
    if (count > MAX_LIST)
        return fail(err, errlen, OPC_ERR_INVALID_ARGUMENT, "count %lld exceeds %lld tensors", (long long)count,
                    (long long)MAX_LIST);
    if (count > 0 && !sizes) return fail(err, errlen, OPC_ERR_INVALID_ARGUMENT, "sizes is NULL");
    for (int l = 0; l < n_lists; l++)
        if (count > 0 && !lists[l].p)
            return fail(err, errlen, OPC_ERR_INVALID_ARGUMENT, "%s is NULL", lists[l].name);
    int64_t *off = malloc((size_t)(count + 1) * sizeof *off);
    if (!off) return fail(err, errlen, OPC_ERR_OUT_OF_MEMORY, "out of memory for %lld offsets", (long long)count);
    off[0] = 0;
    for (int64_t i = 0; i < count; i++) {
        int64_t n = sizes[i];
        if (n < 0 || n > OPC_MAX_ELEMS) {
            free(off);
            return fail(err, errlen, OPC_ERR_INVALID_ARGUMENT, "sizes[%lld] = %lld is out of range [0, 2^48]",
                        (long long)i, (long long)n);
        }
        for (int l = 0; l < n_lists; l++)
            if (n > 0 && !lists[l].p[i]) {
                free(off);
                return fail(err, errlen, OPC_ERR_INVALID_ARGUMENT, "%s[%lld] is NULL with %lld elements", lists[l].name,
                            (long long)i, (long long)n);
            }
        if (off[i] > OPC_MAX_ELEMS - n) {
            free(off);
            return fail(err, errlen, OPC_ERR_INVALID_ARGUMENT, "the list holds more than 2^48 elements");
        }
        off[i + 1] = off[i] + n;
    }
    *offsets_out = off;
    return OPC_OK;
}

/* the first tensor whose range ends after `pos` (off non-decreasing, off[0] = 0, pos < off[count]) */
static int64_t first_tensor(const int64_t *off, int64_t count, int64_t pos) {
    int64_t lo = 0, hi = count - 1;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (off[mid + 1] > pos)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

static int thread_count(int32_t threads, int64_t total, int64_t grain) {
    int nt = threads > 0 ? threads : omp_get_max_threads();
    int64_t want = total / opc_grain(grain) + 1;
    return (int)(want < nt ? want : nt);
}

/* Runs BODY(i, a, b) over the pieces [a, b) (element indices within tensor i) of every thread's slice. */
#define FOR_SLICES(total, off, count, nt, BODY)                                                                   \
    do {                                                                                                          \
        _Pragma("omp parallel num_threads(nt)") {                                                                 \
            int64_t lo_, hi_;                                                                                     \
            opc_split((total), omp_get_num_threads(), omp_get_thread_num(), 16, &lo_, &hi_);                       \
            if (lo_ < hi_) {                                                                                      \
                for (int64_t i = first_tensor((off), (count), lo_); i < (count) && (off)[i] < hi_; i++) {         \
                    int64_t a = lo_ > (off)[i] ? lo_ - (off)[i] : 0;                                              \
                    int64_t b = (hi_ < (off)[i + 1] ? hi_ : (off)[i + 1]) - (off)[i];                             \
                    if (a < b) { BODY; }                                                                          \
                }                                                                                                 \
            }                                                                                                     \
        }                                                                                                         \
    } while (0)

/* ---- AdamW ------------------------------------------------------------------------------------------------ */

typedef struct {
    double lr, a, b, eps, lwd; /* lwd = lr * weight_decay */
    double step_size;          /* mode 0: lr / c1; mode 1: lr * sqrt(c2) / c1 (lr without correction) */
    double inv_sqrt_c2;        /* mode 0: 1 / sqrt(c2) */
    double one_a, one_b;       /* 1 - alpha, 1 - beta */
} adamw_k;

#define ADAMW_LOOPS(T, SUF)                                                                                       \
    CLONES static void adamw0_##SUF(T *restrict w, const T *restrict g, T *restrict m1, T *restrict m2,          \
                                    int64_t n, const adamw_k *k) {                                                \
        const double a = k->a, b = k->b, oa = k->one_a, ob = k->one_b, eps = k->eps, lwd = k->lwd;               \
        const double ss = k->step_size, r2 = k->inv_sqrt_c2;                                                      \
        for (int64_t i = 0; i < n; i++) {                                                                         \
            double gi = (double)g[i], wi = (double)w[i];                                                          \
            double n1 = a * (double)m1[i] + oa * gi;                                                              \
            double n2 = b * (double)m2[i] + ob * gi * gi;                                                         \
            wi = wi - lwd * wi;                                                                                   \
            wi = wi - ss * n1 / (sqrt(n2) * r2 + eps);                                                            \
            m1[i] = (T)n1;                                                                                        \
            m2[i] = (T)n2;                                                                                        \
            w[i] = (T)wi;                                                                                         \
        }                                                                                                         \
    }                                                                                                             \
    CLONES static void adamw1_##SUF(T *restrict w, const T *restrict g, T *restrict m1, T *restrict m2,          \
                                    int64_t n, const adamw_k *k) {                                                \
        const double a = k->a, b = k->b, oa = k->one_a, ob = k->one_b, eps = k->eps, lwd = k->lwd;               \
        const double ss = k->step_size;                                                                           \
        for (int64_t i = 0; i < n; i++) {                                                                         \
            double gi = (double)g[i], wi = (double)w[i];                                                          \
            double n1 = a * (double)m1[i] + oa * gi;                                                              \
            double n2 = b * (double)m2[i] + ob * gi * gi;                                                         \
            wi = wi - ss * n1 / (sqrt(n2) + eps);                                                                 \
            wi = wi - lwd * wi;                                                                                   \
            m1[i] = (T)n1;                                                                                        \
            m2[i] = (T)n2;                                                                                        \
            w[i] = (T)wi;                                                                                         \
        }                                                                                                         \
    }
ADAMW_LOOPS(float, f32)
ADAMW_LOOPS(double, f64)

static int32_t adamw_setup(double lr, int64_t step, double alpha, double beta, double epsilon, double weight_decay,
                           int32_t correct_bias, int32_t adam_mode, adamw_k *k, char *err, size_t errlen) {
    if (adam_mode != 0 && adam_mode != 1)
        return fail(err, errlen, OPC_ERR_INVALID_ATTRIBUTE, "adam_mode %d must be 0 or 1", adam_mode);
    if (correct_bias != 0 && correct_bias != 1)
        return fail(err, errlen, OPC_ERR_INVALID_ATTRIBUTE, "correct_bias %d must be 0 or 1", correct_bias);
    if (adam_mode == 0 && correct_bias != 1)
        return fail(err, errlen, OPC_ERR_INVALID_ATTRIBUTE, "adam_mode 0 (torch AdamW) requires correct_bias 1");
    if (correct_bias == 1 && step < 1)
        return fail(err, errlen, OPC_ERR_INVALID_ARGUMENT,
                    "step %lld with correct_bias 1: bias correction needs step >= 1", (long long)step);
    double c1 = 1.0, c2 = 1.0;
    if (correct_bias) {
        c1 = 1.0 - pow(alpha, (double)step);
        c2 = 1.0 - pow(beta, (double)step);
    }
    k->lr = lr;
    k->a = alpha;
    k->b = beta;
    k->one_a = 1.0 - alpha;
    k->one_b = 1.0 - beta;
    k->eps = epsilon;
    k->lwd = lr * weight_decay;
    k->step_size = adam_mode == 0 ? lr / c1 : lr * sqrt(c2) / c1;
    k->inv_sqrt_c2 = 1.0 / sqrt(c2);
    return OPC_OK;
}

#define ADAMW_ENTRY(T, SUF)                                                                                       \
    int32_t opc_adamw_##SUF(int64_t count, const int64_t *sizes, T *const *weights, const T *const *grads,        \
                            T *const *m1, T *const *m2, double lr, int64_t step, double alpha, double beta,       \
                            double epsilon, double weight_decay, int32_t correct_bias, int32_t adam_mode,         \
                            int32_t threads, char *err, size_t errlen) {                                          \
        adamw_k k;                                                                                                \
        int32_t s = adamw_setup(lr, step, alpha, beta, epsilon, weight_decay, correct_bias, adam_mode, &k, err,   \
                                errlen);                                                                          \
        if (s) return s;                                                                                          \
        const list_arg lists[] = {{(const void *const *)weights, "weights"},                                      \
                                  {(const void *const *)grads, "gradients"},                                      \
                                  {(const void *const *)m1, "momentums_1"},                                       \
                                  {(const void *const *)m2, "momentums_2"}};                                      \
        int64_t *off;                                                                                             \
        if ((s = layout(count, 1, sizes, lists, 4, &off, err, errlen))) return s;                                 \
        int64_t total = off[count];                                                                               \
        if (total > 0) {                                                                                          \
            int nt = thread_count(threads, total, 32768);                                                         \
            if (adam_mode == 0)                                                                                   \
                FOR_SLICES(total, off, count, nt, adamw0_##SUF(weights[i] + a, grads[i] + a, m1[i] + a,           \
                                                               m2[i] + a, b - a, &k));                            \
            else                                                                                                  \
                FOR_SLICES(total, off, count, nt, adamw1_##SUF(weights[i] + a, grads[i] + a, m1[i] + a,           \
                                                               m2[i] + a, b - a, &k));                            \
        }                                                                                                         \
        free(off);                                                                                                \
        return OPC_OK;                                                                                            \
    }
ADAMW_ENTRY(float, f32)
ADAMW_ENTRY(double, f64)

/* ---- SGD ---------------------------------------------------------------------------------------------------- */

#define SGD_LOOP(T, SUF)                                                                                          \
    CLONES static void sgd_##SUF(T *restrict w, const T *restrict g, int64_t n, double lr) {                      \
        for (int64_t i = 0; i < n; i++) w[i] = (T)((double)w[i] - lr * (double)g[i]);                            \
    }                                                                                                             \
    int32_t opc_sgd_v2_##SUF(int64_t count, const int64_t *sizes, T *const *weights, const T *const *grads,       \
                             double lr, int32_t threads, char *err, size_t errlen) {                              \
        const list_arg lists[] = {{(const void *const *)weights, "weights"},                                      \
                                  {(const void *const *)grads, "gradients"}};                                     \
        int64_t *off;                                                                                             \
        int32_t s;                                                                                                \
        if ((s = layout(count, 1, sizes, lists, 2, &off, err, errlen))) return s;                                 \
        int64_t total = off[count];                                                                               \
        if (total > 0) {                                                                                          \
            int nt = thread_count(threads, total, 65536);                                                         \
            FOR_SLICES(total, off, count, nt, sgd_##SUF(weights[i] + a, grads[i] + a, b - a, lr));                \
        }                                                                                                         \
        free(off);                                                                                                \
        return OPC_OK;                                                                                            \
    }
SGD_LOOP(float, f32)
SGD_LOOP(double, f64)

/* ---- InplaceClipGradNorm ------------------------------------------------------------------------------------ */

#define CLIP_LOOPS(T, SUF)                                                                                        \
    /* sum of squares of x[0, n) in double: 8 interleaved partial sums, combined pairwise in a fixed order */    \
    CLONES static double sumsq_##SUF(const T *restrict x, int64_t n) {                                            \
        double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};                                                                 \
        int64_t i = 0;                                                                                            \
        for (; i + 8 <= n; i += 8)                                                                                \
            for (int j = 0; j < 8; j++) {                                                                         \
                double v = (double)x[i + j];                                                                      \
                acc[j] += v * v;                                                                                  \
            }                                                                                                     \
        for (int j = 0; i < n; i++, j++) {                                                                        \
            double v = (double)x[i];                                                                              \
            acc[j] += v * v;                                                                                      \
        }                                                                                                         \
        return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));                 \
    }                                                                                                             \
    CLONES static void scale_##SUF(T *restrict x, int64_t n, double c) {                                          \
        for (int64_t i = 0; i < n; i++) x[i] = (T)((double)x[i] * c);                                            \
    }                                                                                                             \
    int32_t opc_clip_grad_norm_##SUF(int64_t count, const int64_t *sizes, T *const *grads, double max_norm,       \
                                     const char *norm_type, double *total_norm, int32_t threads, char *err,       \
                                     size_t errlen) {                                                             \
        if (norm_type && strcmp(norm_type, "fro") != 0)                                                           \
            return fail(err, errlen, OPC_ERR_INVALID_ATTRIBUTE, "norm_type '%s' is not supported: only 'fro'",    \
                        norm_type);                                                                               \
        const list_arg lists[] = {{(const void *const *)grads, "gradients"}};                                     \
        int64_t *off;                                                                                             \
        int32_t s;                                                                                                \
        if ((s = layout(count, 0, sizes, lists, 1, &off, err, errlen))) return s;                                 \
        /* blocks: tensor i holds blocks [boff[i], boff[i + 1]) of NORM_BLOCK elements (its last one shorter) */  \
        int64_t *boff = malloc((size_t)(count + 1) * sizeof *boff);                                               \
        if (!boff) {                                                                                              \
            free(off);                                                                                            \
            return fail(err, errlen, OPC_ERR_OUT_OF_MEMORY, "out of memory for %lld block offsets", (long long)count); \
        }                                                                                                         \
        boff[0] = 0;                                                                                              \
        for (int64_t i = 0; i < count; i++) boff[i + 1] = boff[i] + (sizes[i] + NORM_BLOCK - 1) / NORM_BLOCK;     \
        int64_t nblocks = boff[count], total = off[count];                                                        \
        double *part = malloc((size_t)(nblocks > 0 ? nblocks : 1) * sizeof *part);                                \
        if (!part) {                                                                                              \
            free(off);                                                                                            \
            free(boff);                                                                                           \
            return fail(err, errlen, OPC_ERR_OUT_OF_MEMORY, "out of memory for %lld partial sums", (long long)nblocks); \
        }                                                                                                         \
        int nt = thread_count(threads, total, 65536);                                                             \
        _Pragma("omp parallel num_threads(nt)") {                                                                 \
            int64_t lo, hi;                                                                                       \
            opc_split(nblocks, omp_get_num_threads(), omp_get_thread_num(), 1, &lo, &hi);                         \
            if (lo < hi) {                                                                                        \
                int64_t i = 0;                                                                                    \
                while (boff[i + 1] <= lo) i++; /* linear: fine, as the offsets pass above is */                   \
                for (int64_t bk = lo; bk < hi; bk++) {                                                            \
                    while (boff[i + 1] <= bk) i++;                                                                \
                    int64_t a = (bk - boff[i]) * NORM_BLOCK;                                                      \
                    int64_t e = a + NORM_BLOCK < sizes[i] ? a + NORM_BLOCK : sizes[i];                            \
                    part[bk] = sumsq_##SUF(grads[i] + a, e - a);                                                  \
                }                                                                                                 \
            }                                                                                                     \
        }                                                                                                         \
        double sum = 0.0;                                                                                         \
        for (int64_t bk = 0; bk < nblocks; bk++) sum += part[bk];                                                 \
        double norm = sqrt(sum);                                                                                  \
        if (total_norm) *total_norm = norm;                                                                       \
        double c = max_norm / (norm + 1e-6);                                                                      \
        if (c < 1.0 || c != c) /* NaN coefficient (NaN norm or max_norm) propagates, as min(NaN, 1) = NaN does */ \
            FOR_SLICES(total, off, count, nt, scale_##SUF(grads[i] + a, b - a, c));                               \
        free(part);                                                                                               \
        free(boff);                                                                                               \
        free(off);                                                                                                \
        return OPC_OK;                                                                                            \
    }
CLIP_LOOPS(float, f32)
CLIP_LOOPS(double, f64)
