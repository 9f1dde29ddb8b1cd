/* tests/test_bf16_native.c — the native bf16 kernels of the unary ops
 * (src/backends/cpu/unary.c: one loop that widens, runs the f32 math and
 * rounds) and of add's f32 + bf16 (src/backends/cpu/elementwise.c) against
 * the path they replace, the f32 kernel on widened copies
 * with the outputs rounded once (rm_cpu_bf16_via_f32, src/backends/cpu/bf16.c):
 * bitwise, for every op forward and backward (out of place and over the
 * dying gradient; relu's bit mask and its backward too), at 1 and 2 threads, at sizes around the vector widths and
 * the via-f32 path's 16 K chunks, with NaN (quiet and signalling), infinities,
 * zeros of both signs, subnormals and values near bf16's largest. */
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/bf16.h"
#include "backends/cpu/cpu.h"
#include "core/core.h"
#include "core/kernels.h"
#include "support/rt.h"

static const rm_unary_op k_ops[] = {
    RM_U_NEG,      RM_U_EXP,       RM_U_LOG,  RM_U_SQRT, RM_U_TANH, RM_U_SIGMOID, RM_U_RELU,
    RM_U_GELU_ERF, RM_U_GELU_TANH, RM_U_SILU, RM_U_POW,  RM_U_ADD,  RM_U_MUL,     RM_U_RSUB,
};
#define N_OPS (sizeof k_ops / sizeof *k_ops)
/* pow's exponents: fractional (NaN below 0), integral, and 0 (backward's special case) */
static const double k_pow_p[] = {1.7, 3.0, 0.0};

static const int64_t k_sizes[] = {1, 15, 16, 17, 31, 33, 16383, 16384, 16385, 100003};
#define N_SIZES (sizeof k_sizes / sizeof *k_sizes)

/* bf16 bit patterns every tensor carries at its front (as far as it is long) */
static const uint16_t k_special[] = {
    0x7FC0,                         /* NaN */
    0x7F81,                         /* signalling NaN: comes out quiet through f32 */
    0xFFC1,                         /* negative NaN with payload */
    0x7F80, 0xFF80,                 /* +-Inf */
    0x0000, 0x8000,                 /* +-0 */
    0x0001, 0x8001, 0x007F, 0x0040, /* subnormals */
    0x0080, 0x8080,                 /* smallest normals */
    0x7F7F, 0xFF7F,                 /* +-largest finite */
    0x42B2, 0xC2B2, 0x42B1,         /* +-89, 88.5: exp's overflow edge */
    0xC2CF, 0xC2D0,                 /* -103.5, -104: exp's underflow edge */
    0x4120, 0xC120,                 /* +-10 */
    0x3F80, 0xBF80,                 /* +-1 */
};

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* A contiguous bf16 tensor of n elements: the specials first (rotated by
 * `rot`, so every one also lands on other lanes), then values of bf16
 * precision spread over [-12, 12] (GELU's and tanh's interesting range),
 * with every 16th a random bit pattern (any exponent, NaNs included). */
static remat_tensor *bf16_values(int64_t n, uint64_t seed, int rot) {
    remat_tensor *t = NULL;
    RT_OK(remat_empty(&t, 1, &n, REMAT_BF16, REMAT_DEVICE_CPU));
    uint16_t *v = remat_data(t);
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    const int64_t ns = (int64_t)(sizeof k_special / sizeof *k_special);
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = rng_next(&s);
        if (i < ns) v[i] = k_special[(i + rot) % ns];
        else if (i % 16 == 5) v[i] = (uint16_t)r;
        else {
            float f = (float)((double)(r >> 11) / 9007199254740992.0 * 24.0 - 12.0);
            uint32_t u;
            memcpy(&u, &f, sizeof u);
            v[i] = (uint16_t)(u >> 16) ^ (uint16_t)((r >> 3) & 1); /* both last-bit parities */
        }
    }
    return t;
}

static remat_tensor *bf16_copy(const remat_tensor *t) {
    int64_t n = remat_numel(t);
    remat_tensor *c = NULL;
    RT_OK(remat_empty(&c, 1, &n, REMAT_BF16, REMAT_DEVICE_CPU));
    memcpy(remat_data(c), remat_data(t), (size_t)n * sizeof(uint16_t));
    return c;
}

static bool bf16_is_nan(uint16_t h) { return (h & 0x7F80u) == 0x7F80u && (h & 0x007Fu); }

