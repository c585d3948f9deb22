/* Element-type code shared by the recurrent ops (gru_impl.h, lstm_impl.h): included by each, once per
 * element type, with T, SFX(name), SIGM and TANH defined (rnn_common.h first). Not a standalone header. */

__attribute__((unused)) static inline T SFX(clipv)(T a, T cl) { return a > cl ? cl : (a < -cl ? -cl : a); }

/* rows x cols block -> acc[j] = sum over rows of A[r*ld + j] (rows in order: deterministic) */
__attribute__((unused)) static void SFX(colsum)(const T *A, int64_t rows, int64_t cols, int64_t ld, T *acc) {
    for (int64_t j = 0; j < cols; j++) acc[j] = 0;
    for (int64_t r = 0; r < rows; r++) {
        const T *a = A + r * ld;
        for (int64_t j = 0; j < cols; j++) acc[j] += a[j];
    }
}

/* y = act(y) over w elements. Functions with an exponential or log other than Sigmoid and Tanh
 * are evaluated in double and rounded once. */
__attribute__((unused)) static void SFX(act_apply)(const rnn_act *a, T *restrict y, int64_t w) {
    const T al = (T)a->alpha, be = (T)a->beta;
    switch (a->kind) {
    case ACT_SIGMOID:
        for (int64_t j = 0; j < w; j++) y[j] = SIGM(y[j]);
        break;
    case ACT_TANH:
        for (int64_t j = 0; j < w; j++) y[j] = TANH(y[j]);
        break;
    case ACT_RELU:
        for (int64_t j = 0; j < w; j++) y[j] = y[j] < 0 ? 0 : y[j]; /* NaN stays NaN */
        break;
    case ACT_AFFINE:
        for (int64_t j = 0; j < w; j++) y[j] = al * y[j] + be;
        break;
    case ACT_LEAKYRELU:
        for (int64_t j = 0; j < w; j++) y[j] = y[j] >= 0 ? y[j] : al * y[j];
        break;
    case ACT_THRESHOLDEDRELU:
        for (int64_t j = 0; j < w; j++) y[j] = y[j] > al ? y[j] : 0; /* ONNX: x > alpha */
        break;
    case ACT_SCALEDTANH:
        for (int64_t j = 0; j < w; j++) y[j] = al * TANH(be * y[j]);
        break;
    case ACT_HARDSIGMOID:
        for (int64_t j = 0; j < w; j++) {
            T v = al * y[j] + be;
            y[j] = v < 0 ? 0 : (v > 1 ? 1 : v);
        }
        break;
    case ACT_ELU:
        for (int64_t j = 0; j < w; j++) y[j] = y[j] >= 0 ? y[j] : (T)(a->alpha * expm1((double)y[j]));
        break;
    case ACT_SOFTSIGN:
        for (int64_t j = 0; j < w; j++) y[j] = y[j] / (1 + (y[j] < 0 ? -y[j] : y[j]));
        break;
    default: /* ACT_SOFTPLUS: log(1 + e^x) without overflow */
        for (int64_t j = 0; j < w; j++) {
            double v = (double)y[j];
            y[j] = (T)((v > 0 ? v : 0) + log1p(exp(-fabs(v))));
        }
        break;
    }
}

/* s = act'(x) from the output y = act(x), over w elements (LeakyRelu and Elu need alpha >= 0, which
 * rnn_bind_activations checks for the gradient ops). */
__attribute__((unused)) static void SFX(act_slope)(const rnn_act *a, const T *restrict y, T *restrict s, int64_t w) {
    const T al = (T)a->alpha, be = (T)a->beta;
    switch (a->kind) {
    case ACT_SIGMOID:
        for (int64_t j = 0; j < w; j++) s[j] = y[j] * (1 - y[j]);
        break;
    case ACT_TANH:
        for (int64_t j = 0; j < w; j++) s[j] = 1 - y[j] * y[j];
        break;
    case ACT_RELU:
        for (int64_t j = 0; j < w; j++) s[j] = y[j] > 0 ? 1 : 0;
        break;
    case ACT_AFFINE:
        for (int64_t j = 0; j < w; j++) s[j] = al;
        break;
    case ACT_LEAKYRELU:
        for (int64_t j = 0; j < w; j++) s[j] = y[j] > 0 ? 1 : al;
        break;
    case ACT_THRESHOLDEDRELU:
        for (int64_t j = 0; j < w; j++) s[j] = y[j] != 0 ? 1 : 0;
        break;
    case ACT_SCALEDTANH: /* a b (1 - tanh^2), tanh = y / a */
        for (int64_t j = 0; j < w; j++) s[j] = al != 0 ? al * be * (1 - (y[j] / al) * (y[j] / al)) : 0;
        break;
    case ACT_HARDSIGMOID:
        for (int64_t j = 0; j < w; j++) s[j] = y[j] > 0 && y[j] < 1 ? al : 0;
        break;
    case ACT_ELU:
        for (int64_t j = 0; j < w; j++) s[j] = y[j] > 0 ? 1 : y[j] + al;
        break;
    case ACT_SOFTSIGN:
        for (int64_t j = 0; j < w; j++) {
            T m = 1 - (y[j] < 0 ? -y[j] : y[j]);
            s[j] = m * m;
        }
        break;
    default: /* ACT_SOFTPLUS: sigmoid(x) = 1 - e^-y */
        for (int64_t j = 0; j < w; j++) s[j] = (T)(-expm1(-(double)y[j]));
        break;
    }
}

