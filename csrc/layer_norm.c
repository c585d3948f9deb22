/* LayerNormalizationGrad, SimplifiedLayerNormalizationGrad (RMSNorm) and InvertibleLayerNormalizationGrad (the
 * LayerNormalization gradient from Y: xhat = (Y - bias) / scale instead of (X - mean) * inv_std_var): float32, float64,
 * float16
 * (float16 loaded into float32 and rounded once). The statistics (mean, inv_std_var) may be float32
 * or float64 for any data type, as ORT's schema allows.
 *
 * X is viewed as [N, M]: N rows (dims before axis), M = prod(dims[axis:]). Per row, one pass sums
 * g = dY * scale and g * xhat (16 interleaved partials combined in a fixed order) and adds dY * xhat
 * and dY into the row's chunk of column partial sums; a second pass over the row (in cache) writes
 * X_grad. Chunks are CHUNK consecutive rows whatever the thread count; scale_grad and bias_grad sum the
 * chunk partials in chunk order, split over columns. So every output is bitwise the same at any thread
 * count. */
#include <omp.h>
#include <stdlib.h>

#include "call.h"

#define CHUNK 32 /* rows per column-partial chunk: fixed, so the summation order never depends on threads */

typedef struct {
    bool simplified, invertible;
    int32_t dtype, stat_dtype;
    int64_t N, M;
} ln_plan;

/* invertible: inputs Y_grad, Y, scale, bias, inv_std_var (x below is Y; bias has scale's shape). */
static int32_t prep(opc_call *c, void *plan_v, opc_shape *outs, bool simplified, bool invertible) {
    ln_plan *p = plan_v;
    int32_t s, n_in = simplified ? 4 : 5, first_stat = invertible ? 4 : 3;
    for (int32_t i = 0; i < n_in; i++)
        if ((s = opc_require(c, i))) return s;
    const opc_tensor *dy = c->in[0], *x = c->in[1], *scale = c->in[2];
    const int32_t idx[] = {1, 0, 2, 3};
    if ((s = opc_check_supported_dtype(c, x->dtype))) return s;
    if ((s = opc_check_dtypes(c, x->dtype, idx, invertible ? 4 : 3))) return s;
    int32_t sdt = c->in[first_stat]->dtype;
    for (int32_t i = first_stat; i < n_in; i++) {
        const opc_tensor *t = c->in[i];
        if ((t->dtype != OPC_FLOAT && t->dtype != OPC_DOUBLE) || t->dtype != sdt)
            return opc_fail(c, OPC_ERR_UNSUPPORTED_DTYPE, "%s has dtype %s; the statistics must be both float32 or both float64",
                            c->desc->input_names[i], opc_dtype_name(t->dtype));
    }
    char a[200], b[200];
    if (!opc_same_shape(dy, x))
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "Y_grad shape %s differs from %s shape %s",
                        opc_shape_str(dy, a, sizeof a), invertible ? "Y" : "X", opc_shape_str(x, b, sizeof b));
    int32_t r = x->rank;
    if (r == 0) return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "X must have rank >= 1, got a scalar");
    int64_t axis;
    if ((s = opc_attr_int(c, "axis", -1, &axis))) return s;
    if (axis < -(int64_t)r || axis > (int64_t)r - 1)
        return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "axis %lld is not in the valid range [%d, %d] for rank %d",
                        (long long)axis, -(int)r, (int)r - 1, (int)r);
    if (axis < 0) axis += r;
    bool scale_ok = scale->rank == r - axis;
    for (int32_t i = 0; scale_ok && i < scale->rank; i++) scale_ok = scale->shape[i] == x->shape[axis + i];
    if (!scale_ok)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "scale shape %s differs from %s's dims from axis %lld on (%s %s)",
                        opc_shape_str(scale, a, sizeof a), invertible ? "Y" : "X", (long long)axis,
                        invertible ? "Y" : "X", opc_shape_str(x, b, sizeof b));
    if (invertible && !opc_same_shape(c->in[3], scale))
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "bias shape %s differs from scale shape %s",
                        opc_shape_str(c->in[3], a, sizeof a), opc_shape_str(scale, b, sizeof b));
    p->N = 1;
    for (int32_t i = 0; i < axis; i++) p->N *= x->shape[i];
    p->M = opc_numel(scale);
    for (int32_t i = first_stat; i < n_in; i++)
        if (opc_numel(c->in[i]) != p->N)
            return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "%s has %lld elements; one per row of X (%lld) needed",
                            c->desc->input_names[i], (long long)opc_numel(c->in[i]), (long long)p->N);
    p->simplified = simplified;
    p->invertible = invertible;
    p->dtype = x->dtype;
    p->stat_dtype = sdt;
    opc_shape_from(&outs[0], x);
    opc_shape_from(&outs[1], scale);
    if (!simplified) opc_shape_from(&outs[2], scale);
    return OPC_OK;
}