/* The first element where a and b differ bitwise, or -1. A NaN matches any
 * NaN: which operand's NaN an instruction passes on (x86: the first one's),
 * and so the sign and payload of a NaN result, depends on the operand order
 * the compiler picks for each loop (the f32 kernel's own NaN signs differ
 * between its vector body and its tail), which neither IEEE 754 nor PyTorch
 * specify. */
static int64_t first_diff(const remat_tensor *a, const remat_tensor *b) {
    const uint16_t *x = remat_data(a), *y = remat_data(b);
    for (int64_t i = 0; i < remat_numel(a); i++)
        if (x[i] != y[i] && !(bf16_is_nan(x[i]) && bf16_is_nan(y[i]))) return i;
    return -1;
}

#define ASSERT_SAME(nat, ref, what)                                                                \
    do {                                                                                           \
        int64_t d_ = first_diff(nat, ref);                                                         \
        cr_assert(d_ < 0,                                                                          \
                  "%s: op %d p %g n %lld threads %d: element %lld is 0x%04x, via f32 0x%04x",      \
                  what, (int)p.op, p.p, (long long)n, threads, (long long)d_,                      \
                  ((const uint16_t *)remat_data(nat))[d_ < 0 ? 0 : d_],                            \
                  ((const uint16_t *)remat_data(ref))[d_ < 0 ? 0 : d_]);                           \
    } while (0)

/* One op at one size and thread count: forward, backward, in-place backward. */
static void check_op(rm_unary_params p, int64_t n, int threads, uint64_t seed) {
    rm_kernel_fn fwd = rm_cpu_kernels[RM_K_UNARY][REMAT_BF16];
    rm_kernel_fn bwd = rm_cpu_kernels[RM_K_UNARY_BWD][REMAT_BF16];
    rm_kernel_fn fwd_ref = rm_cpu_bf16_via_f32[RM_K_UNARY];
    rm_kernel_fn bwd_ref = rm_cpu_bf16_via_f32[RM_K_UNARY_BWD];
    cr_assert(fwd && bwd && fwd != fwd_ref && bwd != bwd_ref, "bf16 unary kernels are not native");
    omp_set_num_threads(threads);
    remat_tensor *x = bf16_values(n, seed, (int)p.op), *g = bf16_values(n, seed + 1, 3);
    remat_tensor *y = bf16_values(n, 7, 0), *y_ref = bf16_copy(y);
    rm_kargs k = {.in = {x}, .out = {y}, .params = &p},
             kr = {.in = {x}, .out = {y_ref}, .params = &p};
    RT_OK(fwd(&k));
    RT_OK(fwd_ref(&kr));
    ASSERT_SAME(y, y_ref, "forward");

    /* s: the saved operand (x or y per op, any values here); add, mul, neg
     * and rsub read none, and their kernels get none */
    bool reads_s = p.op != RM_U_NEG && p.op != RM_U_ADD && p.op != RM_U_MUL && p.op != RM_U_RSUB;
    remat_tensor *s = reads_s ? x : NULL;
    remat_tensor *dx = bf16_values(n, 9, 1), *dx_ref = bf16_copy(dx);
    rm_kargs b = {.in = {g, s}, .out = {dx}, .params = &p};
    rm_kargs br = {.in = {g, s}, .out = {dx_ref}, .params = &p};
    RT_OK(bwd(&b));
    RT_OK(bwd_ref(&br));
    ASSERT_SAME(dx, dx_ref, "backward");

    /* over the dying gradient (dx == g), against the reference run the same way */
    remat_tensor *gi = bf16_copy(g), *gi_ref = bf16_copy(g);
    rm_kargs bi = {.in = {gi, s}, .out = {gi}, .params = &p};
    rm_kargs bir = {.in = {gi_ref, s}, .out = {gi_ref}, .params = &p};
    RT_OK(bwd(&bi));
    RT_OK(bwd_ref(&bir));
    ASSERT_SAME(gi, gi_ref, "in-place backward");
    ASSERT_SAME(gi, dx, "in-place against out-of-place backward");

    remat_release(x);
    remat_release(g);
    remat_release(y);
    remat_release(y_ref);
    remat_release(dx);
    remat_release(dx_ref);
    remat_release(gi);
    remat_release(gi_ref);
}

