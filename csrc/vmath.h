/*
 * Branch-free float32 elementary functions that GCC auto-vectorises (libm's expf/erff calls
 * would keep the loops scalar). Each keeps the IEEE limits the gradients need (exp(-inf) = 0,
 * exp(+inf) = inf, NaN -> NaN) and is accurate to a few float32 ulp (measured by
 * tests/openmp against float64). float64 code uses libm directly.
 *
 * Polynomial coefficients were fitted for this project (Lawson-weighted least squares on
 * Chebyshev nodes against Python's math.erf / math.erfc).
 */
#ifndef OPC_VMATH_H
#define OPC_VMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Horner steps: with FMA hardware (avx2, avx512 builds) fmaf, one instruction and one rounding;
 * without (baseline SSE2, where fmaf is a libm call per element that keeps loops scalar) a*b + c,
 * two roundings, which -ffp-contract=off keeps unfused. Either way vector body and scalar tail
 * round the same, so results stay independent of the thread split; the float32 accuracy tests in
 * tests/openmp run at every level. */
#ifdef __FMA__
#define OPC_FMA(a, b, c) fmaf((a), (b), (c))
#else
#define OPC_FMA(a, b, c) ((a) * (b) + (c))
#endif

/* z*z as hi + lo exactly (|z| < 1e18): the FMA residual, or Dekker's product of Veltkamp halves. */
static inline float opc_sqr_lo(float z, float hi) {
#ifdef __FMA__
    return fmaf(z, z, -hi);
#else
    float c = 4097.0f * z;
    float zh = c - (c - z), zl = z - zh; /* zh: 12 high bits, zh*zh and zh*zl exact */
    return ((zh * zh - hi) + 2.0f * zh * zl) + zl * zl;
#endif
}

static inline float opc_bits_to_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* exp(r) - 1 for |r| <= ln2/2 (Taylor to r^8: truncation < 1e-9 relative). */
static inline float opc_expm1_poly(float r) {
    float p = 1.0f / 40320.0f;
    p = OPC_FMA(p, r, 1.0f / 5040.0f);
    p = OPC_FMA(p, r, 1.0f / 720.0f);
    p = OPC_FMA(p, r, 1.0f / 120.0f);
    p = OPC_FMA(p, r, 1.0f / 24.0f);
    p = OPC_FMA(p, r, 1.0f / 6.0f);
    p = OPC_FMA(p, r, 0.5f);
    p = OPC_FMA(p, r, 1.0f);
    return p * r;
}

/* exp(r) for |r| <= ln2/2 as 1 + r P(r), P of degree 5 fitted for this project (Lawson-weighted
 * least squares on Chebyshev nodes, minimising relative error): fit error 2e-9, float32 evaluation
 * within 1.6e-7 relative (about 1.5 ulp). Six FMAs instead of the Taylor expm1's nine operations:
 * the vectorised loops of the GELU gradients and LogSoftmaxGrad spend much of their time here. */
static inline float opc_exp_poly(float r) {
    float p = 0.0013843653723597527f;
    p = OPC_FMA(p, r, 0.00837415549904108f);
    p = OPC_FMA(p, r, 0.04166800156235695f);
    p = OPC_FMA(p, r, 0.16666431725025177f);
    p = OPC_FMA(p, r, 0.4999999403953552f);
    p = OPC_FMA(p, r, 1.0f);
    return OPC_FMA(p, r, 1.0f);
}

static inline uint32_t opc_f32_to_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* Range reduction x = n ln2 + r; returns r and the integer n, read from the low bits of the
 * rounding sum (no float-to-int conversion). */
static inline float opc_exp_reduce(float x, int32_t *k_out) {
    const float shifter = 12582912.0f;       /* 1.5 * 2^23: adding it rounds to an integer */
    /* x clamped to [-87, 88.8]: exp(88.8) overflows to inf, as it should, and -87 keeps every
     * intermediate normal (see opc_expf). An integer min of |x|'s bits against the bound for x's
     * sign: a float select with a constant arm would let GCC fold that constant through the whole
     * function and blend every intermediate (twice the vector code). NaN comes out finite: callers
     * select it. */
    uint32_t u = opc_f32_to_bits(x), a = u & 0x7FFFFFFFu;
    uint32_t lim = 0x42B1999Au - (u >> 31) * (0x42B1999Au - 0x42AE0000u); /* 88.8f or 87.0f */
    a = a < lim ? a : lim;
    float xc = opc_bits_to_f32(a | (u & 0x80000000u));
    float t = xc * 1.44269504088896341f + shifter;
    float n = t - shifter;                   /* round(x / ln2) */
    float r = xc - n * 0.693145751953125f;   /* ln2 high part: n * hi is exact */
    r = r - n * 1.428606765330187e-06f;      /* ln2 low part */
    *k_out = (int32_t)(opc_f32_to_bits(t) - opc_f32_to_bits(shifter));
    return r;
}

