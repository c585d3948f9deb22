/* GRUTraining and GRUGrad (com.microsoft), ONNX GRU-14 semantics, gate order z, r, h.
 * Validation and dispatch here; the computation is gru_impl.h, instantiated for float and double.
 * The full ONNX GRU contract: forward, reverse and bidirectional directions, every ONNX RNN
 * activation (with activation_alpha / activation_beta), clip and variable sequence_lens; layout 1
 * (not an attribute of the com.microsoft ops) is reported as not implemented.
 *
 * Threads: OpenMP only. OpenBLAS is held to 1 thread for the whole call; the batched GEMMs are
 * split over OpenMP threads (opc_gemm_par) and the recurrence runs in one parallel region where
 * each thread owns whole blocks of hidden columns (their GEMMs and gate math), so OpenBLAS's own
 * busy-waiting pool never competes with the OpenMP threads. Block boundaries depend on the shapes
 * only and every sum runs in a fixed order: results are bitwise identical for any thread count. */
#include <omp.h>
#include <stdlib.h>

#include "blas.h"
#include "call.h"
#include "rnn_common.h"
#include "vmath.h"

typedef rnn_act gru_act;

typedef struct {
    int32_t dtype;
    int64_t S, B, I, H;
    int64_t D;           /* directions: 2 for bidirectional (index 0 forward, 1 reverse) */
    bool reverse;        /* D = 1: direction reverse */
    gru_act act[2][2];   /* [direction][f for z and r, g for h~] */
    bool sigmoid_tanh[2]; /* [direction]: f = Sigmoid and g = Tanh, the vectorised gate loops */
    bool varlen;         /* sequence_lens given with some entry < seq_length */
    bool lbr;
    bool has_clip;
    double clip;
    bool grad;
} gru_plan;

/* activations: 2 per direction (f for z and r, g for h~); GRUGrad takes both slopes from the saved ZRH. */
static int32_t bind_activations(opc_call *c, gru_plan *p) {
    static const char *const defaults[] = {"Sigmoid", "Tanh"};
    static const bool from_output[] = {true, true};
    rnn_act acts[4];
    int32_t s = rnn_bind_activations(c, p->D, 2, defaults, "f for z/r, g for h", p->grad ? from_output : NULL, acts);
    if (s) return s;
    for (int64_t d = 0; d < p->D; d++) {
        p->act[d][0] = acts[2 * d];
        p->act[d][1] = acts[2 * d + 1];
        p->sigmoid_tanh[d] = p->act[d][0].kind == ACT_SIGMOID && p->act[d][1].kind == ACT_TANH;
    }
    return OPC_OK;
}

#define check_shape rnn_check_shape

