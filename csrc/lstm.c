/* LSTMTraining and LSTMGrad (com.microsoft), ONNX LSTM-14 semantics, gate order i, o, f, c.
 * Validation and dispatch here; the computation is lstm_impl.h, instantiated for float and double.
 *
 * LSTMTraining: inputs X [S,B,I], W [D,4H,I], R [D,4H,H], B [D,8H], sequence_lens [B] int32,
 * initial_h, initial_c [D,B,H], P [D,3H] = [Pi, Po, Pf] (all but X, W, R optional); outputs HAll
 * [S,D,B,H], Ht, Ct [D,B,H], CAll [S,D,B,H] and IOFC [S,D,B,4H] (post-activation i, o, f, c~).
 * LSTMGrad: inputs X, W, R, sequence_lens, initial_h, initial_c, HAll, CAll, IOFC, grad_HAll,
 * grad_Ht, grad_Ct (no B, no P: the gradient of an LSTM without peepholes; dP is d/dP at P = 0);
 * outputs dX, dW, dR, dB [D,8H], dH0, dC0, dP [D,3H], every one optional.
 * The full contract: forward, reverse and bidirectional, every ONNX RNN activation (3 per direction:
 * f for the gates, g for the cell candidate, h for the cell output), clip (LSTMTraining; LSTMGrad
 * cannot tell clipped gates from its saved inputs and rejects it), input_forget, sequence_lens.
 *
 * Threads: as gru.c. OpenBLAS is held to 1 thread for the call; the batched GEMMs are split over
 * OpenMP threads in fixed blocks (opc_gemm_par) and the recurrence runs in one parallel region where
 * each thread owns whole blocks of hidden columns (rnn_blocks: fixed by H), their step GEMMs and
 * their gate math; every sum has a fixed order, so results are bitwise identical for any thread
 * count and any output subset. */
#include <omp.h>
#include <stdlib.h>

#include "blas.h"
#include "call.h"
#include "rnn_common.h"
#include "vmath.h"

typedef struct {
    int32_t dtype;
    int64_t S, B, I, H;
    int64_t D;            /* directions: 2 for bidirectional (index 0 forward, 1 reverse) */
    bool reverse;         /* D = 1: direction reverse */
    rnn_act act[2][3];    /* [direction][f for i, o, f; g for c~; h for the cell output] */
    bool fast[2];         /* [direction]: Sigmoid, Tanh, Tanh: the vectorised gate loops */
    bool varlen;          /* sequence_lens given with some entry < seq_length */
    bool has_clip;
    double clip;
    bool input_forget;
    bool grad;
} lstm_plan;

/* input positions */
enum { TI_X, TI_W, TI_R, TI_B, TI_SL, TI_H0, TI_C0, TI_P };
enum { GI_X, GI_W, GI_R, GI_SL, GI_H0, GI_C0, GI_HALL, GI_CALL, GI_IOFC, GI_DHALL, GI_DHT, GI_DCT };

