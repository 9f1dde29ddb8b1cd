/* src/backends/cpu/unary.c — cpu kernels of the elementwise unary ops
 * (src/ops/unary.c): y = f(x; p), the fused backward dx = g * f'(s) and
 * relu's 1-bit mask.
 *
 * Operands are contiguous; the kernels are flat loops the compiler
 * vectorises, split across OpenMP threads. The f32 exp, tanh and GELUs are
 * the vectorisable ones of vmath.h. */
#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "clones.h"
#include "cpu.h"
#include "tmpl.h"
#include "vmath.h"

/* SiLU's derivative sigmoid(x) (1 + x (1 - sigmoid(x))) (PyTorch's silu_backward formula),
 * f32 through the vectorisable exp. */
static inline float silu_grad_f(float x) {
    float s = 1.0f / (1.0f + rm_expf_v(-x));
    return s * (1.0f + x * (1.0f - s));
}
static inline double silu_grad_d(double x) {
    double s = 1.0 / (1.0 + exp(-x));
    return s * (1.0 + x * (1.0 - s));
}

/* One case of the kernels' switches (a row of the op table): OUT[i] = EXPR for every
 * i < n, split across threads past 32768 elements; the _SIMD one, for cheap EXPRs, also
 * vectorised and split past 65536. Each is one parallel region over fixed ranges: an
 * element's value never depends on the thread count. */
#define UN_EACH(OUT, EXPR)                                                                         \
    _Pragma("omp parallel for if (n > 32768)") for (int64_t i = 0; i < n; i++) OUT[i] = EXPR
#define UN_EACH_SIMD(OUT, EXPR)                                                                    \
    _Pragma("omp parallel for simd if (n > 65536)") for (int64_t i = 0; i < n; i++) OUT[i] = EXPR

/* Element access of the kernels below: T is the stored type, C the one the
 * math runs in, LD(v) reads a stored element as C and ST(v) stores a C.
 * f32 and f64 store what they compute; bf16 widens each element and rounds
 * each result to nearest even (rm_bf16_to_f32, rm_f32_to_bf16: the
 * conversions of src/core/core.h) inside the one loop, in registers, running
 * the f32 kernel's own expressions — so its results are bitwise the f32
 * kernel's on the widened values, rounded, as the chunked path of bf16.c
 * gives, with no f32 buffers and no passes of their own. */
/* The math, by the type it runs in (float for f32 and bf16, double for f64); the GELUs
 * are the erf and tanh forms, with their derivatives. */
#define UN_MATH(v, F, D) _Generic((v), float : F, double : D)(v)
#define UN_EXP(v) UN_MATH(v, rm_expf_v, exp)
#define UN_LOG(v) UN_MATH(v, logf, log)
#define UN_SQRT(v) UN_MATH(v, sqrtf, sqrt)
#define UN_TANH(v) UN_MATH(v, rm_tanhf_v, tanh)
#define UN_GELU(v) UN_MATH(v, rm_gelu_erff_v, rm_gelu_erf_d)
#define UN_GELU_T(v) UN_MATH(v, rm_gelu_tanhf_v, rm_gelu_tanh_d)
#define UN_GELU_GRAD(v) UN_MATH(v, rm_gelu_erff_grad_v, rm_gelu_erf_grad_d)
#define UN_GELU_T_GRAD(v) UN_MATH(v, rm_gelu_tanhf_grad_v, rm_gelu_tanh_grad_d)
#define UN_SILU_GRAD(v) UN_MATH(v, silu_grad_f, silu_grad_d)
#define UN_POW(v, e) _Generic((v), float : powf, double : pow)(v, e)

#define T float
#define UN_IT uint32_t
#define UN_SFX f32
#include "unary_body.h"

#define T double
#define UN_IT uint64_t
#define UN_SFX f64
#include "unary_body.h"