int32_t opc_prep_layernorm_grad(opc_call *c, void *p, opc_shape *o) { return prep(c, p, o, false, false); }
int32_t opc_prep_rmsnorm_grad(opc_call *c, void *p, opc_shape *o) { return prep(c, p, o, true, false); }
int32_t opc_prep_invertible_layernorm_grad(opc_call *c, void *p, opc_shape *o) { return prep(c, p, o, false, true); }

/* InvertibleLayerNormalizationGrad reconstructs xhat = (Y - bias) / scale: a scale of 0 has no inverse. */
int32_t opc_check_invertible_layernorm_grad(opc_call *c, const void *plan_v) {
    const ln_plan *p = plan_v;
    const opc_tensor *sc = c->in[2];
    for (int64_t j = 0; j < p->M; j++) {
        double v = sc->dtype == OPC_DOUBLE    ? ((const double *)sc->data)[j]
                   : sc->dtype == OPC_FLOAT16 ? (double)opc_f16_to_f32(((const uint16_t *)sc->data)[j])
                                              : (double)((const float *)sc->data)[j];
        if (v == 0)
            return opc_fail(c, OPC_ERR_INVALID_ARGUMENT,
                            "scale[%lld] is 0: xhat = (Y - bias) / scale cannot be recovered", (long long)j);
    }
    return OPC_OK;
}

/* ---- kernels per storage type ST / accumulator AT ------------------------------------------- */

#define LD_ID(p, i) (p)[i]
#define ST_ID(v) (v)
#define LD_F16(p, i) opc_f16_to_f32((p)[i])
#define ST_F16(v) opc_f32_to_f16(v)

/* xhat of element i of row b: from X and the row's mean m and inv_std_var iv (LayerNorm, RMSNorm with m = 0), or
 * from Y, bias bi and scale sc (the invertible form). */
#define XH_LN(AT, LD, i) (((AT)LD(b, i) - m) * iv)
#define XH_INV(AT, LD, i) (((AT)LD(b, i) - (AT)LD(bi, i)) / (AT)LD(sc, i))

/* Rows [c0*CHUNK, ...) of chunks [c0, c1): X_grad (if dx), and per chunk the column partials
 * cs (sum dY * xhat) and cb (sum dY; NULL for RMSNorm) at part + chunk * 2M. mu: NULL for a zero mean. */