static int32_t prep(opc_call *c, lstm_plan *p, opc_shape *outs, bool grad) {
    int32_t s;
    char b1[200];
    for (int32_t i = 0; i < 3; i++)
        if ((s = opc_require(c, i))) return s;
    if (grad)
        for (int32_t i = GI_HALL; i <= GI_IOFC; i++)
            if ((s = opc_require(c, i))) return s;
    const opc_tensor *x = c->in[0];
    if ((s = opc_check_supported_dtype(c, x->dtype))) return s;
    static const int32_t tidx[] = {TI_X, TI_W, TI_R, TI_B, TI_H0, TI_C0, TI_P};
    static const int32_t gidx[] = {GI_X, GI_W, GI_R, GI_H0, GI_C0, GI_HALL, GI_CALL, GI_IOFC, GI_DHALL, GI_DHT, GI_DCT};
    if ((s = grad ? opc_check_dtypes(c, x->dtype, gidx, 11) : opc_check_dtypes(c, x->dtype, tidx, 7))) return s;
    memset(p, 0, sizeof *p);
    p->dtype = x->dtype;
    p->grad = grad;

    int64_t hs;
    if ((s = opc_attr_int(c, "hidden_size", 0, &hs))) return s;
    if (!opc_attr_get(c, "hidden_size"))
        return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "attribute 'hidden_size' is required");
    if (hs <= 0 || hs > ((int64_t)1 << 28))
        return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "hidden_size must be in [1, 2^28], got %lld", (long long)hs);
    const char *dir;
    if ((s = opc_attr_string(c, "direction", "forward", &dir))) return s;
    p->D = 1;
    if (strcmp(dir, "forward") == 0) p->reverse = false;
    else if (strcmp(dir, "reverse") == 0) p->reverse = true;
    else if (strcmp(dir, "bidirectional") == 0) p->D = 2;
    else
        return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "direction '%s' is not one of forward, reverse, bidirectional", dir);
    static const char *const defaults[] = {"Sigmoid", "Tanh", "Tanh"};
    static const bool from_output[] = {true, true, false}; /* LSTMGrad: h's slope comes from CAll, its input */
    rnn_act acts[6];
    if ((s = rnn_bind_activations(c, p->D, 3, defaults, "f for the i/o/f gates, g for the cell candidate, h for the cell output",
                                  grad ? from_output : NULL, acts)))
        return s;
    for (int64_t d = 0; d < p->D; d++) {
        for (int k = 0; k < 3; k++) p->act[d][k] = acts[3 * d + k];
        p->fast[d] = p->act[d][0].kind == ACT_SIGMOID && p->act[d][1].kind == ACT_TANH && p->act[d][2].kind == ACT_TANH;
    }
    bool clip_given;
    if ((s = opc_attr_float(c, "clip", 0.0, &p->clip, &clip_given))) return s;
    if (clip_given && grad)
        return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE,
                        "clip is not valid for LSTMGrad: it takes neither B nor the pre-activations, so the saved gate "
                        "values cannot tell where the clip cut the gradient");
    p->has_clip = clip_given;
    if (clip_given && !(p->clip > 0.0))
        return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "clip must be > 0, got %g", p->clip);
    int64_t ifg;
    if ((s = opc_attr_int(c, "input_forget", 0, &ifg))) return s;
    if (ifg != 0 && ifg != 1)
        return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "input_forget must be 0 or 1, got %lld", (long long)ifg);
    p->input_forget = ifg == 1;

    if (x->rank != 3)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "X must have rank 3 [seq_length, batch, input_size], got shape %s",
                        opc_shape_str(x, b1, sizeof b1));
    const int64_t S = x->shape[0], B = x->shape[1], I = x->shape[2], H = hs, D = p->D;
    p->S = S;
    p->B = B;
    p->I = I;
    p->H = H;
    const int64_t wdims[] = {D, 4 * H, I}, rdims[] = {D, 4 * H, H}, bdims[] = {D, 8 * H}, hdims[] = {D, B, H},
                  pdims[] = {D, 3 * H}, alldims[] = {S, D, B, H}, iofcdims[] = {S, D, B, 4 * H}, sldims[] = {B};
    const int32_t isl = grad ? GI_SL : TI_SL, ih0 = grad ? GI_H0 : TI_H0, ic0 = grad ? GI_C0 : TI_C0;
    if ((s = rnn_check_shape(c, 1, 3, wdims)) || (s = rnn_check_shape(c, 2, 3, rdims))) return s;
    if (!grad && c->in[TI_B] && (s = rnn_check_shape(c, TI_B, 2, bdims))) return s;
    if (c->in[ih0] && (s = rnn_check_shape(c, ih0, 3, hdims))) return s;
    if (c->in[ic0] && (s = rnn_check_shape(c, ic0, 3, hdims))) return s;
    if (!grad && c->in[TI_P] && (s = rnn_check_shape(c, TI_P, 2, pdims))) return s;
    if (c->in[isl]) {
        const opc_tensor *sl = c->in[isl];
        if (sl->dtype != OPC_INT32)
            return opc_fail(c, OPC_ERR_UNSUPPORTED_DTYPE, "sequence_lens must be int32, got %s", opc_dtype_name(sl->dtype));
        if ((s = rnn_check_shape(c, isl, 1, sldims))) return s;
        for (int64_t b = 0; b < B; b++) {
            int32_t v = ((const int32_t *)sl->data)[b];
            if (v < 0 || v > S)
                return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "sequence_lens[%lld] = %d is outside [0, seq_length=%lld]",
                                (long long)b, (int)v, (long long)S);
            if (v != S) p->varlen = true;
        }
    }
    if (grad) {
        if ((s = rnn_check_shape(c, GI_HALL, 4, alldims)) || (s = rnn_check_shape(c, GI_CALL, 4, alldims)) ||
            (s = rnn_check_shape(c, GI_IOFC, 4, iofcdims)))
            return s;
        if (c->in[GI_DHALL] && (s = rnn_check_shape(c, GI_DHALL, 4, alldims))) return s;
        if (c->in[GI_DHT] && (s = rnn_check_shape(c, GI_DHT, 3, hdims))) return s;
        if (c->in[GI_DCT] && (s = rnn_check_shape(c, GI_DCT, 3, hdims))) return s;
        /* the shapes a model declares for dB and dP, which no input sizes */
        static const char *const declared[] = {"dB_shape", "dP_shape"};
        const int64_t *want[] = {bdims, pdims};
        for (int k = 0; k < 2; k++) {
            const int64_t *v;
            int64_t n;
            if ((s = opc_attr_ints(c, declared[k], &v, &n))) return s;
            bool ok = n < 0 || (n == 2 && v[0] == want[k][0] && v[1] == want[k][1]);
            if (!ok) {
                char a[200], b[200];
                return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "%s must be %s (direction and hidden_size), got %s", declared[k],
                                opc_dims_str(want[k], 2, a, sizeof a), opc_dims_str(v, (int32_t)(n < 12 ? n : 12), b, sizeof b));
            }
        }
    }
    /* every work buffer and BLAS argument: S*B*4H (and times D) elements, [S*B, 4H] x [4H, I] and
     * [S*B, 4H] x [4H, H] GEMMs, the [4H, H] repacked R */
    int64_t sb, t2;
    if (!opc_mul_ok(S, B, &sb) || !opc_mul_ok(sb, 4 * H, &t2) || !opc_mul_ok(t2, D, &t2) || t2 > OPC_MAX_ELEMS ||
        !opc_mul_ok(sb, I, &t2) || !opc_blas_dims_ok(sb, 4 * H, I) || !opc_mul_ok(4 * H, H, &t2) ||
        !opc_mul_ok(4 * H, I, &t2) || t2 > OPC_MAX_ELEMS)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "sizes exceed the BLAS's 32-bit dimensions");

    const int32_t dt = x->dtype;
    if (!grad) {
        outs[0] = (opc_shape){dt, 4, {S, D, B, H}};
        outs[1] = (opc_shape){dt, 3, {D, B, H}};
        outs[2] = (opc_shape){dt, 3, {D, B, H}};
        outs[3] = (opc_shape){dt, 4, {S, D, B, H}};
        outs[4] = (opc_shape){dt, 4, {S, D, B, 4 * H}};
    } else {
        outs[0] = (opc_shape){dt, 3, {S, B, I}};
        outs[1] = (opc_shape){dt, 3, {D, 4 * H, I}};
        outs[2] = (opc_shape){dt, 3, {D, 4 * H, H}};
        outs[3] = (opc_shape){dt, 2, {D, 8 * H}};
        outs[4] = (opc_shape){dt, 3, {D, B, H}};
        outs[5] = (opc_shape){dt, 3, {D, B, H}};
        outs[6] = (opc_shape){dt, 2, {D, 3 * H}};
    }
    return OPC_OK;
}