static int32_t prep(opc_call *c, gru_plan *p, opc_shape *outs, bool grad) {
    int32_t s;
    char b1[200];
    for (int32_t i = 0; i < 3; i++)
        if ((s = opc_require(c, i))) return s;
    if (grad && ((s = opc_require(c, 6)) || (s = opc_require(c, 7)))) return s;
    const opc_tensor *x = c->in[0];
    if ((s = opc_check_supported_dtype(c, x->dtype))) return s;
    const int32_t idx[] = {0, 1, 2, 3, 5, 6, 7, 8, 9};
    if ((s = opc_check_dtypes(c, x->dtype, idx, grad ? 9 : 5))) return s;
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
    if ((s = bind_activations(c, p))) return s;
    bool clip_given;
    if ((s = opc_attr_float(c, "clip", 0.0, &p->clip, &clip_given))) return s;
    p->has_clip = clip_given;
    if (clip_given && !(p->clip > 0.0))
        return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "clip must be > 0, got %g", p->clip);
    int64_t lbr, layout;
    if ((s = opc_attr_int(c, "linear_before_reset", 0, &lbr))) return s;
    if (lbr != 0 && lbr != 1)
        return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "linear_before_reset must be 0 or 1, got %lld", (long long)lbr);
    p->lbr = lbr == 1;
    if ((s = opc_attr_int(c, "layout", 0, &layout))) return s;
    if (layout == 1)
        return opc_fail(c, OPC_ERR_NOT_IMPLEMENTED, "layout=1 (batch-major) is not supported; use layout 0");
    if (layout != 0)
        return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "layout must be 0 or 1, got %lld", (long long)layout);

    if (x->rank != 3)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "X must have rank 3 [seq_length, batch, input_size], got shape %s",
                        opc_shape_str(x, b1, sizeof b1));
    int64_t S = x->shape[0], B = x->shape[1], I = x->shape[2], H = hs, D = p->D;
    p->S = S;
    p->B = B;
    p->I = I;
    p->H = H;
    const int64_t wdims[] = {D, 3 * H, I}, rdims[] = {D, 3 * H, H}, bdims[] = {D, 6 * H}, hdims[] = {D, B, H},
                  halldims[] = {S, D, B, H}, zrhdims[] = {S, D, B, 3 * H}, sldims[] = {B};
    if ((s = check_shape(c, 1, 3, wdims)) || (s = check_shape(c, 2, 3, rdims))) return s;
    if (c->in[3] && (s = check_shape(c, 3, 2, bdims))) return s;
    if (c->in[5] && (s = check_shape(c, 5, 3, hdims))) return s;
    if (c->in[4]) {
        const opc_tensor *sl = c->in[4];
        if (sl->dtype != OPC_INT32)
            return opc_fail(c, OPC_ERR_UNSUPPORTED_DTYPE, "sequence_lens must be int32, got %s", opc_dtype_name(sl->dtype));
        if ((s = check_shape(c, 4, 1, sldims))) return s;
        for (int64_t b = 0; b < B; b++) {
            int32_t v = ((const int32_t *)sl->data)[b];
            if (v < 0 || v > S)
                return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "sequence_lens[%lld] = %d is outside [0, seq_length=%lld]",
                                (long long)b, (int)v, (long long)S);
            if (v != S) p->varlen = true;
        }
    }
    if (grad) {
        if ((s = check_shape(c, 6, 4, halldims)) || (s = check_shape(c, 7, 4, zrhdims))) return s;
        if (c->in[8] && (s = check_shape(c, 8, 4, halldims))) return s;
        if (c->in[9] && (s = check_shape(c, 9, 3, hdims))) return s;
    }
    int64_t t1, t2;
    if (!opc_mul_ok(S, B, &t1) || !opc_mul_ok(t1, 3 * H, &t2) || !opc_mul_ok(t2, D, &t2) || t2 > OPC_MAX_ELEMS ||
        !opc_mul_ok(t1, I, &t2) || !opc_blas_dims_ok(t1, 3 * H, I) || !opc_mul_ok(3 * H, H, &t2))
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "sizes exceed the BLAS's 32-bit dimensions");

    int32_t dt = x->dtype;
    if (!grad) {
        outs[0] = (opc_shape){dt, 4, {S, D, B, H}};
        outs[1] = (opc_shape){dt, 3, {D, B, H}};
        outs[2] = (opc_shape){dt, 4, {S, D, B, 3 * H}};
    } else {
        outs[0] = (opc_shape){dt, 3, {S, B, I}};
        outs[1] = (opc_shape){dt, 3, {D, 3 * H, I}};
        outs[2] = (opc_shape){dt, 3, {D, 3 * H, H}};
        outs[3] = (opc_shape){dt, 2, {D, 6 * H}};
        outs[4] = (opc_shape){dt, 3, {D, B, H}};
    }
    return OPC_OK;
}

int32_t opc_prep_gru_train(opc_call *c, void *plan, opc_shape *outs) { return prep(c, plan, outs, false); }
int32_t opc_prep_gru_grad(opc_call *c, void *plan, opc_shape *outs) { return prep(c, plan, outs, true); }

/* ---- compute, per dtype --------------------------------------------------------------------- */

static inline double sigmoid_d(double x) { return 1.0 / (1.0 + exp(-x)); }

#define gru_blocks(H, hb, nblk) rnn_blocks((H), 96, (hb), (nblk))