/* v * 2^k for integral k in [-126, 128] as two factors (each a normal float). */
static inline float opc_pow2_scale(float v, int32_t k) {
    int32_t k1 = k >> 1, k2 = k - k1; /* floor halves: both in [-63, 64] */
    float s1 = opc_bits_to_f32((uint32_t)(k1 + 127) << 23);
    float s2 = opc_bits_to_f32((uint32_t)(k2 + 127) << 23);
    return (v * s1) * s2;
}

/* exp(x); below -87 (exp < 1.7e-38) it returns 0 instead of a subnormal: subnormal arithmetic
 * costs ~100x on x86 (microcode assists) and would make tail-heavy inputs crawl. */
static inline float opc_expf(float x) {
    int32_t k;
    float r = opc_exp_reduce(x, &k);
    float v = opc_pow2_scale(opc_exp_poly(r), k);
    v = x < -87.0f ? 0.0f : v;
    return x == x ? v : x; /* NaN */
}

/* exp(x) for -87 <= x <= 87 only (callers guarantee it; no NaN): no clamp, no selects, and 2^n in
 * one normal factor. Bitwise the same as opc_expf there (its first scale factor is exact), at
 * about 10 fewer vector instructions; the GELU family's arguments are bounded by their clamps. */
static inline float opc_expf_inrange(float x) {
    const float shifter = 12582912.0f;
    float t = x * 1.44269504088896341f + shifter;
    float n = t - shifter;
    float r = x - n * 0.693145751953125f;
    r = r - n * 1.428606765330187e-06f;
    int32_t k = (int32_t)(opc_f32_to_bits(t) - opc_f32_to_bits(shifter));
    return opc_exp_poly(r) * opc_bits_to_f32((uint32_t)(k + 127) << 23);
}

/* expm1 with full relative accuracy near 0. */
static inline float opc_expm1f(float x) {
    float small = opc_expm1_poly(x);         /* |x| <= ln2/2 */
    float big = opc_expf(x) - 1.0f;
    float ax = fabsf(x);
    return ax <= 0.34657359f ? small : big;  /* NaN: big = NaN */
}

/* tanh via expm1(-2|x|): tanh|x| = -m / (2 + m); limits +-1 at +-inf, NaN kept. */
static inline float opc_tanhf(float x) {
    float ax = fabsf(x); /* fabsf and copysignf: bit operations, where a select costs two */
    float m = opc_expm1f(-2.0f * ax);
    float t = -m / (2.0f + m);
    return copysignf(t, x);
}

/* logistic sigmoid; 0 at -inf, 1 at +inf */
static inline float opc_sigmoidf(float x) { return 1.0f / (1.0f + opc_expf(-x)); }

/* erfcx(z) / t = erfc(z) exp(z^2) / t for 0 <= z <= 9.2, t = 1/(1 + z/2) in [0.178, 1]: a degree-8
 * polynomial in t, fitted for this project (Lawson-weighted least squares on Chebyshev nodes against
 * mpmath's erfc; fit error 4.2e-8 relative). One form for the whole range: no second (erf)
 * polynomial and no select between them in the vector loop. */
static inline float opc_erfcx_over_t(float t) {
    float q = -0.05875194130780943f;
    q = OPC_FMA(q, t, 0.2830199942083222f);
    q = OPC_FMA(q, t, -0.48396059862712704f);
    q = OPC_FMA(q, t, 0.27433538169526955f);
    q = OPC_FMA(q, t, -0.024034120078078064f);
    q = OPC_FMA(q, t, 0.20158001732615724f);
    q = OPC_FMA(q, t, 0.2433866055197481f);
    q = OPC_FMA(q, t, 0.28233592121114826f);
    q = OPC_FMA(q, t, 0.2820886983885941f);
    return q;
}

/* Gelu derivative Phi(x) + x phi(x) for |x| <= 12.9 (callers clamp). One exp E = exp(-x^2/2)
 * serves both terms: with z = |x|/sqrt2, Phi(-|x|) = E t Q(t) / 2 (no cancellation in the negative
 * tail, where the result is E (tQ/2 - |x|/sqrt(2 pi))), and Phi(|x|) = 1 - Phi(-|x|). */
static inline float opc_gelu_deriv(float x) {
    float ax = fabsf(x);
    float z = ax * 0.70710678118654752f;
    float z2 = z * z, z2lo = opc_sqr_lo(z, z2);                      /* z^2 = z2 + z2lo exactly */
    float e = opc_expf_inrange(-z2) * (1.0f - z2lo);                 /* -z2 >= -83.2 */
    float t = 1.0f / OPC_FMA(0.5f, z, 1.0f);
    float phi_neg = 0.5f * e * t * opc_erfcx_over_t(t);              /* Phi(-|x|) */
    float xpdf = ax * e * 0.3989422804014327f;                       /* |x| phi(x) */
    return x < 0 ? phi_neg - xpdf : (1.0f - phi_neg) + xpdf;
}

#endif