int32_t opc_prep_lstm_train(opc_call *c, void *plan, opc_shape *outs) { return prep(c, plan, outs, false); }
int32_t opc_prep_lstm_grad(opc_call *c, void *plan, opc_shape *outs) { return prep(c, plan, outs, true); }

/* ---- compute, per dtype --------------------------------------------------------------------- */

static inline double lstm_sigmoid_d(double x) { return 1.0 / (1.0 + exp(-x)); }

/* float32 logistic sigmoid for the gate loops: opc_sigmoidf's value for |x| <= 87 (where opc_expf and
 * opc_expf_inrange agree bitwise), the argument of the exponential clamped to [-87, 87] beyond (the
 * result then differs from 0 or 1 by less than 2e-38), NaN kept; about a third fewer vector
 * instructions than opc_expf's clamps and selects. */
static inline float lstm_sigmoidf(float x) {
    float a = -x;
    a = a < -87.0f ? -87.0f : a;
    a = a > 87.0f ? 87.0f : a;
    float s = 1.0f / (1.0f + opc_expf_inrange(a));
    return x == x ? s : x;
}

/* Steps per chunk of the forward's X W^T products: about 768 KiB of products (192 rows at H = 256, float32), so
 * a thread's half of them, its X rows and its packed W and R share a 2 MiB L2 (384 rows measured 2.5% slower
 * there). Fixed by the shapes alone; the chunking changes no result bit either way. */