/* relu's bit mask of y > 0 and its backward g * bit, at one size and thread count. */
static void check_relu_mask(int64_t n, int threads, uint64_t seed) {
    omp_set_num_threads(threads);
    rm_unary_params p = {RM_U_RELU, 0.0}; /* named in ASSERT_SAME's message */
    int64_t nb = (n + 7) / 8;
    remat_tensor *y = bf16_values(n, seed, 5), *g = bf16_values(n, seed + 1, 2);
    remat_tensor *m = NULL, *m_ref = NULL;
    RT_OK(remat_zeros(&m, 1, &nb, REMAT_U8, REMAT_DEVICE_CPU));
    RT_OK(remat_full(&m_ref, 1, &nb, 255, REMAT_U8, REMAT_DEVICE_CPU));
    rm_kargs k = {.in = {y}, .out = {m}}, kr = {.in = {y}, .out = {m_ref}};
    cr_assert(rm_cpu_kernels[RM_K_RELU_MASK][REMAT_BF16] != rm_cpu_bf16_via_f32[RM_K_RELU_MASK]);
    RT_OK(rm_cpu_kernels[RM_K_RELU_MASK][REMAT_BF16](&k));
    RT_OK(rm_cpu_bf16_via_f32[RM_K_RELU_MASK](&kr));
    cr_assert(memcmp(remat_data(m), remat_data(m_ref), (size_t)nb) == 0,
              "relu mask of n %lld at %d threads differs", (long long)n, threads);
    remat_tensor *dx = bf16_values(n, 9, 1), *dx_ref = bf16_copy(dx);
    rm_kargs b = {.in = {g, m}, .out = {dx}}, br = {.in = {g, m}, .out = {dx_ref}};
    RT_OK(rm_cpu_kernels[RM_K_RELU_MASK_BWD][REMAT_BF16](&b));
    RT_OK(rm_cpu_bf16_via_f32[RM_K_RELU_MASK_BWD](&br));
    ASSERT_SAME(dx, dx_ref, "relu mask backward");
    remat_release(y);
    remat_release(g);
    remat_release(m);
    remat_release(m_ref);
    remat_release(dx);
    remat_release(dx_ref);
}

static void check_all(int threads) {
    for (size_t o = 0; o < N_OPS; o++)
        for (size_t si = 0; si < N_SIZES; si++) {
            rm_unary_params p = {k_ops[o], 0.0};
            size_t np = 1;
            if (k_ops[o] == RM_U_POW) np = sizeof k_pow_p / sizeof *k_pow_p;
            for (size_t j = 0; j < np; j++) {
                if (k_ops[o] == RM_U_POW) p.p = k_pow_p[j];
                else if (k_ops[o] >= RM_U_ADD) p.p = 0.3;
                check_op(p, k_sizes[si], threads, 100 * o + si);
            }
        }
    for (size_t si = 0; si < N_SIZES; si++) check_relu_mask(k_sizes[si], threads, 7 + si);
}

Test(bf16_unary, native_matches_via_f32_bitwise_1_thread) { check_all(1); }
Test(bf16_unary, native_matches_via_f32_bitwise_2_threads) { check_all(2); }

/* A call the native loops do not take (an f32 operand among bf16 ones) goes
 * through the f32 kernel and gives the same values. */
Test(bf16_unary, mixed_dtype_backward_falls_back_to_via_f32) {
    rm_unary_params p = {RM_U_GELU_ERF, 0.0};
    int64_t n = 40000;
    int threads = 2;
    omp_set_num_threads(threads);
    remat_tensor *g = bf16_values(n, 1, 0), *s = bf16_values(n, 2, 0), *s32 = NULL;
    RT_OK(remat_to_dtype(&s32, s, REMAT_F32));
    remat_tensor *dx = bf16_values(n, 3, 0), *dx_ref = bf16_copy(dx);
    rm_kargs b = {.in = {g, s32}, .out = {dx}, .params = &p};
    rm_kargs br = {.in = {g, s}, .out = {dx_ref}, .params = &p};
    RT_OK(rm_cpu_kernels[RM_K_UNARY_BWD][REMAT_BF16](&b));
    RT_OK(rm_cpu_bf16_via_f32[RM_K_UNARY_BWD](&br));
    ASSERT_SAME(dx, dx_ref, "mixed-dtype backward");
    remat_release(g);
    remat_release(s);
    remat_release(s32);
    remat_release(dx);
    remat_release(dx_ref);
}

