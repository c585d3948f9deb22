/* Shared by the recurrent ops (gru.c, lstm.c): the ONNX RNN activation table and its binding from the
 * activations / activation_alpha / activation_beta attributes, shape checks, and the fixed column
 * blocks of the recurrences. Element-type code shared by them is rnn_impl.h. */
#ifndef OPC_RNN_COMMON_H
#define OPC_RNN_COMMON_H

#include <ctype.h>

#include "blas.h"
#include "call.h"

/* The ONNX RNN activations (names case-insensitive). alpha / beta: whether the function takes them
 * and its default (NAN: none, the value must be given), those of the ONNX op of the same name. */
enum { ACT_SIGMOID, ACT_TANH, ACT_RELU, ACT_AFFINE, ACT_LEAKYRELU, ACT_THRESHOLDEDRELU, ACT_SCALEDTANH,
       ACT_HARDSIGMOID, ACT_ELU, ACT_SOFTSIGN, ACT_SOFTPLUS, RNN_N_ACTS };

typedef struct {
    const char *name;
    bool alpha, beta;
    double alpha0, beta0;
} rnn_act_info;

static inline const rnn_act_info *rnn_act_table(void) {
    static const rnn_act_info acts[RNN_N_ACTS] = {
        [ACT_SIGMOID] = {"Sigmoid", false, false, NAN, NAN},
        [ACT_TANH] = {"Tanh", false, false, NAN, NAN},
        [ACT_RELU] = {"Relu", false, false, NAN, NAN},
        [ACT_AFFINE] = {"Affine", true, true, NAN, NAN},
        [ACT_LEAKYRELU] = {"LeakyRelu", true, false, 0.01, NAN},
        [ACT_THRESHOLDEDRELU] = {"ThresholdedRelu", true, false, 1.0, NAN},
        [ACT_SCALEDTANH] = {"ScaledTanh", true, true, NAN, NAN},
        [ACT_HARDSIGMOID] = {"HardSigmoid", true, true, 0.2, 0.5},
        [ACT_ELU] = {"Elu", true, false, 1.0, NAN},
        [ACT_SOFTSIGN] = {"Softsign", false, false, NAN, NAN},
        [ACT_SOFTPLUS] = {"Softplus", false, false, NAN, NAN},
    };
    return acts;
}

typedef struct {
    int32_t kind;
    double alpha, beta; /* 0 where the function takes none */
} rnn_act;

static inline bool rnn_ieq(const char *a, const char *b) {
    for (; *a && *b; a++, b++)
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b)) return false;
    return *a == *b;
}

/* Input i has exactly shape dims[0..rank), else INVALID_ARGUMENT naming both shapes. */
static inline int32_t rnn_check_shape(opc_call *c, int32_t i, int32_t rank, const int64_t *dims) {
    const opc_tensor *t = c->in[i];
    bool ok = t->rank == rank;
    for (int32_t k = 0; ok && k < rank; k++) ok = t->shape[k] == dims[k];
    if (!ok) {
        char a[200], b[200];
        return opc_fail(c, OPC_ERR_INVALID_ARGUMENT, "input %s must have shape %s, got %s",
                        c->desc->input_names[i], opc_dims_str(dims, rank, a, sizeof a),
                        opc_shape_str(t, b, sizeof b));
    }
    return OPC_OK;
}

/* activations, activation_alpha, activation_beta -> acts[0 .. D * nf): nf functions per direction
 * (defaults[0 .. nf) when the attribute is absent; `roles` says what each is for, in messages), the
 * alpha and beta lists consumed in order by the functions that take them (values left over are
 * ignored, as onnxruntime does). A gradient op takes slopes from saved outputs, so where
 * from_output[k % nf] it refuses LeakyRelu and Elu with alpha < 0, whose output does not determine
 * the input. */
static inline int32_t rnn_bind_activations(opc_call *c, int64_t D, int nf, const char *const *defaults,
                                           const char *roles, const bool *from_output, rnn_act *acts) {
    const rnn_act_info *tab = rnn_act_table();
    int32_t s;
    const char *const *names;
    int64_t n, na, nb;
    const double *al, *be;
    if ((s = opc_attr_strings(c, "activations", &names, &n)) || (s = opc_attr_floats(c, "activation_alpha", &al, &na)) ||
        (s = opc_attr_floats(c, "activation_beta", &be, &nb)))
        return s;
    if (n >= 0 && n != nf * D)
        return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE,
                        "activations must list %d functions per direction (%s): %lld for %lld direction(s), got %lld",
                        nf, roles, (long long)(nf * D), (long long)D, (long long)n);
    int64_t ia = 0, ib = 0;
    for (int64_t k = 0; k < nf * D; k++) {
        const char *name = n >= 0 ? names[k] : defaults[k % nf];
        int kind = 0;
        while (kind < RNN_N_ACTS && !rnn_ieq(name, tab[kind].name)) kind++;
        if (kind == RNN_N_ACTS)
            return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE,
                            "activation '%s' is not an ONNX RNN activation (Relu, Tanh, Sigmoid, Affine, LeakyRelu, "
                            "ThresholdedRelu, ScaledTanh, HardSigmoid, Elu, Softsign, Softplus)", name);
        rnn_act *a = &acts[k];
        a->kind = kind;
        a->alpha = a->beta = 0.0;
        if (tab[kind].alpha) {
            a->alpha = ia < na ? al[ia++] : tab[kind].alpha0;
            if (isnan(a->alpha))
                return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "activation %s needs an activation_alpha value (it has no default)",
                                name);
        }
        if (tab[kind].beta) {
            a->beta = ib < nb ? be[ib++] : tab[kind].beta0;
            if (isnan(a->beta))
                return opc_fail(c, OPC_ERR_INVALID_ATTRIBUTE, "activation %s needs an activation_beta value (it has no default)",
                                name);
        }
        if (from_output && from_output[k % nf] && (kind == ACT_LEAKYRELU || kind == ACT_ELU) && a->alpha < 0)
            return opc_fail(c, OPC_ERR_NOT_IMPLEMENTED,
                            "activation %s with alpha=%g < 0 is not invertible from its saved output; %s needs "
                            "alpha >= 0", name, a->alpha, c->desc->name);
    }
    return OPC_OK;
}

/* Column blocks of a recurrence: [0, H) in *nblk blocks of *hb columns (the last may be shorter),
 * fixed by H alone so the per-step GEMMs have the same shapes for any thread count. A block holds
 * >= min_block columns where H allows (the GRU's 96 keep repacking R per block cheap for the BLAS;
 * the LSTM's pre-packed R allows 64). */
static inline void rnn_blocks(int64_t H, int64_t min_block, int64_t *hb, int64_t *nblk) {
    int64_t n = opc_block_count(H, min_block, 64);
    int64_t b = ((H + n - 1) / n + 15) / 16 * 16;
    *hb = b < H ? b : H;
    *nblk = (H + *hb - 1) / *hb;
}

/* The row stride of an internal [rows, n] work buffer that GEMM tiles read or write several rows of at once: n,
 * or a cache line more where n elements are a multiple of 2 KiB (4H = 1024 floats), whose rows would all fall
 * in one or two L1 sets. */
static inline int64_t rnn_padded_ld(int64_t n, size_t es) {
    return n * (int64_t)es % 2048 == 0 ? n + 64 / (int64_t)es : n;
}

#endif
