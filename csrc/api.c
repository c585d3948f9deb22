/* Public entry points: op registry, argument validation, dispatch, build facts. */
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "blas.h"
#include "internal.h"
#include "ops.h"

/* ---- registry ------------------------------------------------------------------------------ */

static const char *const IN_DY_X[] = {"dY", "X"};
static const char *const IN_DY_Y[] = {"dY", "Y"};
static const char *const IN_DY_X_B[] = {"dY", "X", "B"};
static const uint8_t REQ2[] = {0, 0};
static const uint8_t REQ3[] = {0, 0, 0};
static const char *const OUT_DX[] = {"dX"};
static const int32_t DT_F32_F64[] = {OPC_FLOAT, OPC_DOUBLE};
static const int32_t DT_SOFTMAX[] = {OPC_FLOAT, OPC_DOUBLE, OPC_FLOAT16, OPC_BFLOAT16};
/* elementwise activation grads: 16-bit types computed in float32, rounded once */
static const int32_t DT_EW[] = {OPC_FLOAT, OPC_DOUBLE, OPC_FLOAT16, OPC_BFLOAT16};
static const char *const ATTR_ALPHA[] = {"alpha"};
static const char *const ATTR_AXIS[] = {"axis"};

/* ConvGrad: float16 computed in float32, rounded once */
static const int32_t DT_CONV[] = {OPC_FLOAT, OPC_DOUBLE, OPC_FLOAT16};
static const char *const CONV_IN[] = {"dY", "X", "W"};
static const char *const CONV_OUT[] = {"dX", "dW", "dB"};
static const char *const CONV_ATTR[] = {"auto_pad", "kernel_shape", "pads", "strides", "dilations", "group"};

static const char *const GRUT_IN[] = {"X", "W", "R", "B", "sequence_lens", "initial_h"};
static const uint8_t GRUT_OPT[] = {0, 0, 0, 1, 1, 1};
static const char *const GRUT_OUT[] = {"HAll", "Ht", "ZRH"};
static const char *const GRUG_IN[] = {"X", "W", "R", "B", "sequence_lens", "initial_h",
                                      "HAll", "ZRH", "grad_HAll", "grad_Ht"};
static const uint8_t GRUG_OPT[] = {0, 0, 0, 1, 1, 1, 0, 0, 1, 1};
static const char *const GRUG_OUT[] = {"dX", "dW", "dR", "dB", "dH0"};
static const char *const GRU_ATTR[] = {"hidden_size", "direction", "activations", "activation_alpha",
                                       "activation_beta", "clip", "linear_before_reset", "layout"};
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

/* LayerNorm / RMSNorm gradients: float16 computed in float32; statistics float32 or float64 */
static const int32_t DT_LN[] = {OPC_FLOAT, OPC_DOUBLE, OPC_FLOAT16};
static const char *const LN_IN[] = {"Y_grad", "X", "scale", "mean", "inv_std_var"};
static const char *const RMS_IN[] = {"Y_grad", "X", "scale", "inv_std_var"};
static const uint8_t REQ4[] = {0, 0, 0, 0};
static const uint8_t REQ5[] = {0, 0, 0, 0, 0};
static const char *const LN_OUT[] = {"X_grad", "scale_grad", "bias_grad"};

/* BatchNormalizationGrad: variance holds the saved inverse std; all inputs one dtype, float16 in float32 */
static const char *const BN_IN[] = {"dY", "X", "scale", "mean", "variance"};
static const char *const ATTR_EPSILON[] = {"epsilon"};

/* Pool gradients (ai.onnx domain): dX_shape is the shape the model declares for dX */
static const char *const MPG_IN[] = {"dY", "Indices"};
static const char *const MPG_ATTR[] = {"dX_shape"};
static const char *const APG_IN[] = {"dY"};
static const uint8_t REQ1[] = {0};
static const char *const APG_ATTR[] = {"kernel_shape", "strides", "auto_pad", "pads", "count_include_pad",
                                       "ceil_mode", "dX_shape"};

/* DropoutGrad: mask and training_mode bool; ratio any float type; 16-bit dy computed in float32 */
static const char *const DROPOUT_IN[] = {"dy", "mask", "ratio", "training_mode"};
static const uint8_t DROPOUT_OPT[] = {0, 0, 1, 1};
static const char *const DROPOUT_OUT[] = {"dx"};

/* GatherGrad / GatherElementsGrad: shape int64 (or int32) values are dX's shape; indices int32 or int64 */
static const char *const GG_IN[] = {"shape", "indices", "dY"};
static const char *const GEG_IN[] = {"dY", "shape", "indices"};
static const int32_t DT_GG[] = {OPC_FLOAT, OPC_DOUBLE, OPC_FLOAT16, OPC_BFLOAT16};

/* SoftmaxCrossEntropyLossGrad: label int32 or int64; 16-bit types computed in float32 */
static const char *const SCE_IN[] = {"dY", "log_prob", "label", "weight"};
static const uint8_t SCE_OPT[] = {0, 0, 0, 1};
static const char *const SCE_OUT[] = {"d_logits"};
static const char *const SCE_ATTR[] = {"reduction", "ignore_index"};