#define CHUNKS(NAME, SFX, ST, AT, LD, STO, XH)                                                     \
    CLONES static void NAME##_##SFX(const ST *restrict dy, const ST *restrict x,                   \
                                    const ST *restrict sc, const ST *restrict bi,                  \
                                    const AT *restrict mu, const AT *restrict inv,                 \
                                    ST *restrict dx, AT *restrict part,                            \
                                    int64_t c0, int64_t c1, int64_t N, int64_t M, bool simple) {   \
        (void)bi;                                                                                  \
        for (int64_t ch = c0; ch < c1; ch++) {                                                     \
            AT *restrict cs = part + ch * 2 * M, *restrict cb = cs + M;                            \
            for (int64_t j = 0; j < 2 * M; j++) cs[j] = 0;                                         \
            int64_t r1 = (ch + 1) * CHUNK < N ? (ch + 1) * CHUNK : N;                              \
            for (int64_t r = ch * CHUNK; r < r1; r++) {                                            \
                const ST *a = dy + r * M, *b = x + r * M;                                          \
                AT m = mu ? mu[r] : (AT)0, iv = inv[r];                                            \
                (void)m;                                                                           \
                AT s1[16] = {0}, s2[16] = {0};                                                     \
                int64_t i = 0;                                                                     \
                for (; i + 16 <= M; i += 16)                                                       \
                    for (int k = 0; k < 16; k++) {                                                 \
                        AT d = (AT)LD(a, i + k), xh = XH(AT, LD, i + k);                           \
                        AT g = d * (AT)LD(sc, i + k);                                              \
                        s1[k] += g;                                                                \
                        s2[k] += g * xh;                                                           \
                        cs[i + k] += d * xh;                                                       \
                        cb[i + k] += d;                                                            \
                    }                                                                              \
                for (; i < M; i++) {                                                               \
                    AT d = (AT)LD(a, i), xh = XH(AT, LD, i), g = d * (AT)LD(sc, i);                \
                    s1[i & 15] += g;                                                               \
                    s2[i & 15] += g * xh;                                                          \
                    cs[i] += d * xh;                                                               \
                    cb[i] += d;                                                                    \
                }                                                                                  \
                if (!dx) continue;                                                                 \
                AT t1 = 0, t2 = 0;                                                                 \
                for (int k = 0; k < 16; k++) t1 += s1[k], t2 += s2[k];                             \
                AT mg = simple ? (AT)0 : t1 / (AT)M, mgx = t2 / (AT)M;                             \
                ST *o = dx + r * M;                                                                \
                for (i = 0; i < M; i++) {                                                          \
                    AT xh = XH(AT, LD, i), g = (AT)LD(a, i) * (AT)LD(sc, i);                       \
                    o[i] = STO(iv * (g - mg - xh * mgx));                                          \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }
#define KERNELS(SFX, ST, AT, LD, STO)                                                              \
    CHUNKS(chunks, SFX, ST, AT, LD, STO, XH_LN)                                                    \
    CHUNKS(ichunks, SFX, ST, AT, LD, STO, XH_INV)                                                  \
    /* Columns [j0, j1): chunk partials summed in chunk order into scale_grad / bias_grad. */      \
    CLONES static void columns_##SFX(const AT *restrict part, ST *restrict gs, ST *restrict gb,    \
                                     int64_t chunks, int64_t M, int64_t j0, int64_t j1) {          \
        for (int64_t j = j0; j < j1; j++) {                                                        \
            AT vs = 0, vb = 0;                                                                     \
            for (int64_t ch = 0; ch < chunks; ch++) {                                              \
                vs += part[ch * 2 * M + j];                                                        \
                vb += part[ch * 2 * M + M + j];                                                    \
            }                                                                                      \
            if (gs) gs[j] = STO(vs);                                                               \
            if (gb) gb[j] = STO(vb);                                                               \
        }                                                                                          \
    }

KERNELS(f32, float, float, LD_ID, ST_ID)
KERNELS(f64, double, double, LD_ID, ST_ID)
KERNELS(f16, uint16_t, float, LD_F16, ST_F16)

/* The statistics converted once to the accumulator type (they are N values: cheap). */
static void *stats_as(const opc_tensor *t, int64_t n, bool to_double) {
    void *out = malloc((size_t)(n > 0 ? n : 1) * (to_double ? sizeof(double) : sizeof(float)));
    if (!out) return NULL;
    for (int64_t i = 0; i < n; i++) {
        double v = t->dtype == OPC_DOUBLE ? ((const double *)t->data)[i] : ((const float *)t->data)[i];
        if (to_double) ((double *)out)[i] = v;
        else ((float *)out)[i] = (float)v;
    }
    return out;
}

int32_t opc_exec_layernorm_grad(opc_call *c, const void *plan_v, opc_tensor *outs) {
    const ln_plan *p = plan_v;
    void *dx = outs[0].data, *gs = outs[1].data, *gb = p->simplified ? NULL : outs[2].data;
    int32_t st;
    if (p->invertible && (st = opc_check_invertible_layernorm_grad(c, plan_v))) return st;
    if (!dx && !gs && !gb) return OPC_OK;
    int64_t N = p->N, M = p->M, chunks = (N + CHUNK - 1) / CHUNK;
    bool wide = p->dtype == OPC_DOUBLE;
    size_t at = wide ? sizeof(double) : sizeof(float);
    int64_t part_elems;
    if (!opc_mul_ok(chunks > 0 ? chunks : 1, 2 * (M > 0 ? M : 1), &part_elems) || part_elems > OPC_MAX_ELEMS)
        return opc_fail(c, OPC_ERR_OUT_OF_MEMORY, "column partial sums of %lld x %lld do not fit",
                        (long long)chunks, (long long)M);
    void *part = calloc((size_t)part_elems, at);
    void *inv = stats_as(c->in[p->simplified ? 3 : 4], N, wide);
    const bool has_mean = !p->simplified && !p->invertible;
    void *mu = has_mean ? stats_as(c->in[3], N, wide) : NULL;
    if (!part || !inv || (has_mean && !mu)) {
        free(part), free(inv), free(mu);
        return opc_fail(c, OPC_ERR_OUT_OF_MEMORY, "cannot allocate %lld partial sums", (long long)part_elems);
    }
    const void *dy = c->in[0]->data, *x = c->in[1]->data, *sc = c->in[2]->data,
               *bi = p->invertible ? c->in[3]->data : NULL;
    /* One parallel region (a second would wake the team again): rows by chunk, a barrier, then columns. */
    int64_t want = (N * M + chunks * M) / opc_grain(32768) + 1, most = chunks > M ? chunks : M;
    int nt = (int)(want < c->threads ? want : c->threads);
    if (nt > most) nt = (int)most;
    if (nt < 1) nt = 1;
#define RUN(SFX, ST, AT)                                                                           \
    _Pragma("omp parallel num_threads(nt) if(nt > 1)") {                                           \
        int64_t lo, hi;                                                                            \
        opc_split(chunks, omp_get_num_threads(), omp_get_thread_num(), 1, &lo, &hi);               \
        (p->invertible ? ichunks_##SFX : chunks_##SFX)((const ST *)dy, (const ST *)x, (const ST *)sc, \
                                                        (const ST *)bi, (const AT *)mu, (const AT *)inv, \
                                                        (ST *)dx, (AT *)part, lo, hi, N, M, p->simplified); \
        if (gs || gb) {                                                                            \
            _Pragma("omp barrier")                                                                 \
            opc_split(M, omp_get_num_threads(), omp_get_thread_num(), 16, &lo, &hi);               \
            columns_##SFX((const AT *)part, (ST *)gs, (ST *)gb, chunks, M, lo, hi);                \
        }                                                                                          \
    }
    switch (p->dtype) {
    case OPC_FLOAT: RUN(f32, float, float) break;
    case OPC_DOUBLE: RUN(f64, double, double) break;
    case OPC_FLOAT16: RUN(f16, uint16_t, float) break;
    default: break;
    }
#undef RUN
    free(part), free(inv), free(mu);
    return OPC_OK;
}

/* ---- registry entries (listed in ops.def; held against the specs by tests/openmp/test_descriptors.py) ---- */

/* float16 computed in float32; statistics float32 or float64 */
static const int32_t DT_LN[] = {OPC_FLOAT, OPC_DOUBLE, OPC_FLOAT16};
static const char *const LN_IN[] = {"Y_grad", "X", "scale", "mean", "inv_std_var"};
static const uint8_t LN_OPT[] = {0, 0, 0, 0, 0};
static const char *const RMS_IN[] = {"Y_grad", "X", "scale", "inv_std_var"};
static const uint8_t RMS_OPT[] = {0, 0, 0, 0};
static const char *const LN_OUT[] = {"X_grad", "scale_grad", "bias_grad"};
static const char *const RMS_OUT[] = {"X_grad", "scale_grad"};
/* epsilon and stash_type: the forward op's, copied onto the node by ORT's gradient builder; taken, not read */
static const char *const LN_ATTR[] = {"axis", "epsilon", "stash_type"};

OPC_DEFINE_OP(LayerNormalizationGrad) = {
    .desc = {.name = "LayerNormalizationGrad", OPC_INPUTS(LN_IN, LN_OPT), OPC_OUTPUTS(LN_OUT), OPC_DTYPES(DT_LN),
             OPC_ATTRS(LN_ATTR),
             .notes = "rows = dims from axis (default -1) on; mean / inv_std_var one per row, float32 or float64"},
    .prepare = opc_prep_layernorm_grad, .exec = opc_exec_layernorm_grad};

static const char *const ILN_IN[] = {"Y_grad", "Y", "scale", "bias", "inv_std_var"};
static const char *const ILN_ATTR[] = {"axis"};

OPC_DEFINE_OP(InvertibleLayerNormalizationGrad) = {
    .desc = {.name = "InvertibleLayerNormalizationGrad", OPC_INPUTS(ILN_IN, LN_OPT), OPC_OUTPUTS(LN_OUT),
             OPC_DTYPES(DT_LN), OPC_ATTRS(ILN_ATTR),
             .notes = "xhat = (Y - bias) / scale (scale != 0); rows = dims from axis (default -1) on; inv_std_var one "
                      "per row, float32 or float64"},
    .prepare = opc_prep_invertible_layernorm_grad, .exec = opc_exec_layernorm_grad,
    .check = opc_check_invertible_layernorm_grad};

OPC_DEFINE_OP(SimplifiedLayerNormalizationGrad) = {
    .desc = {.name = "SimplifiedLayerNormalizationGrad", OPC_INPUTS(RMS_IN, RMS_OPT), OPC_OUTPUTS(RMS_OUT),
             OPC_DTYPES(DT_LN), OPC_ATTRS(LN_ATTR),
             .notes = "RMSNorm; rows = dims from axis (default -1) on; inv_std_var one per row, float32 or float64"},
    .prepare = opc_prep_rmsnorm_grad, .exec = opc_exec_layernorm_grad};