/* bf16: T and UN_IT are both uint16_t; ST(LD(g)) quiets a signalling NaN, as through f32 */
#define UN_NAME bf16
#define T uint16_t
#define C float
#define LD(v) rm_bf16_to_f32(v)
#define ST(v) rm_f32_to_bf16(v)
#define UN_IT uint16_t
#define UN_COPY_IS_MEMCPY 0
#include "unary_body.h"

/* ---- bf16 lookup tables ---------------------------------------------------------------
 * A bf16 operand has 65536 values. The ops whose f32 math is costly (exp, log, tanh,
 * sigmoid, the GELUs, SiLU: ~40 vector operations an element, or a libm call) look the forward's
 * bf16 result up instead, and the GELUs' and SiLU's backward its f32 factor f'(s) (then
 * rounds g * f' as bwd_bf16 does). Each table is filled once per process by the loops above (fwd_bf16,
 * and grad_factors_bf16 with bwd_bf16's expression) over every bit pattern, so a looked-up
 * value is the computed one by construction: bitwise the same results, for any thread
 * count. A GPT step under autocast spends 2.3x less CPU on the GELU forward and 2.5x less
 * on its backward (bench/bench_bf16_native.c); SiLU's backward (the Llama's MLP) takes
 * 2.4x less as a lookup than computed (a harness at (2048, 1024), 1 thread). 128 KiB a forward table and 256 KiB a
 * factor table, in .bss: only the ops used touch theirs. Built by the first call of at
 * least LUT_MIN elements (a table costs as much as computing that many); calls meanwhile
 * on other threads compute directly. */
#define LUT_MIN ((int64_t)65536)
#define LUT_N 65536
#define LUT_BUILD_CHUNK 4096
enum { LUT_NONE, LUT_BUILDING, LUT_READY };

typedef struct fwd_lut {
    atomic_int state;
    uint16_t y[LUT_N]; /* y[h] = the op of bf16 h, rounded */
} fwd_lut;
typedef struct grad_lut {
    atomic_int state;
    float d[LUT_N]; /* d[h] = f'(bf16 h) in f32 */
} grad_lut;
static fwd_lut g_fwd_lut[RM_U_RSUB + 1];
static grad_lut g_grad_lut[3]; /* grad_slot: GELU_ERF, GELU_TANH, SILU */

static bool fwd_tabled(rm_unary_op op) {
    return op == RM_U_EXP || op == RM_U_LOG || op == RM_U_TANH || op == RM_U_SIGMOID ||
           op == RM_U_GELU_ERF || op == RM_U_GELU_TANH || op == RM_U_SILU;
}

/* The ops whose backward has a factor table, dx = g * f'(s): their slot in g_grad_lut, or
 * -1. */
static int grad_slot(rm_unary_op op) {
    return op == RM_U_GELU_ERF ? 0 : op == RM_U_GELU_TANH ? 1 : op == RM_U_SILU ? 2 : -1;
}

/* d[i] = f'(s[i]) of a tabled op (grad_slot), as bwd_bf16 computes it before multiplying
 * by g (unary_bwd_cases.h). */
RM_CPU_CLONES static void grad_factors_bf16(rm_unary_op op, const uint16_t *restrict s,
                                            float *restrict d, int64_t n) {
    if (op == RM_U_GELU_ERF)
        for (int64_t i = 0; i < n; i++) d[i] = rm_gelu_erff_grad_v(rm_bf16_to_f32(s[i]));
    else if (op == RM_U_GELU_TANH)
        for (int64_t i = 0; i < n; i++) d[i] = rm_gelu_tanhf_grad_v(rm_bf16_to_f32(s[i]));
    else
        for (int64_t i = 0; i < n; i++) d[i] = silu_grad_f(rm_bf16_to_f32(s[i]));
}

/* Claims the table's build (true: the caller fills it, then publishes); false when it is
 * ready (*ready) or another thread builds it. */