#define EW(NAME, IN, NIN, REQ, ATTRS, NATTR, DTS, NDT, NOTES, PREP, EXEC)                         \
    {{NAME, NIN, IN, REQ, 1, OUT_DX, NDT, DTS, NATTR, ATTRS, NOTES}, PREP, EXEC, NULL}
/* one output, and input values (indices, labels) that CHECK validates on every call */
#define EWC(NAME, IN, NIN, REQ, ATTRS, NATTR, DTS, NDT, NOTES, PREP, EXEC, CHECK)                  \
    {{NAME, NIN, IN, REQ, 1, OUT_DX, NDT, DTS, NATTR, ATTRS, NOTES}, PREP, EXEC, CHECK}

static const opc_op_entry OPS[] = {
    EW("ReluGrad", IN_DY_X, 2, REQ2, NULL, 0, DT_EW, 4,
       "dX = X > 0 ? dY : 0 (a select); the second input may be X or Y", opc_prep_relu, opc_exec_ew),
    EW("SigmoidGrad", IN_DY_Y, 2, REQ2, NULL, 0, DT_EW, 4, "dX = dY*Y*(1-Y)",
       opc_prep_sigmoid, opc_exec_ew),
    EW("TanhGrad", IN_DY_Y, 2, REQ2, NULL, 0, DT_EW, 4, "dX = dY*(1-Y*Y)", opc_prep_tanh,
       opc_exec_ew),
    EW("QuickGeluGrad", IN_DY_X, 2, REQ2, ATTR_ALPHA, 1, DT_EW, 4,
       "alpha default 1.702; alpha = 0 gives 0.5*dY even at X = +-inf", opc_prep_quickgelu,
       opc_exec_ew),
    EW("LeakyReluGrad", IN_DY_Y, 2, REQ2, ATTR_ALPHA, 1, DT_EW, 4,
       "alpha default 0.01; dX = Y > 0 ? dY : alpha*dY", opc_prep_leakyrelu, opc_exec_ew),
    EW("GeluGrad", IN_DY_X, 2, REQ2, NULL, 0, DT_EW, 4, "exact (erf) Gelu; limits 1 and 0 at +-inf",
       opc_prep_gelu, opc_exec_ew),
    EW("FastGeluGrad", IN_DY_X, 2, REQ2, NULL, 0, DT_EW, 4,
       "tanh-approximation Gelu; limits 1 and 0 at +-inf", opc_prep_fastgelu, opc_exec_ew),
    EW("BiasGeluGrad_dX", IN_DY_X_B, 3, REQ3, NULL, 0, DT_EW, 4,
       "GeluGrad at X + B, B 1-D over the last axis", opc_prep_biasgelu, opc_exec_ew),
    EW("BiasFastGeluGrad_dX", IN_DY_X_B, 3, REQ3, NULL, 0, DT_EW, 4,
       "FastGeluGrad at X + B, B 1-D over the last axis", opc_prep_biasfastgelu, opc_exec_ew),
    EW("SoftmaxGrad", IN_DY_Y, 2, REQ2, ATTR_AXIS, 1, DT_SOFTMAX, 4,
       "legacy: 2-D coercion at axis (default 1); f16/bf16 accumulate in float32", opc_prep_softmax,
       opc_exec_softmax),
    EW("SoftmaxGrad_13", IN_DY_Y, 2, REQ2, ATTR_AXIS, 1, DT_SOFTMAX, 4,
       "reduces over the single axis (default -1); f16/bf16 accumulate in float32",
       opc_prep_softmax13, opc_exec_softmax),
    EW("LogSoftmaxGrad", IN_DY_X, 2, REQ2, ATTR_AXIS, 1, DT_SOFTMAX, 4,
       "second input is the LogSoftmax output; legacy 2-D coercion (default axis 1)",
       opc_prep_logsoftmax, opc_exec_softmax),
    EW("LogSoftmaxGrad_13", IN_DY_X, 2, REQ2, ATTR_AXIS, 1, DT_SOFTMAX, 4,
       "second input is the LogSoftmax output; single axis (default -1)", opc_prep_logsoftmax13,
       opc_exec_softmax),
    {{"ConvGrad", 3, CONV_IN, REQ3, 3, CONV_OUT, 3, DT_CONV, 6, CONV_ATTR,
      "N-D conv (rank >= 3); all auto_pad modes honoured; any subset of outputs; explicit non-zero "
      "pads together with auto_pad != NOTSET are rejected"},
     opc_prep_conv, opc_exec_conv},
    {{"GRUTraining", 6, GRUT_IN, GRUT_OPT, 3, GRUT_OUT, 2, DT_F32_F64, 8, GRU_ATTR,
      "layout 0 only"},
     opc_prep_gru_train, opc_exec_gru_train},
    {{"GRUGrad", 10, GRUG_IN, GRUG_OPT, 5, GRUG_OUT, 2, DT_F32_F64, 8, GRU_ATTR,
      "as GRUTraining; LeakyRelu and Elu with alpha < 0 rejected (not invertible from the saved ZRH); "
      "missing B, initial_h, grad_HAll, grad_Ht count as zeros"},
     opc_prep_gru_grad, opc_exec_gru_grad},
    {{"LSTMTraining", 8, LSTMT_IN, LSTMT_OPT, 5, LSTMT_OUT, 2, DT_F32_F64, 7, LSTM_ATTR,
      "gates i, o, f, c; IOFC holds their post-activation values; P = [Pi, Po, Pf]; missing B, initial_h, "
      "initial_c, P count as zeros (P absent: no peephole terms at all)"},
     opc_prep_lstm_train, opc_exec_lstm_train},
    {{"LSTMGrad", 12, LSTMG_IN, LSTMG_OPT, 7, LSTMG_OUT, 2, DT_F32_F64, 9, LSTMG_ATTR,
      "the gradient of an LSTM without peepholes (dP at P = 0; dB although B is no input); clip rejected "
      "(invalid: the saved gates cannot tell where it cut); f or g LeakyRelu / Elu with alpha < 0 rejected "
      "(not invertible from the saved IOFC); missing initial_h, initial_c, grad_* count as zeros; dB_shape / "
      "dP_shape (optional) must be [D, 8H] / [D, 3H]"},
     opc_prep_lstm_grad, opc_exec_lstm_grad},
    {{"LayerNormalizationGrad", 5, LN_IN, REQ5, 3, LN_OUT, 3, DT_LN, 1, ATTR_AXIS,
      "rows = dims from axis (default -1) on; mean / inv_std_var one per row, float32 or float64"},
     opc_prep_layernorm_grad, opc_exec_layernorm_grad},
    {{"SimplifiedLayerNormalizationGrad", 4, RMS_IN, REQ4, 2, LN_OUT, 3, DT_LN, 1, ATTR_AXIS,
      "RMSNorm; rows = dims from axis (default -1) on; inv_std_var one per row, float32 or float64"},
     opc_prep_rmsnorm_grad, opc_exec_layernorm_grad},
    {{"BatchNormalizationGrad", 5, BN_IN, REQ5, 3, LN_OUT, 3, DT_LN, 1, ATTR_EPSILON,
      "X [N, C, ...]; variance is the saved inverse std (> 0); epsilon required (>= 0), not used otherwise; "
      "every input one dtype"},
     opc_prep_batchnorm_grad, opc_exec_batchnorm_grad, opc_check_batchnorm_grad},
    EWC("MaxPoolGrad", MPG_IN, 2, REQ2, MPG_ATTR, 1, DT_F32_F64, 2,
        "dX.flat[Indices] += dY; dX_shape (required) is X's shape; every index checked",
        opc_prep_maxpool_grad, opc_exec_maxpool_grad, opc_check_maxpool_grad),
    EW("AveragePoolGrad", APG_IN, 1, REQ1, APG_ATTR, 7, DT_F32_F64, 2,
       "1-D to 3-D; auto_pad, pads, strides, count_include_pad, ceil_mode; dX_shape (required) is X's shape",
       opc_prep_avgpool_grad, opc_exec_avgpool_grad),
    {{"DropoutGrad", 4, DROPOUT_IN, DROPOUT_OPT, 1, DROPOUT_OUT, 4, DT_EW, 0, NULL,
      "dx = mask ? dy / (1 - ratio) : 0 in training mode with ratio > 0, else dy; ratio default 0.5 in [0, 1), "
      "training_mode default false; ratio and training_mode scalars"},
     opc_prep_dropout_grad, opc_exec_dropout_grad},
    {{"SoftmaxCrossEntropyLossGrad", 4, SCE_IN, SCE_OPT, 1, SCE_OUT, 4, DT_EW, 2, SCE_ATTR,
      "log_prob [N, C, d1..dk], label [N, d1..dk] each in [0, C) or ignore_index (checked), weight [C]; "
      "reduction none, sum or mean (default); mean's weight sum in double, in element order"},
     opc_prep_sce_loss_grad, opc_exec_sce_loss_grad, opc_check_sce_loss_grad},
    EWC("GatherGrad", GG_IN, 3, REQ3, ATTR_AXIS, 1, DT_GG, 4,
        "dX = zeros(shape values); dX[.., indices[j], ..] += dY[.., j, ..] along axis (default 0); indices in "
        "[-dim, dim) checked; 16-bit summed in float32", opc_prep_gather_grad, opc_exec_gather_grad,
        opc_check_gather_grad),
    EWC("GatherElementsGrad", GEG_IN, 3, REQ3, ATTR_AXIS, 1, DT_GG, 3,
        "dX = zeros(shape values); dX[p with p[axis] = indices[p]] += dY[p]; indices in [-dim, dim) checked; "
        "float16 summed in float32", opc_prep_gather_elements_grad, opc_exec_gather_elements_grad,
        opc_check_gather_elements_grad),
};

