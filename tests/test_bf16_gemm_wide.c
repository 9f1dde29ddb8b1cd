/* tests/test_bf16_gemm_wide.c — the bf16 GEMM's route through f32 (gemm_bf16.c:
 * where the CPU has no bf16 instructions; REMAT_NO_BF16 forces it here on any
 * CPU) against the arithmetic it promises, written out the plain way: dense f32
 * copies of the operands (an f32 operand of rm_bgemm_wide rounded to bf16
 * first), the bias in every row of an f32 C that rm_sgemm adds to (beta 1), or
 * bf16 C widened for beta 1, and the result rounded once. Bitwise, at 1 and 2
 * threads, over transposes, padded leading dimensions, M, N or K of 1, bf16
 * and f32 biases and C, in an order that has the scratch (from the allocator's
 * cache, with stale contents) serve GEMMs of other shapes. C's padding between
 * rows must come back untouched. */
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/gemm.h"
#include "core/core.h"
#include "support/rt.h"

/* How a case's GEMM is called. */
typedef enum kind {
    K_PLAIN,     /* rm_bgemm, beta 0 */
    K_ACC,       /* rm_bgemm, beta 1 (bf16 C read back) */
    K_BIAS16,    /* rm_bgemm_bias, bf16 bias */
    K_BIAS32,    /* rm_bgemm_bias, f32 bias */
    K_F32C,      /* rm_bgemm_f32, beta 0 */
    K_F32C_ACC,  /* rm_bgemm_f32, beta 1 */
    K_WIDE_A,    /* rm_bgemm_wide, f32 A, bf16 C with an f32 bias */
    K_WIDE_B,    /* rm_bgemm_wide, f32 B, bf16 C beta 1 */
    K_WIDE_AB,   /* rm_bgemm_wide, f32 A and B, f32 C beta 1 */
    K_WIDE_NONE, /* rm_bgemm_wide, bf16 A and B, f32 C beta 0 */
} kind;

typedef struct gcase {
    bool ta, tb;
    int64_t M, N, K, pad_a, pad_b, pad_c; /* extra elements per stored row */
    kind k;
} gcase;

/* Larger GEMMs before smaller ones and back, so that scratch is reused with
 * another GEMM's values in it. */
static const gcase k_cases[] = {
    {false, false, 300, 200, 130, 0, 0, 0, K_BIAS16},
    {false, true, 37, 53, 29, 3, 1, 5, K_PLAIN},
    {true, false, 64, 48, 96, 1, 0, 7, K_ACC},
    {true, true, 45, 31, 17, 2, 3, 1, K_BIAS32},
    {false, false, 1, 77, 40, 0, 0, 0, K_BIAS32},
    {false, false, 77, 1, 40, 1, 1, 1, K_ACC},
    {true, false, 19, 23, 1, 0, 5, 3, K_F32C},
    {false, true, 1, 1, 1, 0, 0, 0, K_BIAS16},
    {false, false, 256, 384, 192, 0, 0, 0, K_F32C_ACC},
    {true, true, 33, 65, 129, 1, 2, 3, K_F32C_ACC},
    {false, true, 41, 57, 73, 1, 0, 2, K_WIDE_A},
    {true, false, 41, 57, 73, 0, 3, 0, K_WIDE_B},
    {true, true, 90, 70, 50, 2, 2, 2, K_WIDE_AB},
    {false, false, 1, 9, 300, 0, 0, 0, K_WIDE_AB},
    {false, false, 17, 1, 1, 0, 0, 4, K_WIDE_NONE},
    {false, true, 512, 256, 64, 0, 0, 0, K_PLAIN},
};

static uint64_t rng(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* A value in [-2, 2) with a full f32 mantissa (rounding to bf16 matters). */
static float rnd(uint64_t *s) {
    return (float)((double)(rng(s) >> 11) / 9007199254740992.0 * 4.0 - 2.0);
}

/* n f32 values, and their bf16 roundings. */
static void fill(uint64_t *s, float *f, uint16_t *b, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        f[i] = rnd(s);
        b[i] = rm_f32_to_bf16(f[i]);
    }
}

/* The stored rows × cols operand (row stride ld) as the dense f32 copy the
 * GEMM multiplies: bf16 widened, or f32 rounded to bf16 and widened. */