static bool lut_claim(atomic_int *state, bool *ready) {
    int st = atomic_load_explicit(state, memory_order_acquire);
    *ready = st == LUT_READY;
    return st == LUT_NONE && atomic_compare_exchange_strong(state, &st, LUT_BUILDING);
}

/* op's forward table, or NULL while it is being built elsewhere. */
static const uint16_t *fwd_table(rm_unary_op op) {
    fwd_lut *t = &g_fwd_lut[op];
    bool ready;
    if (!lut_claim(&t->state, &ready)) return ready ? t->y : NULL;
    uint16_t h[LUT_BUILD_CHUNK];
    for (int c = 0; c < LUT_N; c += LUT_BUILD_CHUNK) {
        for (int i = 0; i < LUT_BUILD_CHUNK; i++) h[i] = (uint16_t)(c + i);
        fwd_bf16(op, h, t->y + c, LUT_BUILD_CHUNK, 0.0f);
    }
    atomic_store_explicit(&t->state, LUT_READY, memory_order_release);
    return t->y;
}

/* A tabled op's factor table (grad_slot(op) >= 0), or NULL while it is being built
 * elsewhere. */
static const float *grad_table(rm_unary_op op) {
    grad_lut *t = &g_grad_lut[grad_slot(op)];
    bool ready;
    if (!lut_claim(&t->state, &ready)) return ready ? t->d : NULL;
    uint16_t h[LUT_BUILD_CHUNK];
    for (int c = 0; c < LUT_N; c += LUT_BUILD_CHUNK) {
        for (int i = 0; i < LUT_BUILD_CHUNK; i++) h[i] = (uint16_t)(c + i);
        grad_factors_bf16(op, h, t->d + c, LUT_BUILD_CHUNK);
    }
    atomic_store_explicit(&t->state, LUT_READY, memory_order_release);
    return t->d;
}

RM_CPU_CLONES static void lut_fwd_bf16(const uint16_t *restrict tab, const uint16_t *restrict x,
                                       uint16_t *restrict y, int64_t n) {
#pragma omp parallel for if (n > 32768)
    for (int64_t i = 0; i < n; i++) y[i] = tab[x[i]];
}
/* dx = g * f'(s), rounded; lut_bwd_inplace_bf16 over the dying gradient (dx == g), as
 * bwd_inplace_bf16 */
RM_CPU_CLONES static void lut_bwd_bf16(const float *restrict tab, const uint16_t *restrict g,
                                       const uint16_t *restrict s, uint16_t *restrict dx,
                                       int64_t n) {
#pragma omp parallel for if (n > 32768)
    for (int64_t i = 0; i < n; i++) dx[i] = rm_f32_to_bf16(rm_bf16_to_f32(g[i]) * tab[s[i]]);
}
RM_CPU_CLONES static void lut_bwd_inplace_bf16(const float *restrict tab, uint16_t *restrict dx,
                                               const uint16_t *restrict s, int64_t n) {
    const uint16_t *g = dx;
#pragma omp parallel for if (n > 32768)
    for (int64_t i = 0; i < n; i++) dx[i] = rm_f32_to_bf16(rm_bf16_to_f32(g[i]) * tab[s[i]]);
}

/* The GELU op's bf16 tables for the fused bias + GELU kernels (bias_gelu.c): built by the
 * first call of at least LUT_MIN elements, as the unary kernels' own; NULL below that or
 * while another thread builds them (the caller then computes, with the same expressions). */
const uint16_t *rm_cpu_gelu_bf16_fwd_table(rm_unary_op op, int64_t n) {
    return n >= LUT_MIN ? fwd_table(op) : NULL;
}
const float *rm_cpu_gelu_bf16_grad_table(rm_unary_op op, int64_t n) {
    return n >= LUT_MIN ? grad_table(op) : NULL;
}