#define N_OPS ((int32_t)(sizeof(OPS) / sizeof(OPS[0])))

int32_t opc_op_count(void) { return N_OPS; }

const opc_op_desc *opc_op_at(int32_t index) {
    return (index >= 0 && index < N_OPS) ? &OPS[index].desc : NULL;
}

static const opc_op_entry *find_entry(const char *name) {
    if (!name) return NULL;
    for (int32_t i = 0; i < N_OPS; i++)
        if (strcmp(OPS[i].desc.name, name) == 0) return &OPS[i];
    return NULL;
}

const opc_op_desc *opc_find_op(const char *name) {
    const opc_op_entry *e = find_entry(name);
    return e ? &e->desc : NULL;
}

int32_t opc_abi_version(void) { return OPC_ABI_VERSION; }

const char *opc_status_name(int32_t s) {
    switch (s) {
    case OPC_OK: return "OPC_OK";
    case OPC_ERR_UNKNOWN_OP: return "OPC_ERR_UNKNOWN_OP";
    case OPC_ERR_INVALID_ARGUMENT: return "OPC_ERR_INVALID_ARGUMENT";
    case OPC_ERR_UNSUPPORTED_DTYPE: return "OPC_ERR_UNSUPPORTED_DTYPE";
    case OPC_ERR_UNKNOWN_ATTRIBUTE: return "OPC_ERR_UNKNOWN_ATTRIBUTE";
    case OPC_ERR_INVALID_ATTRIBUTE: return "OPC_ERR_INVALID_ATTRIBUTE";
    case OPC_ERR_NOT_IMPLEMENTED: return "OPC_ERR_NOT_IMPLEMENTED";
    case OPC_ERR_OUT_OF_MEMORY: return "OPC_ERR_OUT_OF_MEMORY";
    case OPC_ERR_OUTPUT_MISMATCH: return "OPC_ERR_OUTPUT_MISMATCH";
    case OPC_ERR_INTERNAL: return "OPC_ERR_INTERNAL";
    default: return "OPC_ERR_UNKNOWN_STATUS";
    }
}