/* add's f32 + bf16 into f32 (the residual stream's x + a bf16 block output),
 * either order, flat (the native loop) and broadcast (still via f32): bitwise
 * the via-f32 path, at 1 and 2 threads, sizes around vector and chunk edges,
 * both operands carrying NaN, infinities and subnormals. */
Test(bf16_elementwise, mixed_add_matches_via_f32_bitwise) {
    rm_kernel_fn nat = rm_cpu_kernels[RM_K_ELEMENTWISE][REMAT_F32];
    rm_kernel_fn ref = rm_cpu_bf16_via_f32[RM_K_ELEMENTWISE];
    rm_ew_params p = {.op = RM_EW_ADD};
    for (int threads = 1; threads <= 2; threads++)
        for (size_t si = 0; si < N_SIZES; si++)
            for (int order = 0; order < 3; order++) {
                omp_set_num_threads(threads);
                /* orders 0 and 1: f32 (n) + bf16 (n) and bf16 + f32; order 2:
                 * f32 (n, 16) + a bf16 (16) row, broadcast */
                int64_t n = k_sizes[si], shape[2] = {n, 16};
                int nd = order == 2 ? 2 : 1;
                remat_tensor *h = bf16_values(order == 2 ? 16 : n, 40 + si, 4);
                remat_tensor *fb = bf16_values(order == 2 ? n * 16 : n, 50 + si, 9);
                remat_tensor *f1 = NULL, *f = NULL, *y = NULL, *y_ref = NULL;
                RT_OK(remat_to_dtype(&f1, fb, REMAT_F32));
                RT_OK(remat_reshape(&f, f1, nd, shape));
                RT_OK(remat_empty(&y, nd, shape, REMAT_F32, REMAT_DEVICE_CPU));
                RT_OK(remat_full(&y_ref, nd, shape, 7, REMAT_F32, REMAT_DEVICE_CPU));
                rm_kargs k = {
                    .in = {order == 1 ? h : f, order == 1 ? f : h}, .out = {y}, .params = &p};
                rm_kargs kr = k;
                kr.out[0] = y_ref;
                RT_OK(nat(&k));
                RT_OK(ref(&kr));
                const uint32_t *u = remat_data(y), *v = remat_data(y_ref);
                for (int64_t i = 0; i < remat_numel(y); i++) {
                    bool nan =
                        (u[i] & 0x7FFFFFFFu) > 0x7F800000u && (v[i] & 0x7FFFFFFFu) > 0x7F800000u;
                    cr_assert(u[i] == v[i] || nan,
                              "add order %d n %lld threads %d: element %lld is 0x%08x, via f32 "
                              "0x%08x",
                              order, (long long)n, threads, (long long)i, u[i], v[i]);
                }
                remat_release(h);
                remat_release(fb);
                remat_release(f1);
                remat_release(f);
                remat_release(y);
                remat_release(y_ref);
            }
}

/* The lookup tables of the costly ops (src/backends/cpu/unary.c: the forward's results,
 * the GELUs' and SiLU's backward factors) against the f32 kernel on widened copies, for every bf16
 * bit pattern: x runs through all 65536 twice (the second time shifted by a lane, past
 * the size that builds a table), the gradient through bf16_values' mix; forward,
 * backward and in-place backward at 1 and 2 threads; the tables must have been built. */
