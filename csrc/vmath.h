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

/* Horner steps use fmaf: one rounding per step, the same in vector and scalar code (so results
 * stay independent of the thread split), and a single instruction on FMA hardware. */
#define OPC_FMA(a, b, c) fmaf((a), (b), (c))

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

/* Range reduction x = n ln2 + r; returns r and n (NaN x gives n = 0, r = NaN). */
static inline float opc_exp_reduce(float x, float *n_out) {
    float xc = x > 88.8f ? 88.8f : x;        /* exp(88.8) overflows to inf, as it should */
    xc = xc < -87.0f ? -87.0f : xc;          /* keeps every intermediate normal (see opc_expf) */
    float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round to nearest */
    n = (n == n) ? n : 0.0f;                 /* NaN: keep the int conversion defined */
    float r = xc - n * 0.693145751953125f;   /* ln2 high part: n * hi is exact */
    r = r - n * 1.428606765330187e-06f;      /* ln2 low part */
    *n_out = n;
    return r;
}

/* 2^n for integral n in [-126, 128] as two factors (each a normal float). */
static inline float opc_pow2_scale(float v, float n) {
    int32_t k = (int32_t)n;
    int32_t k1 = k >> 1, k2 = k - k1; /* floor halves: both in [-63, 64] */
    float s1 = opc_bits_to_f32((uint32_t)(k1 + 127) << 23);
    float s2 = opc_bits_to_f32((uint32_t)(k2 + 127) << 23);
    return (v * s1) * s2;
}

/* exp(x); below -87 (exp < 1.7e-38) it returns 0 instead of a subnormal: subnormal arithmetic
 * costs ~100x on x86 (microcode assists) and would make tail-heavy inputs crawl. */
static inline float opc_expf(float x) {
    float n;
    float r = opc_exp_reduce(x, &n);
    float v = opc_pow2_scale(opc_exp_poly(r), n);
    return x < -87.0f ? 0.0f : v;
}

/* expm1 with full relative accuracy near 0. */
static inline float opc_expm1f(float x) {
    float small = opc_expm1_poly(x);         /* |x| <= ln2/2 */
    float big = opc_expf(x) - 1.0f;
    float ax = x < 0 ? -x : x;
    return ax <= 0.34657359f ? small : big;  /* NaN: big = NaN */
}

/* tanh via expm1(-2|x|): tanh|x| = -m / (2 + m); limits +-1 at +-inf, NaN kept. */
static inline float opc_tanhf(float x) {
    float ax = x < 0 ? -x : x;
    float m = opc_expm1f(-2.0f * ax);
    float t = -m / (2.0f + m);
    return x < 0 ? -t : t;
}

/* logistic sigmoid; 0 at -inf, 1 at +inf */
static inline float opc_sigmoidf(float x) { return 1.0f / (1.0f + opc_expf(-x)); }

/* erf(z) for 0 <= z <= 1: z * Q(z^2), |error| < 1.5e-7. */
static inline float opc_erf_small(float z) {
    float u = z * z;
    float q = 7.889123010079856e-05f;
    q = OPC_FMA(q, u, -0.0008020842320770652f);
    q = OPC_FMA(q, u, 0.005189535456116753f);
    q = OPC_FMA(q, u, -0.02685444465224023f);
    q = OPC_FMA(q, u, 0.1128360017766496f);
    q = OPC_FMA(q, u, -0.37612627136085797f);
    q = OPC_FMA(q, u, 1.1283791659137674f);
    return z * q;
}

/* erfcx(z) / t = erfc(z) exp(z^2) / t for 1 <= z <= 9.2, t = 1/(1 + z/2): a degree-7 polynomial
 * in t (fit error 1e-8 relative). */
static inline float opc_erfcx_over_t(float t) {
    float q = 0.09047688843937689f;
    q = OPC_FMA(q, t, -0.21725502473470648f);
    q = OPC_FMA(q, t, 0.07120995444119921f);
    q = OPC_FMA(q, t, 0.06859976096204916f);
    q = OPC_FMA(q, t, 0.17579230442196653f);
    q = OPC_FMA(q, t, 0.24764712831928207f);
    q = OPC_FMA(q, t, 0.2819556264810577f);
    q = OPC_FMA(q, t, 0.28210267787675364f);
    return q;
}

/* Gelu derivative Phi(x) + x phi(x) for |x| <= 12.9 (callers clamp). One exp E = exp(-x^2/2)
 * serves both terms: with z = |x|/sqrt2, Phi(-|x|) = E t Q(t) / 2 for z >= 1 (no cancellation in
 * the negative tail, where the result is E (tQ/2 - |x|/sqrt(2 pi))), and 1/2 -+ erf(z)/2 below. */
static inline float opc_gelu_deriv(float x) {
    float ax = x < 0 ? -x : x;
    float z = ax * 0.70710678118654752f;
    float z2 = z * z, z2lo = OPC_FMA(z, z, -z2);                     /* z^2 = z2 + z2lo exactly */
    float e = opc_expf(-z2) * (1.0f - z2lo);
    float t = 1.0f / OPC_FMA(0.5f, z, 1.0f);
    float tail = 0.5f * e * t * opc_erfcx_over_t(t);                 /* Phi(-|x|), z >= 1 */
    float half_erf = 0.5f * opc_erf_small(z < 1.0f ? z : 1.0f);
    float phi_neg = z < 1.0f ? 0.5f - half_erf : tail;               /* Phi(-|x|) */
    float xpdf = ax * e * 0.3989422804014327f;                       /* |x| phi(x) */
    return x < 0 ? phi_neg - xpdf : (1.0f - phi_neg) + xpdf;
}

#endif