/* ---- errors -------------------------------------------------------------------------------- */

int32_t opc_fail(opc_call *c, int32_t status, const char *fmt, ...) {
    if (c->err && c->err_len > 0) {
        int k = snprintf(c->err, c->err_len, "%s: ", c->desc ? c->desc->name : "opconform");
        if (k < 0) k = 0;
        if ((size_t)k < c->err_len) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(c->err + k, c->err_len - (size_t)k, fmt, ap);
            va_end(ap);
        }
    }
    return status;
}

/* ---- tensors ------------------------------------------------------------------------------- */

size_t opc_dtype_size(int32_t dt) {
    switch (dt) {
    case OPC_FLOAT: case OPC_INT32: return 4;
    case OPC_DOUBLE: case OPC_INT64: return 8;
    case OPC_BOOL: return 1;
    case OPC_FLOAT16: case OPC_BFLOAT16: return 2;
    default: return 0;
    }
}

const char *opc_dtype_name(int32_t dt) {
    switch (dt) {
    case OPC_FLOAT: return "float32";
    case OPC_DOUBLE: return "float64";
    case OPC_FLOAT16: return "float16";
    case OPC_BFLOAT16: return "bfloat16";
    case OPC_INT32: return "int32";
    case OPC_INT64: return "int64";
    case OPC_BOOL: return "bool";
    default: return "unknown-dtype";
    }
}

int64_t opc_numel(const opc_tensor *t) {
    int64_t n = 1;
    for (int32_t i = 0; i < t->rank; i++) n *= t->shape[i];
    return n;
}

