/* src/backends/cpu/elementwise.c — the cpu elementwise engine: the kernel
 * of the broadcasting binary ops (src/ops/binary.c), the in-place ops
 * (src/ops/inplace.c) and their backward formulas.
 *
 * The engine computes y = f(a, b, c; p) over y's shape, where a, b, c are
 * broadcast to y and y may be any strided view (in-place ops write through
 * the strides of their target). Before running it
 *   1. drops size-1 dims (their strides never matter),
 *   2. coalesces adjacent dims that are contiguous with each other in every
 *      operand, so that a contiguous tensor becomes one flat dim and a bias
 *      add (N, C) + (C) becomes two dims with unit inner strides,
 * then walks the outer dims with rm_iter and runs a flat inner loop over
 * the last dim, specialised for unit strides (vectorised) and for a scalar
 * (stride 0) operand. OpenMP threads split the flat range; each seeks its
 * iterator to its start, so any shape parallelises, even a single row. */
#include <math.h>
#include <string.h>

#include "clones.h"
#include "cpu.h"
#include "tmpl.h"

#ifdef _OPENMP
#include <omp.h>
#endif

/* Engine ops: rm_ew_op in src/core/kernels.h. */
typedef rm_ew_op ewop;

static const int k_arity[RM_EW_N_OPS] = {
    [RM_EW_FILL] = 0,   [RM_EW_SCALE] = 1,    [RM_EW_RELU] = 1,   [RM_EW_ADD] = 2,
    [RM_EW_SUB] = 2,    [RM_EW_MUL] = 2,      [RM_EW_DIV] = 2,    [RM_EW_POW] = 2,
    [RM_EW_AXPY] = 2,   [RM_EW_RELU_BWD] = 2, [RM_EW_DIV_GB] = 3, [RM_EW_POW_GA] = 3,
    [RM_EW_POW_GB] = 3,
};

/* A coalesced iteration plan: operand 0 is y, 1..3 are a, b, c. */
typedef struct ew_plan {
    int nd;
    int64_t shape[REMAT_MAX_DIMS];
    int64_t st[4][REMAT_MAX_DIMS];
} ew_plan;

static void plan_build(ew_plan *p, const remat_tensor *y, remat_tensor *const *x, int n_in) {
    int64_t st[4][REMAT_MAX_DIMS];
    memcpy(st[0], y->strides, sizeof(int64_t) * (size_t)y->ndim);
    for (int k = 0; k < 3; k++) {
        if (k < n_in) rm_broadcast_strides(x[k], y->ndim, y->shape, st[k + 1]);
        else
            for (int d = 0; d < y->ndim; d++) st[k + 1][d] = 0; /* unused operand */
    }
    int nd = 0;
    for (int d = 0; d < y->ndim; d++) {
        if (y->shape[d] == 1) continue; /* size-1 dims: strides irrelevant */
        if (nd > 0) {
            /* merge dim d into the previous kept dim if every operand steps
             * over the previous dim exactly as over a whole row of d */
            bool merge = true;
            for (int k = 0; k < 4 && merge; k++) merge = p->st[k][nd - 1] == st[k][d] * y->shape[d];
            if (merge) {
                p->shape[nd - 1] *= y->shape[d];
                for (int k = 0; k < 4; k++) p->st[k][nd - 1] = st[k][d];
                continue;
            }
        }
        p->shape[nd] = y->shape[d];
        for (int k = 0; k < 4; k++) p->st[k][nd] = st[k][d];
        nd++;
    }
    if (nd == 0) { /* a single element */
        p->shape[0] = 1;
        for (int k = 0; k < 4; k++) p->st[k][0] = 1;
        nd = 1;
    }
    p->nd = nd;
}

/* ---- the loops, once per dtype: elementwise_body.h ------------------------------------- */
#define T f32
#define EW_POW powf
#define EW_LOG logf
#include "elementwise_body.h"

#define T f64
#define EW_POW pow
#define EW_LOG log
#include "elementwise_body.h"

/* Work per element above which threads pay off; pow/log are ~20x dearer. */
static int64_t ew_threshold(ewop op) {
    return (op == RM_EW_POW || op == RM_EW_POW_GA || op == RM_EW_POW_GB) ? RM_OMP_MIN / 16
                                                                         : RM_OMP_MIN;
}