bool rm_cpu_unary_bf16_table_ready(rm_unary_op op, bool backward) {
    if (op < 0 || op > RM_U_RSUB) return false;
    if (backward)
        return grad_slot(op) >= 0 && atomic_load(&g_grad_lut[grad_slot(op)].state) == LUT_READY;
    return atomic_load(&g_fwd_lut[op].state) == LUT_READY;
}

/* bf16: the loops above when every bf16-typed operand is bf16, with n
 * elements, contiguous (as the ops make them; relu's u8 mask aside);
 * anything else (a mixed-dtype call) through the f32 kernel
 * (rm_cpu_bf16_via_f32), which gives the same values. */
static bool bf16_run(const remat_tensor *t, int64_t n) {
    return !t || (t->dtype == REMAT_BF16 && remat_numel(t) == n && remat_is_contiguous(t));
}
static bool all_bf16(const rm_kargs *k, int64_t n, bool with_in1) {
    return bf16_run(k->in[0], n) && (!with_in1 || bf16_run(k->in[1], n)) && bf16_run(k->out[0], n);
}

remat_status rm_cpu_unary_bf16(const rm_kargs *k) {
    const rm_unary_params *p = k->params;
    int64_t n = remat_numel(k->out[0]);
    if (!all_bf16(k, n, true)) return rm_cpu_bf16_via_f32[RM_K_UNARY](k);
    const uint16_t *tab = n >= LUT_MIN && fwd_tabled(p->op) ? fwd_table(p->op) : NULL;
    if (tab) lut_fwd_bf16(tab, rm_ptr(k->in[0]), rm_ptr(k->out[0]), n);
    else fwd_bf16(p->op, rm_ptr(k->in[0]), rm_ptr(k->out[0]), n, (float)p->p);
    return REMAT_OK;
}

remat_status rm_cpu_unary_bwd_bf16(const rm_kargs *k) {
    const rm_unary_params *p = k->params;
    int64_t n = remat_numel(k->out[0]);
    if (!all_bf16(k, n, true)) return rm_cpu_bf16_via_f32[RM_K_UNARY_BWD](k);
    const uint16_t *g = rm_ptr(k->in[0]), *s = k->in[1] ? rm_ptr(k->in[1]) : NULL;
    uint16_t *dx = rm_ptr(k->out[0]);
    const float *tab = n >= LUT_MIN && grad_slot(p->op) >= 0 && s ? grad_table(p->op) : NULL;
    if (tab && dx == g) lut_bwd_inplace_bf16(tab, dx, s, n);
    else if (tab) lut_bwd_bf16(tab, g, s, dx, n);
    else if (dx == g) bwd_inplace_bf16(p->op, dx, s, n, (float)p->p);
    else bwd_bf16(p->op, g, s, dx, n, (float)p->p);
    return REMAT_OK;
}

/* relu's mask (in: y; out: the u8 mask) and its backward (in: g, mask; out: dx) */
remat_status rm_cpu_relu_mask_bf16(const rm_kargs *k) {
    int64_t n = remat_numel(k->in[0]);
    if (!bf16_run(k->in[0], n) || k->out[0]->dtype != REMAT_U8 || !remat_is_contiguous(k->out[0]))
        return rm_cpu_bf16_via_f32[RM_K_RELU_MASK](k);
    relu_mask_bf16(rm_ptr(k->in[0]), rm_ptr(k->out[0]), n);
    return REMAT_OK;
}

remat_status rm_cpu_relu_mask_bwd_bf16(const rm_kargs *k) {
    int64_t n = remat_numel(k->out[0]);
    if (!all_bf16(k, n, false) || !remat_is_contiguous(k->in[1]))
        return rm_cpu_bf16_via_f32[RM_K_RELU_MASK_BWD](k);
    relu_mask_bwd_bf16(rm_ptr(k->in[0]), rm_ptr(k->in[1]), rm_ptr(k->out[0]), n);
    return REMAT_OK;
}