bool opc_same_shape(const opc_tensor *a, const opc_tensor *b) {
    if (a->rank != b->rank) return false;
    for (int32_t i = 0; i < a->rank; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

const char *opc_dims_str(const int64_t *dims, int32_t rank, char *buf, size_t len) {
    size_t k = 0;
    buf[0] = 0;
    k += (size_t)snprintf(buf, len, "[");
    for (int32_t i = 0; i < rank && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, i ? ", %lld" : "%lld", (long long)dims[i]);
    if (k < len) snprintf(buf + k, len - k, "]");
    return buf;
}

const char *opc_shape_str(const opc_tensor *t, char *buf, size_t len) {
    return opc_dims_str(t->shape, t->rank, buf, len);
}

void opc_shape_from(opc_shape *s, const opc_tensor *t) {
    s->dtype = t->dtype;
    s->rank = t->rank;
    for (int32_t i = 0; i < t->rank; i++) s->shape[i] = t->shape[i];
}

int32_t opc_require(opc_call *c, int32_t i) {
    if (i >= c->n_inputs || !c->in[i])
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "required input %d (%s) is missing", i,
                        c->desc->input_names[i]);
    return OPC_OK;
}

int32_t opc_check_supported_dtype(opc_call *c, int32_t dt) {
    for (int32_t i = 0; i < c->desc->n_dtypes; i++)
        if (c->desc->dtypes[i] == dt) return OPC_OK;
    return opc_fail(c, OPC_ERR_UNSUPPORTED_DTYPE, "dtype %s is not supported (supported: %s%s%s%s%s%s%s)",
                    opc_dtype_name(dt), opc_dtype_name(c->desc->dtypes[0]),
                    c->desc->n_dtypes > 1 ? ", " : "",
                    c->desc->n_dtypes > 1 ? opc_dtype_name(c->desc->dtypes[1]) : "",
                    c->desc->n_dtypes > 2 ? ", " : "",
                    c->desc->n_dtypes > 2 ? opc_dtype_name(c->desc->dtypes[2]) : "",
                    c->desc->n_dtypes > 3 ? ", " : "",
                    c->desc->n_dtypes > 3 ? opc_dtype_name(c->desc->dtypes[3]) : "");
}

/* Blocks of values tested branch-free (the loop vectorises); only a block with an offender is searched. */
#define OUTSIDE_BLOCK 4096

static bool block_outside(const void *data, int32_t dtype, int64_t i0, int64_t i1, int64_t lo, uint64_t span,
                          bool has_skip, int64_t skip) {
    unsigned bad = 0;
    if (dtype == OPC_INT64) {
        const int64_t *v = data;
        for (int64_t i = i0; i < i1; i++)
            bad |= ((uint64_t)v[i] - (uint64_t)lo >= span) & !(has_skip & (v[i] == skip));
    } else {
        const int32_t *v = data;
        for (int64_t i = i0; i < i1; i++)
            bad |= ((uint64_t)(int64_t)v[i] - (uint64_t)lo >= span) & !(has_skip & ((int64_t)v[i] == skip));
    }
    return bad != 0;
}

int64_t opc_first_outside(const void *data, int32_t dtype, int64_t count, int64_t lo, int64_t hi,
                          bool has_skip, int64_t skip, int32_t threads) {
    if (count <= 0) return -1;
    const uint64_t span = hi > lo ? (uint64_t)hi - (uint64_t)lo : 0; /* [lo, hi) empty: every value is outside */
    const int64_t blocks = (count + OUTSIDE_BLOCK - 1) / OUTSIDE_BLOCK;
    int64_t want = count / opc_grain(1 << 20) + 1; /* a thread per million values at most */
    int nt = (int)(want < threads ? want : threads);
    if (nt > blocks) nt = (int)blocks;
    int64_t first = blocks; /* the first block holding an offender */
#pragma omp parallel num_threads(nt > 1 ? nt : 1) reduction(min : first)
    {
        int64_t b0, b1;
        opc_split(blocks, omp_get_num_threads(), omp_get_thread_num(), 1, &b0, &b1);
        for (int64_t b = b0; b < b1; b++) {
            int64_t i1 = (b + 1) * OUTSIDE_BLOCK < count ? (b + 1) * OUTSIDE_BLOCK : count;
            if (block_outside(data, dtype, b * OUTSIDE_BLOCK, i1, lo, span, has_skip, skip)) {
                first = b;
                break;
            }
        }
    }
    if (first == blocks) return -1;
    int64_t end = (first + 1) * OUTSIDE_BLOCK < count ? (first + 1) * OUTSIDE_BLOCK : count;
    for (int64_t i = first * OUTSIDE_BLOCK; i < end; i++) {
        int64_t v = opc_int_at(data, dtype, i);
        if ((uint64_t)v - (uint64_t)lo >= span && !(has_skip && v == skip)) return i;
    }
    return -1; /* not reached: the block held one */
}

int32_t opc_check_dtypes(opc_call *c, int32_t dt, const int32_t *idx, int32_t n) {
    for (int32_t k = 0; k < n; k++) {
        int32_t i = idx[k];
        if (i < c->n_inputs && c->in[i] && c->in[i]->dtype != dt)
            return opc_fail(c, OPC_ERR_UNSUPPORTED_DTYPE,
                            "input %s has dtype %s but %s has %s: all float inputs must share one dtype",
                            c->desc->input_names[i], opc_dtype_name(c->in[i]->dtype),
                            c->desc->input_names[idx[0]], opc_dtype_name(dt));
    }
    return OPC_OK;
}

/* ---- attributes ---------------------------------------------------------------------------- */

static const char *kind_name(int32_t k) {
    switch (k) {
    case OPC_ATTR_INT: return "int";
    case OPC_ATTR_FLOAT: return "float";
    case OPC_ATTR_STRING: return "string";
    case OPC_ATTR_INTS: return "ints";
    case OPC_ATTR_FLOATS: return "floats";
    case OPC_ATTR_STRINGS: return "strings";
    default: return "unknown-kind";
    }
}

const opc_attr *opc_attr_get(const opc_call *c, const char *name) {
    for (int32_t i = 0; i < c->n_attrs; i++)
        if (strcmp(c->attrs[i].name, name) == 0) return &c->attrs[i];
    return NULL;
}

static int32_t wrong_kind(opc_call *c, const opc_attr *a, const char *want) {
    return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "attribute '%s' must be of type %s, got %s",
                    a->name, want, kind_name(a->kind));
}