#define T float
#define SFX(name) name##_f32
#define SIGM opc_sigmoidf
#define TANH opc_tanhf
#define DT OPC_FLOAT
#include "gru_impl.h"
#undef T
#undef SFX
#undef SIGM
#undef TANH
#undef DT

#define T double
#define SFX(name) name##_f64
#define SIGM sigmoid_d
#define TANH tanh
#define DT OPC_DOUBLE
#include "gru_impl.h"
#undef T
#undef SFX
#undef SIGM
#undef TANH
#undef DT

int32_t opc_exec_gru_train(opc_call *c, const void *plan, opc_tensor *outs) {
    const gru_plan *p = plan;
    int prev = opc_blas_set_threads(1);
    int32_t s = p->dtype == OPC_FLOAT ? gru_forward_f32(c, p, outs) : gru_forward_f64(c, p, outs);
    opc_blas_set_threads(prev);
    return s;
}

int32_t opc_exec_gru_grad(opc_call *c, const void *plan, opc_tensor *outs) {
    const gru_plan *p = plan;
    int prev = opc_blas_set_threads(1);
    int32_t s = p->dtype == OPC_FLOAT ? gru_backward_f32(c, p, outs) : gru_backward_f64(c, p, outs);
    opc_blas_set_threads(prev);
    return s;
}

/* ---- registry entries (listed in ops.def; held against the specs by tests/openmp/test_descriptors.py) ---- */

/* The schema's T is float32; float64 is computed for the library's own precision tests. */
static const int32_t DT_F32[] = {OPC_FLOAT};
static const int32_t DT_F64[] = {OPC_DOUBLE};
static const char *const GRUT_IN[] = {"X", "W", "R", "B", "sequence_lens", "initial_h"};
static const uint8_t GRUT_OPT[] = {0, 0, 0, 1, 1, 1};
static const char *const GRUT_OUT[] = {"HAll", "Ht", "ZRH"};
static const char *const GRUG_IN[] = {"X", "W", "R", "B", "sequence_lens", "initial_h",
                                      "HAll", "ZRH", "grad_HAll", "grad_Ht"};
static const uint8_t GRUG_OPT[] = {0, 0, 0, 1, 1, 1, 0, 0, 1, 1};
static const char *const GRUG_OUT[] = {"dX", "dW", "dR", "dB", "dH0"};
static const char *const GRU_ATTR[] = {"hidden_size", "direction", "activations", "activation_alpha",
                                       "activation_beta", "clip", "linear_before_reset"};
/* not in the training schema: ONNX GRU's layout, accepted at 0 only */
static const char *const GRU_EXTRA_ATTR[] = {"layout"};

OPC_DEFINE_OP(GRUTraining) = {
    .desc = {.name = "GRUTraining", OPC_INPUTS(GRUT_IN, GRUT_OPT), OPC_OUTPUTS(GRUT_OUT), OPC_DTYPES(DT_F32),
             OPC_ATTRS(GRU_ATTR), OPC_EXTRA_DTYPES(DT_F64), OPC_EXTRA_ATTRS(GRU_EXTRA_ATTR), .notes = "layout 0 only"},
    .prepare = opc_prep_gru_train, .exec = opc_exec_gru_train};

OPC_DEFINE_OP(GRUGrad) = {
    .desc = {.name = "GRUGrad", OPC_INPUTS(GRUG_IN, GRUG_OPT), OPC_OUTPUTS(GRUG_OUT), OPC_DTYPES(DT_F32),
             OPC_ATTRS(GRU_ATTR), OPC_EXTRA_DTYPES(DT_F64), OPC_EXTRA_ATTRS(GRU_EXTRA_ATTR),
             .notes = "as GRUTraining; LeakyRelu and Elu with alpha < 0 rejected (not invertible from the saved ZRH); "
                      "missing B, initial_h, grad_HAll, grad_Ht count as zeros"},
    .prepare = opc_prep_gru_grad, .exec = opc_exec_gru_grad};