static float *dense(const float *f, const uint16_t *b, bool use_f32, int64_t rows, int64_t cols,
                    int64_t ld) {
    float *d = malloc(sizeof(float) * (size_t)(rows * cols));
    cr_assert(d);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            d[r * cols + c] =
                rm_bf16_to_f32(use_f32 ? rm_f32_to_bf16(f[r * ld + c]) : b[r * ld + c]);
    return d;
}

static void run_case(const gcase *g, int threads, uint64_t seed) {
    omp_set_num_threads(threads);
    int64_t M = g->M, N = g->N, K = g->K;
    int64_t ar = g->ta ? K : M, ac = g->ta ? M : K, br = g->tb ? N : K, bc = g->tb ? K : N;
    int64_t lda = ac + g->pad_a, ldb = bc + g->pad_b, ldc = N + g->pad_c;
    int64_t na = ar * lda, nb = br * ldb, nc = M * ldc;
    bool a32 = g->k == K_WIDE_A || g->k == K_WIDE_AB, b32 = g->k == K_WIDE_B || g->k == K_WIDE_AB;
    bool c32 = g->k == K_F32C || g->k == K_F32C_ACC || g->k == K_WIDE_AB || g->k == K_WIDE_NONE;
    bool acc = g->k == K_ACC || g->k == K_F32C_ACC || g->k == K_WIDE_B || g->k == K_WIDE_AB;
    bool bias32 = g->k == K_BIAS32 || g->k == K_WIDE_A, bias = bias32 || g->k == K_BIAS16;
    float beta = acc ? 1.0f : 0.0f;

    float *af = malloc(sizeof(float) * (size_t)na), *bf = malloc(sizeof(float) * (size_t)nb);
    float *cf = malloc(sizeof(float) * (size_t)nc), *cf_ref = malloc(sizeof(float) * (size_t)nc);
    float *biasf = malloc(sizeof(float) * (size_t)N);
    uint16_t *ab = malloc(sizeof(uint16_t) * (size_t)na),
             *bb = malloc(sizeof(uint16_t) * (size_t)nb);
    uint16_t *cb = malloc(sizeof(uint16_t) * (size_t)nc);
    uint16_t *cb_ref = malloc(sizeof(uint16_t) * (size_t)nc);
    uint16_t *biasb = malloc(sizeof(uint16_t) * (size_t)N);
    cr_assert(af && bf && cf && cf_ref && biasf && ab && bb && cb && cb_ref && biasb);
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    fill(&s, af, ab, na);
    fill(&s, bf, bb, nb);
    fill(&s, biasf, biasb, N);
    fill(&s, cf, cb, nc); /* C's old values: read back with beta 1, else overwritten */
    if (!c32)
        for (int64_t i = 0; i < nc; i++) cf[i] = rm_bf16_to_f32(cb[i]); /* f32 C: any values */
    memcpy(cf_ref, cf, sizeof(float) * (size_t)nc);
    memcpy(cb_ref, cb, sizeof(uint16_t) * (size_t)nc);
    if (!bias32)
        for (int64_t j = 0; j < N; j++) biasf[j] = rm_bf16_to_f32(biasb[j]);

    /* the reference: the arithmetic the route promises */
    float *a = dense(af, ab, a32, ar, ac, lda), *b = dense(bf, bb, b32, br, bc, ldb);
    if (c32) rm_sgemm(g->ta, g->tb, M, N, K, 1.0f, a, ac, b, bc, beta, cf_ref, ldc);
    else {
        float *c = malloc(sizeof(float) * (size_t)(M * N));
        cr_assert(c);
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++)
                c[i * N + j] = acc ? rm_bf16_to_f32(cb_ref[i * ldc + j]) : bias ? biasf[j] : 0.0f;
        rm_sgemm(g->ta, g->tb, M, N, K, 1.0f, a, ac, b, bc, acc || bias ? 1.0f : 0.0f, c, N);
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) cb_ref[i * ldc + j] = rm_f32_to_bf16(c[i * N + j]);
        free(c);
    }

    /* the route */
    const void *bias_p = !bias ? NULL : bias32 ? (const void *)biasf : (const void *)biasb;
    switch (g->k) {
    case K_PLAIN:
    case K_ACC: rm_bgemm(g->ta, g->tb, M, N, K, ab, lda, bb, ldb, beta, cb, ldc); break;
    case K_BIAS16:
    case K_BIAS32:
        rm_bgemm_bias(g->ta, g->tb, M, N, K, ab, lda, bb, ldb, bias_p, bias32, cb, ldc);
        break;
    case K_F32C:
    case K_F32C_ACC: rm_bgemm_f32(g->ta, g->tb, M, N, K, ab, lda, bb, ldb, beta, cf, ldc); break;
    default:
        rm_bgemm_wide(g->ta, g->tb, M, N, K, a32 ? (const void *)af : ab, a32, lda,
                      b32 ? (const void *)bf : bb, b32, ldb, bias_p, bias32, beta,
                      c32 ? (void *)cf : cb, c32, ldc, NULL);
    }

    for (int64_t i = 0; i < nc; i++) {
        bool same = c32 ? memcmp(&cf[i], &cf_ref[i], sizeof(float)) == 0 : cb[i] == cb_ref[i];
        cr_assert(same,
                  "case ta %d tb %d M %lld N %lld K %lld kind %d, %d threads: C[%lld] (row %lld, "
                  "col %lld) is %.9g, the plain f32 route gives %.9g",
                  g->ta, g->tb, (long long)M, (long long)N, (long long)K, (int)g->k, threads,
                  (long long)i, (long long)(i / ldc), (long long)(i % ldc),
                  c32 ? (double)cf[i] : (double)rm_bf16_to_f32(cb[i]),
                  c32 ? (double)cf_ref[i] : (double)rm_bf16_to_f32(cb_ref[i]));
    }
    free(a), free(b), free(af), free(bf), free(cf), free(cf_ref), free(biasf);
    free(ab), free(bb), free(cb), free(cb_ref), free(biasb);
}