int32_t opc_attr_int(opc_call *c, const char *name, int64_t dflt, int64_t *out) {
    const opc_attr *a = opc_attr_get(c, name);
    *out = dflt;
    if (!a) return OPC_OK;
    if (a->kind != OPC_ATTR_INT) return wrong_kind(c, a, "int");
    *out = a->i;
    return OPC_OK;
}

int32_t opc_attr_float(opc_call *c, const char *name, double dflt, double *out, bool *given) {
    const opc_attr *a = opc_attr_get(c, name);
    *out = dflt;
    if (given) *given = a != NULL;
    if (!a) return OPC_OK;
    if (a->kind == OPC_ATTR_FLOAT) *out = a->f;
    else if (a->kind == OPC_ATTR_INT) *out = (double)a->i;
    else return wrong_kind(c, a, "float");
    return OPC_OK;
}

int32_t opc_attr_ints(opc_call *c, const char *name, const int64_t **out, int64_t *n) {
    const opc_attr *a = opc_attr_get(c, name);
    *out = NULL;
    *n = -1;
    if (!a) return OPC_OK;
    if (a->kind != OPC_ATTR_INTS) return wrong_kind(c, a, "ints");
    *out = a->ints;
    *n = a->n;
    return OPC_OK;
}

int32_t opc_attr_floats(opc_call *c, const char *name, const double **out, int64_t *n) {
    const opc_attr *a = opc_attr_get(c, name);
    *out = NULL;
    *n = -1;
    if (!a) return OPC_OK;
    if (a->kind != OPC_ATTR_FLOATS) return wrong_kind(c, a, "floats");
    *out = a->floats;
    *n = a->n;
    return OPC_OK;
}

int32_t opc_attr_string(opc_call *c, const char *name, const char *dflt, const char **out) {
    const opc_attr *a = opc_attr_get(c, name);
    *out = dflt;
    if (!a) return OPC_OK;
    if (a->kind != OPC_ATTR_STRING) return wrong_kind(c, a, "string");
    *out = a->s;
    return OPC_OK;
}

int32_t opc_attr_strings(opc_call *c, const char *name, const char *const **out, int64_t *n) {
    const opc_attr *a = opc_attr_get(c, name);
    *out = NULL;
    *n = -1;
    if (!a) return OPC_OK;
    if (a->kind != OPC_ATTR_STRINGS) return wrong_kind(c, a, "strings");
    *out = a->strings;
    *n = a->n;
    return OPC_OK;
}

/* ---- dispatch ------------------------------------------------------------------------------ */

static int32_t check_tensor(opc_call *c, const opc_tensor *t, const char *what, const char *name) {
    if (t->rank > OPC_MAX_RANK)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "%s %s has rank %d; at most %d is supported",
                        what, name, (int)t->rank, OPC_MAX_RANK);
    if (t->rank > 0 && !t->shape)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "%s %s has rank %d but a NULL shape", what,
                        name, (int)t->rank);
    if (opc_dtype_size(t->dtype) == 0)
        return opc_fail(c, OPC_ERR_UNSUPPORTED_DTYPE, "%s %s has unknown dtype code %d", what, name,
                        (int)t->dtype);
    int64_t n = 1;
    for (int32_t i = 0; i < t->rank; i++) {
        if (t->shape[i] < 0)
            return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "%s %s has negative dimension %lld at axis %d",
                            what, name, (long long)t->shape[i], (int)i);
        if (!opc_mul_ok(n, t->shape[i], &n) || n > OPC_MAX_ELEMS)
            return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "%s %s is too large (element count overflows)",
                            what, name);
    }
    return OPC_OK;
}

