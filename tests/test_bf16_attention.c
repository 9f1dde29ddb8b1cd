/* tests/test_bf16_attention.c — the bf16 fused attention kernels (where the
 * CPU has bf16 GEMMs, src/backends/cpu/attention.c) against a plain
 * reference of their arithmetic kept here: per batch entry and block of 64
 * query rows the same oneDNN bf16 GEMMs on dense operands, the scores scaled
 * in f32, the row max, exp (rm_expf_neg_cl_v) and 16-lane row sums, P and dS rounded to bf16,
 * δ = rowsum(dO ∘ O) in 16 lanes, dK and dV summed in f32 over the query
 * blocks and rounded once. The kernels may fuse passes and cache copies,
 * but every output (y, lse, dq, dk, dv) must stay bitwise this reference,
 * at 1 and 2 threads. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/clones.h" /* vmath.h: the clones' fused steps, as the kernel */
#include "backends/cpu/cpu.h"
#include "backends/cpu/gemm.h"
#include "backends/cpu/vmath.h"
#include "core/core.h"
#include "core/kernels.h"
#include "support/rt.h"

#define QB 64 /* query rows per block, as the kernel */
#define LANES 16

typedef uint16_t bf16;

typedef struct ref_dims {
    int64_t Tq, Tk, D, Dv;
    bool causal;
    float sc;
} ref_dims;

/* keys visible to rows [.., i1): causal top-left aligned */
static int64_t ref_keys(const ref_dims *d, int64_t i1) {
    return d->causal && i1 < d->Tk ? i1 : d->Tk;
}

/* acc[0] after summing the LANES partial sums pairwise (as the kernel's row sums) */
static float lanes_total(float *acc) {
    for (int w = LANES / 2; w > 0; w /= 2)
        for (int j = 0; j < w; j++) acc[j] += acc[j + w];
    return acc[0];
}

/* Forward of one dense batch entry: q (Tq, D), k (Tk, D), v (Tk, Dv) -> o (Tq, Dv), lse (Tq). */
static void ref_forward(const ref_dims *d, const bf16 *q, const bf16 *k, const bf16 *v, bf16 *o,
                        float *lse) {
    float *s = malloc(sizeof(float) * (size_t)(QB * d->Tk) + 1);
    bf16 *p = malloc(sizeof(bf16) * (size_t)(QB * d->Tk) + 1);
    for (int64_t i0 = 0; i0 < d->Tq; i0 += QB) {
        int64_t m = d->Tq - i0 < QB ? d->Tq - i0 : QB, kn = ref_keys(d, i0 + m);
        if (kn == 0) {
            memset(o + i0 * d->Dv, 0, sizeof(bf16) * (size_t)(m * d->Dv));
            for (int64_t r = 0; r < m; r++) lse[i0 + r] = -INFINITY;
            continue;
        }
        rm_bgemm_f32(false, true, m, kn, d->D, q + i0 * d->D, d->D, k, d->D, 0.0f, s, kn);
        for (int64_t r = 0; r < m; r++) {
            float *x = s + r * kn;
            int64_t lim = d->causal ? i0 + r + 1 : kn;
            if (lim > kn) lim = kn;
            float mx = -INFINITY;
            for (int64_t j = 0; j < lim; j++) {
                x[j] = x[j] * d->sc;
                if (x[j] > mx) mx = x[j];
            }
            float sub = mx == -INFINITY ? 0.0f : mx;
            float acc[LANES] = {0};
            for (int64_t j = 0; j < lim; j++) {
                x[j] = rm_expf_neg_cl_v(x[j] - sub);
                acc[j < lim - lim % LANES ? j % LANES : 0] += x[j];
            }
            float sum = lanes_total(acc), inv = 1.0f / sum;
            for (int64_t j = 0; j < kn; j++)
                p[r * kn + j] = j < lim ? rm_f32_to_bf16(x[j] * inv) : 0;
            lse[i0 + r] = lim > 0 ? sub + logf(sum) : -INFINITY;
        }
        rm_bgemm(false, false, m, d->Dv, kn, p, kn, v, d->Dv, 0.0f, o + i0 * d->Dv, d->Dv);
    }
    free(s), free(p);
}