Test(bf16_gemm_wide, matches_the_plain_f32_route) {
    setenv("REMAT_NO_BF16", "1", 1);
    cr_assert(!rm_bgemm_native(), "REMAT_NO_BF16 set, yet the bf16 GEMM is native");
    uint64_t runs = rm_bgemm_native_runs();
    for (int threads = 1; threads <= 2; threads++)
        for (size_t i = 0; i < sizeof k_cases / sizeof *k_cases; i++)
            run_case(&k_cases[i], threads, i + 1);
    cr_assert_eq(rm_bgemm_native_runs(), runs, "oneDNN's bf16 GEMM ran under REMAT_NO_BF16");
}

/* The same GEMM from the threads of a parallel region at once (matmul.c runs a
 * batch's small GEMMs so): each thread has its own scratch. */
Test(bf16_gemm_wide, from_a_parallel_region) {
    setenv("REMAT_NO_BF16", "1", 1);
    omp_set_num_threads(2);
    int fails = 0;
#pragma omp parallel num_threads(2) reduction(+ : fails)
    {
        int64_t M = 40 + 8 * omp_get_thread_num(), N = 24, K = 56;
        uint16_t *a = malloc(sizeof(uint16_t) * (size_t)(M * K)),
                 *b = malloc(sizeof(uint16_t) * (size_t)(K * N));
        uint16_t *c = malloc(sizeof(uint16_t) * (size_t)(M * N));
        float *af = malloc(sizeof(float) * (size_t)(M * K)),
              *bf = malloc(sizeof(float) * (size_t)(K * N));
        float *cr = calloc((size_t)(M * N), sizeof(float));
        if (!a || !b || !c || !af || !bf || !cr) fails++;
        else {
            uint64_t s = 77u + (uint64_t)omp_get_thread_num();
            for (int rep = 0; rep < 20; rep++) {
                fill(&s, af, a, M * K);
                fill(&s, bf, b, K * N);
                for (int64_t i = 0; i < M * K; i++) af[i] = rm_bf16_to_f32(a[i]);
                for (int64_t i = 0; i < K * N; i++) bf[i] = rm_bf16_to_f32(b[i]);
                rm_bgemm(false, false, M, N, K, a, K, b, N, 0.0f, c, N);
                rm_sgemm(false, false, M, N, K, 1.0f, af, K, bf, N, 0.0f, cr, N);
                for (int64_t i = 0; i < M * N; i++) fails += c[i] != rm_f32_to_bf16(cr[i]);
            }
        }
        free(a), free(b), free(c), free(af), free(bf), free(cr);
    }
    cr_assert_eq(fails, 0, "%d elements differ from the plain f32 route", fails);
}