Test(bf16_unary, lookup_tables_match_via_f32_for_every_bit_pattern) {
    static const rm_unary_op ops[] = {RM_U_EXP,      RM_U_LOG,       RM_U_TANH, RM_U_SIGMOID,
                                      RM_U_GELU_ERF, RM_U_GELU_TANH, RM_U_SILU};
    const int64_t n = 2 * 65536 + 3;
    remat_tensor *x = NULL;
    RT_OK(remat_empty(&x, 1, &n, REMAT_BF16, REMAT_DEVICE_CPU));
    uint16_t *xv = remat_data(x);
    for (int64_t i = 0; i < n; i++) xv[i] = (uint16_t)(i < 65536 ? i : i - 65537);
    for (int threads = 1; threads <= 2; threads++)
        for (size_t o = 0; o < sizeof ops / sizeof *ops; o++) {
            omp_set_num_threads(threads);
            rm_unary_params p = {ops[o], 0.0};
            remat_tensor *y = bf16_values(n, 3, 0), *y_ref = bf16_copy(y);
            rm_kargs k = {.in = {x}, .out = {y}, .params = &p},
                     kr = {.in = {x}, .out = {y_ref}, .params = &p};
            RT_OK(rm_cpu_kernels[RM_K_UNARY][REMAT_BF16](&k));
            RT_OK(rm_cpu_bf16_via_f32[RM_K_UNARY](&kr));
            ASSERT_SAME(y, y_ref, "forward (table)");
            cr_assert(rm_cpu_unary_bf16_table_ready(p.op, false), "op %d: no forward table",
                      (int)p.op);
            if (p.op == RM_U_GELU_ERF || p.op == RM_U_GELU_TANH || p.op == RM_U_SILU) {
                remat_tensor *g = bf16_values(n, 11 + o, 2), *gi = bf16_copy(g);
                remat_tensor *dx = bf16_copy(y), *dx_ref = bf16_copy(y), *gi_ref = bf16_copy(g);
                rm_kargs b = {.in = {g, x}, .out = {dx}, .params = &p};
                rm_kargs br = {.in = {g, x}, .out = {dx_ref}, .params = &p};
                rm_kargs bi = {.in = {gi, x}, .out = {gi}, .params = &p};
                rm_kargs bir = {.in = {gi_ref, x}, .out = {gi_ref}, .params = &p};
                RT_OK(rm_cpu_kernels[RM_K_UNARY_BWD][REMAT_BF16](&b));
                RT_OK(rm_cpu_bf16_via_f32[RM_K_UNARY_BWD](&br));
                ASSERT_SAME(dx, dx_ref, "backward (table)");
                RT_OK(rm_cpu_kernels[RM_K_UNARY_BWD][REMAT_BF16](&bi));
                RT_OK(rm_cpu_bf16_via_f32[RM_K_UNARY_BWD](&bir));
                ASSERT_SAME(gi, gi_ref, "in-place backward (table)");
                cr_assert(rm_cpu_unary_bf16_table_ready(p.op, true), "op %d: no factor table",
                          (int)p.op);
                remat_release(g);
                remat_release(gi);
                remat_release(gi_ref);
                remat_release(dx);
                remat_release(dx_ref);
            }
            remat_release(y);
            remat_release(y_ref);
        }
    remat_release(x);
}

/* rm_bf16_round_run (AVX512_BF16's vcvtne2ps2bf16 where the CPU has it, blocks with a
 * subnormal and tails through rm_f32_to_bf16; src/backends/cpu/bf16.c) against the scalar
 * rounding, bitwise: every upper half of an f32 (sign, exponent, 7 mantissa bits: NaNs,
 * infinities, subnormals, zeros) with lower halves that are ties, just below and above
 * them, zero and all ones, in an order that gives blocks of 32 with and without a
 * subnormal; from every start offset mod 32 and through the threaded pass at 1 and 2
 * threads. */
Test(bf16_convert, round_run_matches_the_scalar_rounding_for_every_upper_half) {
    static const uint16_t lows[] = {0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x1234};
    const int nl = (int)(sizeof lows / sizeof *lows);
    const int64_t n = 65536 * nl;
    uint32_t *bits = malloc(sizeof *bits * (size_t)n);
    uint16_t *h = malloc(sizeof *h * (size_t)n);
    cr_assert(bits && h);
    for (int64_t i = 0; i < n; i++) bits[i] = (uint32_t)(i / nl) << 16 | lows[i % nl];
    const float *f = (const float *)bits;
    for (int off = 0; off < 32; off++) {
        memset(h, 0, sizeof *h * (size_t)n);
        rm_bf16_round_run(f + off, h + off, n - off);
        for (int64_t i = off; i < n; i++)
            cr_assert_eq(h[i], rm_f32_to_bf16(f[i]),
                         "from %d, element %lld (%08x): %04x, want %04x", off, (long long)i,
                         bits[i], h[i], rm_f32_to_bf16(f[i]));
    }
    for (int threads = 1; threads <= 2; threads++) {
        omp_set_num_threads(threads);
        memset(h, 0, sizeof *h * (size_t)n);
        rm_cpu_f32_to_bf16(f, h, n);
        for (int64_t i = 0; i < n; i++)
            cr_assert_eq(h[i], rm_f32_to_bf16(f[i]), "%d threads, element %lld (%08x)", threads,
                         (long long)i, bits[i]);
    }
    free(bits);
    free(h);
}