/* Backward of one dense batch entry (o, go (Tq, Dv), lse from ref_forward). */
static void ref_backward(const ref_dims *d, const bf16 *q, const bf16 *k, const bf16 *v,
                         const bf16 *o, const bf16 *go, const float *lse, bf16 *dq, bf16 *dk,
                         bf16 *dv) {
    size_t n = (size_t)(QB * d->Tk);
    float *s = malloc(sizeof(float) * 2 * n + 1), *dp = s + n;
    bf16 *p = malloc(sizeof(bf16) * 2 * n + 1), *ds = p + n;
    float *dks = calloc((size_t)(d->Tk * (d->D + d->Dv)) + 1, sizeof(float)),
          *dvs = dks + d->Tk * d->D;
    for (int64_t i0 = 0; i0 < d->Tq; i0 += QB) {
        int64_t m = d->Tq - i0 < QB ? d->Tq - i0 : QB, kn = ref_keys(d, i0 + m);
        const bf16 *qi = q + i0 * d->D, *gi = go + i0 * d->Dv;
        if (kn == 0) {
            memset(dq + i0 * d->D, 0, sizeof(bf16) * (size_t)(m * d->D));
            continue;
        }
        rm_bgemm_f32(false, true, m, kn, d->D, qi, d->D, k, d->D, 0.0f, s, kn);
        rm_bgemm_f32(false, true, m, kn, d->Dv, gi, d->Dv, v, d->Dv, 0.0f, dp, kn);
        for (int64_t r = 0; r < m; r++) {
            int64_t lim = d->causal ? i0 + r + 1 : kn;
            if (lim > kn) lim = kn;
            float l = lse[i0 + r] == -INFINITY ? 0.0f : lse[i0 + r];
            float acc[LANES] = {0};
            for (int64_t c = 0; c < d->Dv; c++) {
                const bf16 *gr = gi + r * d->Dv, *yr = o + (i0 + r) * d->Dv;
                float t = rm_bf16_to_f32(gr[c]) * rm_bf16_to_f32(yr[c]);
                acc[c < d->Dv - d->Dv % LANES ? c % LANES : 0] += t;
            }
            float delta = lanes_total(acc);
            for (int64_t j = 0; j < kn; j++) {
                float x = s[r * kn + j] * d->sc;
                float e = j < lim ? rm_expf_neg_cl_v(x - l) : 0.0f;
                p[r * kn + j] = rm_f32_to_bf16(e);
                ds[r * kn + j] = rm_f32_to_bf16(e * (dp[r * kn + j] - delta) * d->sc);
            }
        }
        rm_bgemm_f32(true, false, kn, d->Dv, m, p, kn, gi, d->Dv, 1.0f, dvs, d->Dv);
        rm_bgemm(false, false, m, d->D, kn, ds, kn, k, d->D, 0.0f, dq + i0 * d->D, d->D);
        rm_bgemm_f32(true, false, kn, d->D, m, ds, kn, qi, d->D, 1.0f, dks, d->D);
    }
    for (int64_t i = 0; i < d->Tk * d->D; i++) dk[i] = rm_f32_to_bf16(dks[i]);
    for (int64_t i = 0; i < d->Tk * d->Dv; i++) dv[i] = rm_f32_to_bf16(dvs[i]);
    free(s), free(p), free(dks);
}

/* (B, H, T, C) bf16 as the kernels see the GPT's heads: a (B, T, H, C) tensor
 * transposed (row stride H·C), or contiguous when !heads. Random when seed. */
static remat_tensor *att_tensor(int64_t B, int64_t H, int64_t T, int64_t C, bool heads,
                                uint64_t seed) {
    const int64_t st[4] = {B, heads ? T : H, heads ? H : T, C};
    remat_tensor *x = seed ? rt_rand(4, st, REMAT_F32, -2, 2, seed) : NULL, *b = NULL, *t = NULL;
    if (seed) RT_OK(remat_to_dtype(&b, x, REMAT_BF16));
    else RT_OK(remat_zeros(&b, 4, st, REMAT_BF16, REMAT_DEVICE_CPU));
    if (heads) RT_OK(remat_transpose(&t, b, 1, 2));
    remat_release(x);
    if (!heads) return b;
    remat_release(b);
    return t;
}

/* Batch entry e (over B·H) of t (B, H, T, C) as dense rows, into buf. */
static bf16 *entry_of(const remat_tensor *t, int64_t e, bf16 *buf) {
    const bf16 *base = rm_ptr(t);
    int64_t H = t->shape[1], T = t->shape[2], C = t->shape[3];
    const bf16 *src = base + (e / H) * t->strides[0] + (e % H) * t->strides[1];
    for (int64_t r = 0; r < T; r++)
        for (int64_t c = 0; c < C; c++) buf[r * C + c] = src[r * t->strides[2] + c * t->strides[3]];
    return buf;
}

static const char *const what[5] = {"y", "lse", "dq", "dk", "dv"};