static int64_t lstm_chunk_steps(int64_t S, int64_t B, int64_t H, size_t es) {
    const int64_t rows = (int64_t)(((size_t)768 << 10) / ((size_t)(4 * H > 0 ? 4 * H : 1) * es));
    int64_t n = B > 0 ? (rows + B - 1) / B : S;
    return n < 1 ? 1 : (n > S ? (S > 0 ? S : 1) : n);
}

/* float32 tanh for the gate loops, one exponential and no expm1: an odd Taylor polynomial (to x^13,
 * truncation < 1e-9 relative) below |x| = 0.35, 1 - 2 / (e^2|x| + 1) above (e^2|x| in range: 2|x|
 * clamped to 87, where the result is 1 already). Within 2.0 ulp of tanh over all floats (opc_tanhf:
 * 3.0; both measured against double tanh on every 37th float), +-1 at +-inf, NaN kept, about a third
 * fewer vector instructions. */
static inline float lstm_tanhf(float x) {
    float ax = fabsf(x), z = ax * ax;
    float p = 21844.0f / 6081075.0f;
    p = OPC_FMA(p, z, -1382.0f / 155925.0f);
    p = OPC_FMA(p, z, 62.0f / 2835.0f);
    p = OPC_FMA(p, z, -17.0f / 315.0f);
    p = OPC_FMA(p, z, 2.0f / 15.0f);
    p = OPC_FMA(p, z, -1.0f / 3.0f);
    float small = OPC_FMA(ax * z, p, ax);
    float a2 = 2.0f * ax;
    a2 = a2 > 87.0f ? 87.0f : a2;
    float big = 1.0f - 2.0f / (opc_expf_inrange(a2) + 1.0f);
    float t = ax >= 0.35f ? big : small; /* NaN: small, NaN */
    return copysignf(t, x);
}

/* The step products, and the forward's X W^T per chunk, use opc_sgemm_packed (R and W packed once) for float32
 * where this build has AVX2 + FMA: at AVX2, LSTMTraining took 5.5 % less time than with OpenBLAS's Haswell
 * kernels for X W^T (once compared with its AVX-512 kernels, which OpenBLAS ran at every level unless held).
 * At the baseline level, and for float64, the BLAS. */
#if defined(__AVX2__) && defined(__FMA__)
#define LSTM_PACKED_F32 1
#else
#define LSTM_PACKED_F32 0
#endif

#define T float
#define SFX(name) name##_f32
#define SIGM lstm_sigmoidf
#define TANH lstm_tanhf
#define DT OPC_FLOAT
#define LSTM_PACKED LSTM_PACKED_F32
#include "lstm_impl.h"
#undef LSTM_PACKED
#undef T
#undef SFX
#undef SIGM
#undef TANH
#undef DT

#define T double
#define SFX(name) name##_f64
#define SIGM lstm_sigmoid_d
#define TANH tanh
#define DT OPC_DOUBLE
#define LSTM_PACKED 0
#include "lstm_impl.h"
#undef LSTM_PACKED
#undef T
#undef SFX
#undef SIGM
#undef TANH
#undef DT

