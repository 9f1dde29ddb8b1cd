/* src/backends/cpu/vmath.h — vectorisable f32 exp and tanh for the elementwise and
 * row kernels (libm's expf/tanhf are calls the compiler cannot vectorise;
 * they dominated GELU and softmax profiles). Private to src/ops. */
#ifndef REMAT_OPS_VMATH_H
#define REMAT_OPS_VMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "clones.h"

/* ---- exp for f32 -------------------------------------------------------------------------
 * libm's expf is a function call the compiler cannot vectorise, and it
 * dominates softmax and cross_entropy over wide rows. This is the Cephes
 * expf (range reduction by ln 2, degree-6 polynomial, max error ~1 ulp over
 * the normal range; inf/0/NaN handled like expf) written without branches
 * or library calls, so the loops that use it vectorise. Rounding to the
 * nearest integer uses the 1.5 * 2^23 trick (floorf does not vectorise
 * without -ffast-math; the trick requires that the library is NOT built
 * with -ffast-math, which CMakeLists.txt never does). 2^n is applied in
 * two halves so results in the subnormal range stay correct. */
static inline float rm_bits_to_f32(int32_t b) {
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}
static inline int32_t rm_f32_to_bits(float f) {
    int32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}
static inline float rm_expf_v(float x) {
    float xc = x < -104.0f ? -104.0f : x;
    xc = xc > 89.0f ? 89.0f : xc;
    xc = x != x ? 0.0f : xc; /* NaN: any in-range value (the result is x); keeps ni in range */
    float t = xc * 1.44269504088896341f + 12582912.0f;
    int32_t ni = rm_f32_to_bits(t) - 0x4B400000; /* round(xc / ln 2) */
    float n = t - 12582912.0f;
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float r2 = r * r;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r2 + r + 1.0f;
    int32_t n1 = ni >> 1, n2 = ni - n1;
    float res = p * rm_bits_to_f32((int32_t)((uint32_t)(n1 + 127) << 23)) *
                rm_bits_to_f32((int32_t)((uint32_t)(n2 + 127) << 23));
    res = x > 88.72283935546875f ? INFINITY : res;
    res = x < -103.972084045410f ? 0.0f : res;
    res = x != x ? x : res;
    return res;
}

/* ---- tanh for f32 ---------------------------------------------------------------------------
 * Cephes tanhf without branches: an odd polynomial for |x| < 0.625 (where
 * 1 - 2/(e^2x + 1) would cancel), the exp form above it; ~2 ulp. */
static inline float rm_tanhf_v(float x) {
    float z = fabsf(x);
    float big = 1.0f - 2.0f / (rm_expf_v(2.0f * z) + 1.0f);
    big = x < 0 ? -big : big;
    float s = x * x;
    float p = -5.70498872745e-3f;
    p = p * s + 2.06390887954e-2f;
    p = p * s - 5.37397155531e-2f;
    p = p * s + 1.33314422036e-1f;
    p = p * s - 3.33332819422e-1f;
    float small = p * s * x + x;
    float r = z < 0.625f ? small : big;
    return x != x ? x : r;
}

/* ---- fused multiply-add ------------------------------------------------------------------
 * -std=c11 turns off FMA contraction, so the polynomials below use an
 * explicit fmaf where the target has FMA (one rounding, and half the
 * instructions); elsewhere a plain a * b + c (libm's software fmaf would
 * be a call per element). Results may thus differ in the last bits between
 * builds for different targets, never between runs or thread counts. */
#ifdef __FMA__
#define RM_FMAF(a, b, c) fmaf((a), (b), (c))
#define RM_FMA(a, b, c) fma((a), (b), (c))
#else
#define RM_FMAF(a, b, c) ((a) * (b) + (c))
#define RM_FMA(a, b, c) ((a) * (b) + (c))
#endif

/* ---- fused multiply-add in the cloned kernels ----------------------------------------------
 * RM_FMAF above is decided once per file, at the baseline target the library is built for,
 * so in the AVX2 and AVX-512 clones of a kernel (clones.h) it is still a multiply and an
 * add: twice the instructions of the polynomials, which made them the GELUs' bound.
 * RM_FMAF_CL is a real fused multiply-add wherever GCC builds the clones: inline vfmadd in
 * the x86-64-v3 and -v4 clones, and in the default clone (run only on CPUs without AVX2)
 * a call to libm's fmaf, which rounds once as the instruction does, so every clone gives
 * the same bits. Without clones (clang, sanitizers, other architectures) it is RM_FMAF.
 * In a GCC build, a caller that is not itself a clone (or inlined into one) would call
 * libm's fmaf per step: the GELUs' callers are cloned (unary.c, bias_gelu.c, whose bf16
 * row kernels GCC keeps out of line). The GELUs and attention's exp (rm_expf_neg_cl_v,
 * called only from cloned kernels) use it; nn.c still uses RM_FMAF. */