/* add's f32 + bf16 (either order; autocast leaves it uncast, src/ops/binary.c)
 * into an f32 y, all contiguous with y's element count: one loop that widens
 * the bf16 operand in registers (exact) and adds in the engine's order, a + b:
 * bitwise what the chunked via-f32 path (bf16.c) gives, without its buffers
 * and widening pass. One parallel region over fixed ranges. y may be exactly
 * the f32 operand (an element is read before it is written), so no restrict. */
RM_CPU_CLONES static void add_f32_bf16(float *y, const float *f, const uint16_t *restrict h,
                                       bool bf16_first, int64_t n) {
    if (bf16_first) {
#pragma omp parallel for simd if (n > RM_OMP_MIN)
        for (int64_t i = 0; i < n; i++) y[i] = rm_bf16_to_f32(h[i]) + f[i];
    } else {
#pragma omp parallel for simd if (n > RM_OMP_MIN)
        for (int64_t i = 0; i < n; i++) y[i] = f[i] + rm_bf16_to_f32(h[i]);
    }
}

static bool flat_run(const remat_tensor *t, remat_dtype dt, int64_t n) {
    return t->dtype == dt && remat_numel(t) == n && remat_is_contiguous(t);
}

/* Whether k is add's f32 + bf16 that add_f32_bf16 runs (and runs it). */
static bool mixed_add(const rm_kargs *k) {
    const rm_ew_params *prm = k->params;
    remat_tensor *y = k->out[0], *a = k->in[0], *b = k->in[1];
    int64_t n = remat_numel(y);
    if (prm->op != RM_EW_ADD || !flat_run(y, REMAT_F32, n)) return false;
    bool bf16_first = a->dtype == REMAT_BF16;
    remat_tensor *f = bf16_first ? b : a, *h = bf16_first ? a : b;
    if (!flat_run(f, REMAT_F32, n) || !flat_run(h, REMAT_BF16, n)) return false;
    add_f32_bf16(rm_ptr(y), rm_ptr(f), rm_ptr(h), bf16_first, n);
    return true;
}

/* The RM_K_ELEMENTWISE kernel: y = f(a, b, c; p) with a, b, c (as many
 * as the op reads; others NULL) broadcast to y's shape, all of y's dtype —
 * or, for an f32 y, some of them bf16 (add's f32 + bf16 that autocast leaves
 * uncast, src/ops/binary.c): those are widened in registers when the operands
 * are flat (mixed_add), else by the bf16 path, chunk by chunk where the
 * operands allow it, exactly (widening is exact), so the result is bitwise
 * the f32 op on a widened copy. y is written through its
 * strides. */
remat_status rm_cpu_elementwise(const rm_kargs *k) {
    const rm_ew_params *prm = k->params;
    ewop op = prm->op;
    double p = prm->p;
    remat_tensor *y = k->out[0];
    remat_tensor *const *x = k->in;
    int n_in = k_arity[op];
    for (int i = 0; i < n_in; i++)
        if (x[i]->dtype == REMAT_BF16)
            return mixed_add(k) ? REMAT_OK : rm_cpu_bf16_via_f32[RM_K_ELEMENTWISE](k);
    int64_t n = rm_shape_numel(y->ndim, y->shape);
    if (n == 0) return REMAT_OK;
    ew_plan pl;
    plan_build(&pl, y, x, n_in);
    void *py = rm_ptr(y), *pa = n_in > 0 ? rm_ptr(x[0]) : NULL,
         *pb = n_in > 1 ? rm_ptr(x[1]) : NULL, *pc = n_in > 2 ? rm_ptr(x[2]) : NULL;
    bool f32 = y->dtype == REMAT_F32;
#pragma omp parallel if (n > ew_threshold(op))
    {
        int nt = 1, id = 0;
#ifdef _OPENMP
        nt = omp_get_num_threads();
        id = omp_get_thread_num();
#endif
        int64_t lo = n * id / nt, hi = n * (id + 1) / nt;
        if (lo < hi) {
            if (f32) ew_range_f32(op, &pl, py, pa, pb, pc, (float)p, lo, hi);
            else ew_range_f64(op, &pl, py, pa, pb, pc, p, lo, hi);
        }
    }
    return REMAT_OK;
}