int32_t opc_exec_lstm_train(opc_call *c, const void *plan, opc_tensor *outs) {
    const lstm_plan *p = plan;
    int prev = opc_blas_set_threads(1);
    int32_t s = p->dtype == OPC_FLOAT ? lstm_forward_f32(c, p, outs) : lstm_forward_f64(c, p, outs);
    opc_blas_set_threads(prev);
    return s;
}

int32_t opc_exec_lstm_grad(opc_call *c, const void *plan, opc_tensor *outs) {
    const lstm_plan *p = plan;
    int prev = opc_blas_set_threads(1);
    int32_t s = p->dtype == OPC_FLOAT ? lstm_backward_f32(c, p, outs) : lstm_backward_f64(c, p, outs);
    opc_blas_set_threads(prev);
    return s;
}

/* ---- registry entries (listed in ops.def; held against the specs by tests/openmp/test_descriptors.py) ---- */

/* The schema's T is float32; float64 is computed for the library's own precision tests. */
static const int32_t DT_F32[] = {OPC_FLOAT};
static const int32_t DT_F64[] = {OPC_DOUBLE};
static const char *const LSTMT_IN[] = {"X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"};
static const uint8_t LSTMT_OPT[] = {0, 0, 0, 1, 1, 1, 1, 1};
static const char *const LSTMT_OUT[] = {"HAll", "Ht", "Ct", "CAll", "IOFC"};
static const char *const LSTMG_IN[] = {"X", "W", "R", "sequence_lens", "initial_h", "initial_c",
                                       "HAll", "CAll", "IOFC", "grad_HAll", "grad_Ht", "grad_Ct"};
static const uint8_t LSTMG_OPT[] = {0, 0, 0, 1, 1, 1, 0, 0, 0, 1, 1, 1};
static const char *const LSTMG_OUT[] = {"dX", "dW", "dR", "dB", "dH0", "dC0", "dP"};
static const char *const LSTM_ATTR[] = {"hidden_size", "direction", "activations", "activation_alpha",
                                        "activation_beta", "clip", "input_forget"};
/* LSTMGrad: dB_shape / dP_shape, the shapes a model declares for dB and dP (B and P are no inputs) */
static const char *const LSTMG_ATTR[] = {"hidden_size", "direction", "activations", "activation_alpha",
                                         "activation_beta", "clip", "input_forget", "dB_shape", "dP_shape"};

OPC_DEFINE_OP(LSTMTraining) = {
    .desc = {.name = "LSTMTraining", OPC_INPUTS(LSTMT_IN, LSTMT_OPT), OPC_OUTPUTS(LSTMT_OUT), OPC_DTYPES(DT_F32),
             OPC_ATTRS(LSTM_ATTR), OPC_EXTRA_DTYPES(DT_F64),
             .notes = "gates i, o, f, c; IOFC holds their post-activation values; P = [Pi, Po, Pf]; missing B, "
                      "initial_h, initial_c, P count as zeros (P absent: no peephole terms at all)"},
    .prepare = opc_prep_lstm_train, .exec = opc_exec_lstm_train};

OPC_DEFINE_OP(LSTMGrad) = {
    .desc = {.name = "LSTMGrad", OPC_INPUTS(LSTMG_IN, LSTMG_OPT), OPC_OUTPUTS(LSTMG_OUT), OPC_DTYPES(DT_F32),
             OPC_ATTRS(LSTMG_ATTR), OPC_EXTRA_DTYPES(DT_F64),
             .notes = "the gradient of an LSTM without peepholes (dP at P = 0; dB although B is no input); clip "
                      "rejected (invalid: the saved gates cannot tell where it cut); f or g LeakyRelu / Elu with "
                      "alpha < 0 rejected (not invertible from the saved IOFC); missing initial_h, initial_c, grad_* "
                      "count as zeros; dB_shape / dP_shape (optional) must be [D, 8H] / [D, 3H]"},
    .prepare = opc_prep_lstm_grad, .exec = opc_exec_lstm_grad};