/* The kernels' forward and backward against ref_forward/ref_backward. */
static void check_case(int64_t B, int64_t H, int64_t Tq, int64_t Tk, int64_t D, int64_t Dv,
                       bool causal, bool heads, uint64_t seed) {
    const rm_attention_params prm = {.causal = causal, .scale = 1.0 / sqrt((double)D)};
    ref_dims d = {Tq, Tk, D, Dv, causal, (float)prm.scale};
    remat_tensor *q = att_tensor(B, H, Tq, D, heads, seed),
                 *k = att_tensor(B, H, Tk, D, heads, seed + 1);
    remat_tensor *v = att_tensor(B, H, Tk, Dv, heads, seed + 2),
                 *go = att_tensor(B, H, Tq, Dv, heads, seed + 3);
    int64_t nb = B * H, n = Tq > Tk ? Tq : Tk, C = D > Dv ? D : Dv;
    bf16 *buf = malloc(sizeof(bf16) * (size_t)(9 * n * C)), *eb[9];
    for (int i = 0; i < 9; i++) eb[i] = buf + i * n * C;
    float *lse_ref = malloc(sizeof(float) * (size_t)Tq);
    for (int t = 1; t <= 2; t++) {
        omp_set_num_threads(t);
        /* outputs in the op's layout: (B, T, H, C) stored, seen as (B, H, T, C) */
        remat_tensor *y = att_tensor(B, H, Tq, Dv, true, 0), *lse = NULL;
        remat_tensor *g[3] = {att_tensor(B, H, Tq, D, true, 0), att_tensor(B, H, Tk, D, true, 0),
                              att_tensor(B, H, Tk, Dv, true, 0)};
        RT_OK(remat_zeros(&lse, 3, (const int64_t[]){B, H, Tq}, REMAT_F32, REMAT_DEVICE_CPU));
        rm_kargs kf = {.in = {q, k, v}, .out = {y, lse}, .params = &prm};
        RT_OK(rm_cpu_kernels[RM_K_ATTENTION][REMAT_BF16](&kf));
        rm_kargs kb = {.in = {q, k, v, y, go, lse}, .out = {g[0], g[1], g[2]}, .params = &prm};
        RT_OK(rm_cpu_kernels[RM_K_ATTENTION_BWD][REMAT_BF16](&kb));
        const remat_tensor *got[5] = {y, lse, g[0], g[1], g[2]};
        for (int64_t e = 0; e < nb; e++) {
            const bf16 *qe = entry_of(q, e, eb[0]), *ke = entry_of(k, e, eb[1]);
            const bf16 *ve = entry_of(v, e, eb[2]), *ge = entry_of(go, e, eb[3]);
            ref_forward(&d, qe, ke, ve, eb[4], lse_ref);
            ref_backward(&d, qe, ke, ve, eb[4], ge, lse_ref, eb[5], eb[6], eb[7]);
            for (int i = 0; i < 5; i++) {
                const int64_t rows = i == 0 || i == 1 || i == 2 ? Tq : Tk;
                const int64_t cols = i == 1 ? 1 : (i == 0 || i == 4 ? Dv : D);
                const void *want = i == 1 ? (const void *)lse_ref : eb[i == 0 ? 4 : 3 + i];
                const void *have = i == 1 ? (const float *)rm_ptr(lse) + e * Tq
                                          : (const void *)entry_of(got[i], e, eb[8]);
                size_t bytes = (size_t)(rows * cols) * (i == 1 ? sizeof(float) : sizeof(bf16));
                cr_assert(memcmp(want, have, bytes) == 0,
                          "B %lld H %lld Tq %lld Tk %lld D %lld Dv %lld causal %d heads %d, %d "
                          "threads: %s of batch entry %lld differs from the reference",
                          (long long)B, (long long)H, (long long)Tq, (long long)Tk, (long long)D,
                          (long long)Dv, causal, heads, t, what[i], (long long)e);
            }
        }
        remat_release(y), remat_release(lse);
        for (int i = 0; i < 3; i++) remat_release(g[i]);
    }
    omp_set_num_threads(2);
    free(buf), free(lse_ref);
    remat_release(q), remat_release(k), remat_release(v), remat_release(go);
}

/* GPT-like heads (strided per-head views, outputs stored (B, T, H, D)) over
 * several query blocks, the last one partial; contiguous operands; not
 * causal; more keys than queries and a value width other than D (row
 * lengths off the 16 lanes). */
Test(bf16_attention, kernels_match_the_reference_bitwise_at_1_and_2_threads) {
    if (!rm_bgemm_native()) cr_skip_test("no bf16 GEMMs here (AVX512_BF16/AMX and oneDNN)");
    check_case(2, 3, 150, 150, 64, 64, true, true, 11);
    check_case(2, 2, 100, 100, 32, 32, true, false, 21);
    check_case(1, 3, 90, 90, 16, 16, false, true, 31);
    check_case(2, 2, 70, 100, 16, 24, true, true, 41);
    cr_assert_eq(remat_live_tensors(), 0);
}