#if defined(RM_CPU_CLONED) && !defined(__FMA__)
#define RM_FMAF_CL(a, b, c) __builtin_fmaf((a), (b), (c))
#else
#define RM_FMAF_CL(a, b, c) RM_FMAF(a, b, c)
#endif

/* ---- exp for the GELUs -------------------------------------------------------------------
 * exp(a) for a in [-87, 88]: n = round(a / ln 2) (the 1.5 * 2^23 trick), r = a - n ln 2 in
 * [-ln 2 / 2, ln 2 / 2] (ln 2 in two parts, Cody and Waite), exp(r) by a degree-6
 * polynomial fitted to exp on that interval (Remez, relative error 1.9e-9 before its
 * coefficients were rounded to f32), 2^n one normal power. Max relative error 8.6e-8
 * (0.7 ulp) over [-87, 88] with FMA steps, measured against libm's exp in double. Two
 * fewer steps than the Cephes polynomial of rm_expf_v (1 + r + r^2 P5(r)), at the same
 * accuracy. The caller clamps or selects outside the range: there the result is
 * meaningless (never a trap). */
static inline float rm_expf_gelu_v(float a) {
    float t = RM_FMAF_CL(a, 1.44269504088896341f, 12582912.0f);
    float n = t - 12582912.0f;
    float r = RM_FMAF_CL(n, -0.693359375f, a);
    r = RM_FMAF_CL(n, 2.12194440e-4f, r);
    float p = 1.3836845756e-3f;
    p = RM_FMAF_CL(p, r, 8.3748158067e-3f);
    p = RM_FMAF_CL(p, r, 4.1668225080e-2f);
    p = RM_FMAF_CL(p, r, 1.6666419804e-1f);
    p = RM_FMAF_CL(p, r, 4.9999991059e-1f);
    p = RM_FMAF_CL(p, r, 1.0f);
    p = RM_FMAF_CL(p, r, 1.0f);
    /* t's low bits hold 0x400000 + n: shifted by 23 they leave n << 23 (mod 2^32) */
    return p * rm_bits_to_f32((int32_t)(((uint32_t)rm_f32_to_bits(t) << 23) + (127u << 23)));
}

/* ---- exp of a non-positive f32 in the cloned kernels -------------------------------------
 * exp(a) for a <= 0 without the overflow and subnormal cases (results below exp(-87)
 * ~ 1.6e-38 flush to 0, so 2^n is one normal power; a NaN gives NaN: the clamps' compares
 * are false for it) on rm_expf_gelu_v's polynomial, whose 9 steps are fused multiply-adds
 * in the clones. Attention's softmax exps (attention.c ATT_EXP) and Phi's below. Meant for cloned callers, as RM_FMAF_CL (a plain caller in a GCC build calls
 * libm's fmaf per step, with the same bits). */
static inline float rm_expf_neg_cl_v(float a) {
    float xc = a < -87.0f ? -87.0f : a;
    float e = rm_expf_gelu_v(xc);
    return a < -87.0f ? 0.0f : e;
}

/* ---- standard normal CDF for f32 (GELU, erf form) --------------------------------------
 * Phi(x) = 0.5 * erfc(-x / sqrt 2), through the scaled complementary error
 * function: for z = |x| / sqrt 2,
 *   erfc(z) = exp(-z^2) * erfcx(z),  erfcx(z) ~ P(t),  t = 1 / (1 + 0.47047 z),
 * P of degree 9 fitted (iteratively reweighted least squares, relative
 * error) on z in [0, 10.5], where below that Phi flushes to 0: relative error
 * of erfcx 2.6e-8 with the f32 coefficients. Phi is then 0.5 * erfc(z) for
 * x < 0 and 1 - 0.5 * erfc(z) above: accurate in relative terms in the small
 * left tail, where 0.5 * (1 + erf) would cancel (max relative error of
 * x * Phi(x) over [-16, 16]: 4.0e-6, at |x| > 10 where x^2 rounds; 2.2e-6
 * below; derivative 1.9e-7 absolute). exp(-z^2) = exp(-x^2 / 2) is also the normal density's
 * exponential, which GELU's backward needs: *e receives it (0 below exp(-87)). One
 * division and one exp, no branches, so the loops vectorise. A NaN propagates. */
static inline float rm_phif_e_v(float x, float *e) {
    float z = fabsf(x) * 0.70710678118654752f;
    float t = 1.0f / RM_FMAF_CL(0.47047f, z, 1.0f);
    float q = -2.6771442965e-02f; /* the fit's coefficients halved (exactly): q = erfcx / 2 */
    q = RM_FMAF_CL(q, t, 1.5037190915e-01f);
    q = RM_FMAF_CL(q, t, -3.1801113486e-01f);
    q = RM_FMAF_CL(q, t, 2.7758276463e-01f);
    q = RM_FMAF_CL(q, t, -9.6932150424e-02f);
    q = RM_FMAF_CL(q, t, 1.4077284932e-01f);
    q = RM_FMAF_CL(q, t, 1.0592950135e-01f);
    q = RM_FMAF_CL(q, t, 1.3448174298e-01f);
    q = RM_FMAF_CL(q, t, 1.3257069886e-01f);
    q = RM_FMAF_CL(q, t, 5.2610143951e-06f);
    float ex = rm_expf_neg_cl_v(-0.5f * (x * x));
    float half_erfc = q * ex;
    *e = ex;
    return x < 0 ? half_erfc : 1.0f - half_erfc;
}

