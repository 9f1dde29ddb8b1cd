/* src/ops/vmath.h — vectorisable f32 exp and tanh for the elementwise and
 * row kernels (libm's expf/tanhf are calls the compiler cannot vectorise;
 * they dominated GELU and softmax profiles). Private to src/ops. */
#ifndef REMAT_OPS_VMATH_H
#define REMAT_OPS_VMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

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
    float res = p * rm_bits_to_f32((n1 + 127) << 23) * rm_bits_to_f32((n2 + 127) << 23);
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

/* ---- standard normal CDF for f32 (GELU, erf form) --------------------------------------
 * Phi(x) = 0.5 * erfc(-x / sqrt 2) with the Chebyshev erfc of Numerical
 * Recipes (fractional error < 1.2e-7 over the whole range), evaluated
 * without branches. Going through erfc keeps Phi accurate in its small
 * left tail, where 0.5 * (1 + erf) would cancel. */
static inline float rm_phif_v(float x) {
    float z = fabsf(x) * 0.70710678118654752f;
    float t = 1.0f / (1.0f + 0.5f * z);
    float p = 0.17087277f;
    p = p * t - 0.82215223f;
    p = p * t + 1.48851587f;
    p = p * t - 1.13520398f;
    p = p * t + 0.27886807f;
    p = p * t - 0.18628806f;
    p = p * t + 0.09678418f;
    p = p * t + 0.37409196f;
    p = p * t + 1.00002368f;
    p = p * t - 1.26551223f;
    float half_erfc = 0.5f * t * rm_expf_v(-z * z + p); /* 0.5 * erfc(|x| / sqrt 2) */
    float r = x < 0 ? half_erfc : 1.0f - half_erfc;
    return x != x ? x : r;
}

#endif