static int32_t setup(opc_call *c, const char *op, int32_t n_inputs, const opc_tensor *inputs,
                     int32_t n_attrs, const opc_attr *attrs, int32_t n_outputs, char *err,
                     size_t err_len, const opc_op_entry **entry) {
    memset(c, 0, sizeof *c);
    c->err = err;
    c->err_len = err_len;
    if (err && err_len) err[0] = 0;
    const opc_op_entry *e = find_entry(op);
    if (!e)
        return opc_fail(c, OPC_ERR_UNKNOWN_OP, "unknown op '%s' (opc_op_count/opc_op_at list the ops)",
                        op ? op : "(null)");
    *entry = e;
    c->desc = &e->desc;
    if (n_inputs < 0 || n_inputs > e->desc.n_inputs)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "got %d inputs; the op takes at most %d",
                        (int)n_inputs, (int)e->desc.n_inputs);
    if (n_inputs > 0 && !inputs)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "inputs array is NULL");
    if (n_outputs != e->desc.n_outputs)
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "got %d outputs; the op has exactly %d",
                        (int)n_outputs, (int)e->desc.n_outputs);
    c->n_inputs = e->desc.n_inputs;
    for (int32_t i = 0; i < n_inputs; i++) {
        const opc_tensor *t = &inputs[i];
        if (t->rank < 0 || !t->data) continue;
        int32_t s = check_tensor(c, t, "input", e->desc.input_names[i]);
        if (s) return s;
        c->in[i] = t;
    }
    if (n_attrs < 0 || (n_attrs > 0 && !attrs))
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "bad attribute array (count %d)", (int)n_attrs);
    for (int32_t i = 0; i < n_attrs; i++) {
        const opc_attr *a = &attrs[i];
        if (!a->name) return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "attribute %d has a NULL name", (int)i);
        bool known = false;
        for (int32_t k = 0; k < e->desc.n_attrs; k++)
            if (strcmp(e->desc.attr_names[k], a->name) == 0) known = true;
        if (!known) {
            char names[256] = "none";
            size_t p = 0;
            for (int32_t k = 0; k < e->desc.n_attrs && p < sizeof names; k++)
                p += (size_t)snprintf(names + p, sizeof names - p, k ? ", %s" : "%s", e->desc.attr_names[k]);
            return opc_fail(c, OPC_ERR_UNKNOWN_ATTRIBUTE, "unknown attribute '%s' (accepted: %s)",
                            a->name, names);
        }
        for (int32_t k = 0; k < i; k++)
            if (strcmp(attrs[k].name, a->name) == 0)
                return opc_fail(c, OPC_ERR_UNKNOWN_ATTRIBUTE, "attribute '%s' is given twice", a->name);
        switch (a->kind) {
        case OPC_ATTR_INT: case OPC_ATTR_FLOAT: break;
        case OPC_ATTR_STRING:
            if (!a->s) return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "attribute '%s' has a NULL string", a->name);
            break;
        case OPC_ATTR_INTS: case OPC_ATTR_FLOATS: case OPC_ATTR_STRINGS: {
            const void *p = a->kind == OPC_ATTR_INTS ? (const void *)a->ints
                          : a->kind == OPC_ATTR_FLOATS ? (const void *)a->floats : (const void *)a->strings;
            if (a->n < 0 || a->n > 4096 || (a->n > 0 && !p))
                return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "attribute '%s' has a bad list (length %lld)",
                                a->name, (long long)a->n);
            if (a->kind == OPC_ATTR_STRINGS)
                for (int64_t k = 0; k < a->n; k++)
                    if (!a->strings[k])
                        return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "attribute '%s' has a NULL string", a->name);
            break;
        }
        default:
            return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "attribute '%s' has unknown kind %d", a->name,
                            (int)a->kind);
        }
    }
    c->n_attrs = n_attrs;
    c->attrs = attrs;
    return OPC_OK;
}

int32_t opc_infer(const char *op, int32_t n_inputs, const opc_tensor *inputs, int32_t n_attrs,
                  const opc_attr *attrs, int32_t n_outputs, opc_shape *out_shapes, char *err,
                  size_t err_len) {
    opc_call c;
    const opc_op_entry *e = NULL;
    int32_t s = setup(&c, op, n_inputs, inputs, n_attrs, attrs, n_outputs, err, err_len, &e);
    if (s) return s;
    if (!out_shapes) return opc_fail(&c, OPC_ERR_INVALID_ARGUMENT, "out_shapes is NULL");
    _Alignas(64) unsigned char plan[OPC_PLAN_BYTES];
    memset(plan, 0, sizeof plan);
    opc_shape shapes[OPC_MAX_OUTPUTS];
    memset(shapes, 0, sizeof shapes);
    s = e->prepare(&c, plan, shapes);
    if (s) return s;
    for (int32_t i = 0; i < n_outputs; i++) out_shapes[i] = shapes[i];
    return OPC_OK;
}

int32_t opc_run(const char *op, int32_t n_inputs, const opc_tensor *inputs, int32_t n_attrs,
                const opc_attr *attrs, int32_t n_outputs, opc_tensor *outputs, int32_t threads,
                char *err, size_t err_len) {
    opc_call c;
    const opc_op_entry *e = NULL;
    int32_t s = setup(&c, op, n_inputs, inputs, n_attrs, attrs, n_outputs, err, err_len, &e);
    if (s) return s;
    if (!outputs) return opc_fail(&c, OPC_ERR_INVALID_ARGUMENT, "outputs array is NULL");
    if (threads < 0 || threads > 4096)
        return opc_fail(&c, OPC_ERR_INVALID_ARGUMENT, "threads must be in [0, 4096], got %d", (int)threads);
    c.threads = threads == 0 ? omp_get_max_threads() : threads;
    if (c.threads < 1) c.threads = 1;
    _Alignas(64) unsigned char plan[OPC_PLAN_BYTES];
    memset(plan, 0, sizeof plan);
    opc_shape shapes[OPC_MAX_OUTPUTS];
    memset(shapes, 0, sizeof shapes);
    s = e->prepare(&c, plan, shapes);
    if (s) return s;
    /* The one "no output wanted" return, after the same validation a call with outputs gets: exec checks the
     * input values with the op's check function (or in its own pass, reporting through it). */
    bool wanted = false;
    for (int32_t i = 0; i < n_outputs; i++) wanted = wanted || outputs[i].data != NULL;
    if (!wanted) return e->check ? e->check(&c, plan) : OPC_OK;
    for (int32_t i = 0; i < n_outputs; i++) {
        opc_tensor *o = &outputs[i];
        if (!o->data) continue;
        const opc_shape *w = &shapes[i];
        bool ok = o->dtype == w->dtype && o->rank == w->rank && (o->rank == 0 || o->shape);
        for (int32_t k = 0; ok && k < o->rank; k++) ok = o->shape[k] == w->shape[k];
        if (!ok) {
            char want[200], got[200] = "?";
            opc_dims_str(w->shape, w->rank, want, sizeof want);
            if (o->rank >= 0 && o->rank <= OPC_MAX_RANK && (o->rank == 0 || o->shape))
                opc_dims_str(o->shape, o->rank, got, sizeof got);
            return opc_fail(&c, OPC_ERR_OUTPUT_MISMATCH,
                            "output %d (%s) must be %s %s, got %s %s", (int)i, e->desc.output_names[i],
                            opc_dtype_name(w->dtype), want, opc_dtype_name(o->dtype), got);
        }
    }
    return e->exec(&c, plan, outputs);
}