/* GELU (erf form) of an f32: x * Phi(x). A NaN propagates through every
 * step (no select needed); -inf gives -inf * 0 = NaN, as PyTorch. */
static inline float rm_gelu_erff_v(float x) {
    float e;
    return x * rm_phif_e_v(x, &e);
}

/* GELU (erf form) derivative of an f32: Phi(x) + x * pdf(x), pdf(x) =
 * exp(-x^2 / 2) / sqrt(2 pi) sharing Phi's exponential. */
static inline float rm_gelu_erff_grad_v(float x) {
    float e;
    float ph = rm_phif_e_v(x, &e);
    return RM_FMAF_CL(x * 0.3989422804014327f, e, ph);
}

/* ---- GELU, tanh form, for f32 ----------------------------------------------------------
 * 0.5 * x * (1 + tanh(u)), u = sqrt(2/pi) * (x + 0.044715 x^3), computed as
 * x / (1 + e) with e = exp(a), a = -2u: the same function (0.5 (1 + tanh u) =
 * sigmoid(2u) = 1 / (1 + e)) with one exp and one division, and no cancellation in the
 * left tail, where 1 + tanh(u) loses every digit (relative error of the result over
 * [-12, 12]: 1.2e-5, from u's own rounding amplified by exp; 5.2e-7 absolute). Past
 * a = 88 (x < -9.9) the result is x * 0 (below 1e-36 in magnitude; -inf gives NaN, as
 * PyTorch); below a = -87 the exp is clamped there (e < 2e-38: the result is x). The
 * derivative
 *   s + x * (1 - tanh^2 u) / 2 * du/dx = s + 2 x s (1 - s) du/dx,  s = 1 / (1 + e),
 * takes 1 - s as e * s, again without cancellation (2.1e-7 absolute). Each compare is one
 * vector compare and blend; a NaN fails them and propagates through every step. */
#define RM_GELU_K 0.7978845608028654f /* sqrt(2 / pi) */
static inline float rm_gelu_tanhf_v(float x) {
    float a = (-2.0f * RM_GELU_K * x) * RM_FMAF_CL(0.044715f, x * x, 1.0f); /* -2u, exactly */
    float y = x / (1.0f + rm_expf_gelu_v(a < -87.0f ? -87.0f : a));
    return a > 88.0f ? x * 0.0f : y;
}
static inline float rm_gelu_tanhf_grad_v(float x) {
    float x2 = x * x;
    float a = (-2.0f * RM_GELU_K * x) * RM_FMAF_CL(0.044715f, x2, 1.0f);
    float e = rm_expf_gelu_v(a < -87.0f ? -87.0f : a);
    float s = 1.0f / (1.0f + e);
    float du = RM_FMAF_CL(3.0f * 0.044715f * RM_GELU_K, x2, RM_GELU_K);
    float d = RM_FMAF_CL(2.0f * x * du, e * s * s, s);
    return a > 88.0f ? x * 0.0f : d;
}

/* ---- GELU in f64 (the f64 kernels: libm's erfc, exp and tanh) ---------------------------
 * erf form: x * Phi(x) and its derivative Phi(x) + x * pdf(x). Phi = 0.5 *
 * erfc(-x / sqrt 2) stays accurate in the left tail, where 0.5 * (1 + erf)
 * cancels to 0 below x ~ -8. tanh form: 0.5 x (1 + tanh(u)), u = sqrt(2/pi)
 * (x + 0.044715 x^3), and its derivative. */
static inline double rm_phi_d(double x) { return 0.5 * erfc(-x * 0.7071067811865476); }
static inline double rm_gelu_erf_d(double x) { return x * rm_phi_d(x); }
static inline double rm_gelu_erf_grad_d(double x) {
    return rm_phi_d(x) + x * (0.3989422804014327 * exp(-0.5 * x * x));
}
static inline double rm_gelu_tanh_d(double v) {
    double in = 0.7978845608028654 * (v + 0.044715 * v * v * v);
    return 0.5 * v * (1.0 + tanh(in));
}
static inline double rm_gelu_tanh_grad_d(double v) {
    double in = 0.7978845608028654 * (v + 0.044715 * v * v * v);
    double th = tanh(in);
    double din = 0.7978845608028654 * (1.0 + 3 * 0.044715 * v * v);
    return 0.5 * (1.0 + th) + 0.5 * v * (1.0 - th * th) * din;
}

#endif