int32_t opc_force_split = 0;

int32_t opc_set_force_split(int32_t force) {
    int32_t previous = opc_force_split;
    opc_force_split = force != 0;
    return previous;
}

/* The last-level cache's size: an output larger than it cannot stay in cache for the next op anyway, so
 * writing it with non-temporal stores saves the read-for-ownership traffic; a smaller one is better left
 * in cache. glibc reads it from CPUID; some VMs report 0, then sysfs, then a typical 32 MiB. */
static int64_t last_level_cache_bytes(void) {
    long v = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (v <= 0) {
        FILE *f = fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r");
        char unit = 0;
        if (f && fscanf(f, "%ld%c", &v, &unit) >= 1) v *= unit == 'M' ? 1 << 20 : unit == 'K' ? 1 << 10 : 1;
        if (f) fclose(f);
    }
    return v > 0 ? (int64_t)v : (int64_t)32 << 20;
}

static int64_t stream_override = -1; /* set by opc_set_stream_bytes; -1: the last-level cache's size */
static int64_t llc_bytes = 0;        /* measured once */

int64_t opc_stream_bytes(void) {
    int64_t forced = __atomic_load_n(&stream_override, __ATOMIC_RELAXED);
    if (forced >= 0) return forced;
    int64_t llc = __atomic_load_n(&llc_bytes, __ATOMIC_RELAXED);
    if (llc == 0) { /* a race only measures it twice, with the same result */
        llc = last_level_cache_bytes();
        __atomic_store_n(&llc_bytes, llc, __ATOMIC_RELAXED);
    }
    return llc;
}

int64_t opc_set_stream_bytes(int64_t bytes) {
    return __atomic_exchange_n(&stream_override, bytes < 0 ? -1 : bytes, __ATOMIC_RELAXED);
}

/* ---- build facts --------------------------------------------------------------------------- */

#ifndef OPC_COMPILE_FLAGS
#define OPC_COMPILE_FLAGS "unknown"
#endif
#ifndef OPC_BUILD_TYPE
#define OPC_BUILD_TYPE "unknown"
#endif
#ifndef OPC_ISA
#define OPC_ISA "baseline"
#endif
/* The ISA level this build targets, readable (ctypes in_dll) before any of its code runs, so the
 * loader can refuse a level the CPU lacks instead of dying of SIGILL. */
__attribute__((visibility("default"))) const char opc_isa[] = OPC_ISA;

#ifdef OPC_SANITIZE
#define OPC_SANITIZERS "address,undefined"
#else
#define OPC_SANITIZERS ""
#endif

static char build_info[2048];
static pthread_once_t build_once = PTHREAD_ONCE_INIT;

static void make_build_info(void) {
    const char *cfg = scipy_openblas_get_config();
    const char *core = scipy_openblas_get_corename();
    char cfg_clean[512];
    size_t k = 0;
    for (const char *p = cfg ? cfg : ""; *p && k + 1 < sizeof cfg_clean; p++)
        if (*p != '"' && *p != '\\') cfg_clean[k++] = *p;
    cfg_clean[k] = 0;
    snprintf(build_info, sizeof build_info,
             "{\"library\": \"opconform_kernels\", \"abi_version\": %d, \"compiler\": \"gcc %s\", "
             "\"flags\": \"%s\", \"build_type\": \"%s\", \"openmp\": %d, \"omp_max_threads\": %d, "
             "\"blas\": \"scipy-openblas32\", \"blas_config\": \"%s\", \"blas_core\": \"%s\", "
             "\"blas_threads\": %d, \"sanitizers\": \"%s\", \"isa\": \"%s\"}",
             OPC_ABI_VERSION, __VERSION__, OPC_COMPILE_FLAGS, OPC_BUILD_TYPE, _OPENMP,
             omp_get_max_threads(), cfg_clean, core ? core : "", scipy_openblas_get_num_threads(),
             OPC_SANITIZERS, OPC_ISA);
}

const char *opc_build_info(void) {
    pthread_once(&build_once, make_build_info);
    return build_info;
}
