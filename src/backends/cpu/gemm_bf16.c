/* src/backends/cpu/gemm_bf16.c — the bf16 GEMM (see gemm.h): oneDNN's
 * matmul primitive on bf16 operands with f32 accumulation, where the CPU
 * has bf16 dot-product instructions (AVX512_BF16 or AMX, detected at run
 * time: remat_cpu_has_bf16); otherwise, and with another GEMM backend, the
 * operands are widened to f32 (an f32 operand of rm_bgemm_wide rounded to
 * bf16 as it is), multiplied by rm_sgemm and the result rounded back once
 * (the same numbers up to f32 summation order; slower than f32 itself, by
 * the widening and rounding passes, hence a warning). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "core/core.h"
#include "cpu.h"
#include "gemm.h"
#include "remat/autocast.h"
#include "workspace.h"

#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(REMAT_GEMM_ONEDNN)
#include <oneapi/dnnl/dnnl.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

/* A leading dimension that does not matter (one row) made valid, as gemm.c does. */
static int64_t fix_ld(int64_t rows, int64_t cols, int64_t ld) {
    int64_t need = cols > 1 ? cols : 1;
    if (rows <= 1 && ld < need) return need;
    return ld < 1 ? 1 : ld;
}

/* ---- the f32 path --------------------------------------------------------------------- */
/* The widened copies (the largest GEMM's: ~16 MB on the GPT L=6 D=384 T=256 B=8, some
 * 250 MB at GPT-2 124M's T=1024 B=8) come from the cpu device's allocator (workspace.h):
 * the allocator's counters, the planner's profile and `remat bench`'s bytes count them
 * while the GEMM holds them, and its buffer cache hands the same size back to the next
 * GEMM of that shape. Allocated per call from malloc, buffers of megabytes came fresh
 * from mmap and went back on free, so every GEMM page-faulted its copies in again (perf,
 * that GPT on one thread: a quarter of the bf16 step's samples in the kernel's page-fault
 * and munmap paths); a per-thread buffer kept outside the counters avoided that but was
 * invisible to the budget. A caller that runs GEMMs on several threads at once takes
 * their scratch itself (rm_bgemm_wide's ws: matmul.c's batch loop), so that it counts in
 * the calling thread's meter. */

/* Floats of scratch for the widened A (M x K), B (K x N) and, unless C is f32, C. */
static size_t wide_floats(int64_t M, int64_t N, int64_t K, bool cf32) {
    return (size_t)(M * K) + (size_t)(K * N) + (cf32 ? 0 : (size_t)(M * N));
}

size_t rm_bgemm_wide_bytes(int64_t M, int64_t N, int64_t K, bool c_f32) {
    if (M <= 0 || N <= 0 || K <= 0) return 0;
    return rm_cpu_ws_round(sizeof(float) * wide_floats(M, N, K, c_f32));
}

/* A bias row (N values, bf16 or f32: bgemm's bias argument), its element j as f32. */
typedef struct bias_row {
    const void *p; /* NULL: no bias */
    bool f32;
} bias_row;
static float bias_at(bias_row b, int64_t j) {
    return b.f32 ? ((const float *)b.p)[j] : rm_bf16_to_f32(((const uint16_t *)b.p)[j]);
}

/* An operand: bf16, or f32 (rm_bgemm_wide) whose elements the GEMM multiplies
 * rounded to bf16, as it would a rounded copy. */
typedef struct opnd {
    const void *p;
    bool f32;
} opnd;
static float opnd_at(opnd x, int64_t i) {
    return rm_bf16_to_f32(x.f32 ? rm_f32_to_bf16(((const float *)x.p)[i])
                                : ((const uint16_t *)x.p)[i]);
}

/* C = A·B (+ bias, or + beta·C) element by element, for when the widened copies
 * could not be allocated. C is bf16, or f32 when cf32. */
static void bgemm_naive(bool ta, bool tb, int64_t M, int64_t N, int64_t K, opnd A, int64_t lda,
                        opnd B, int64_t ldb, bias_row bias, float beta, void *Cv, int64_t ldc,
                        bool cf32) {
    float *Cf = Cv;
    uint16_t *Cb = Cv;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            float s = bias.p ? bias_at(bias, j) : 0.0f;
            if (beta != 0) s = cf32 ? Cf[i * ldc + j] : rm_bf16_to_f32(Cb[i * ldc + j]);
            for (int64_t p = 0; p < K; p++)
                s += opnd_at(A, ta ? p * lda + i : i * lda + p) *
                     opnd_at(B, tb ? j * ldb + p : p * ldb + j);
            if (cf32) Cf[i * ldc + j] = s;
            else Cb[i * ldc + j] = rm_f32_to_bf16(s);
        }
}

/* n elements of x from element i widened (an f32 x rounded to bf16 first) into y. */
static void widen_run(opnd x, int64_t i, float *y, int64_t n) {
    if (x.f32) rm_bf16_round_f32_run((const float *)x.p + i, y, n);
    else rm_bf16_widen_run((const uint16_t *)x.p + i, y, n);
}

/* Rows [r0, r1) of X (stored rows of `cols` elements, row stride ld) widened
 * into the dense f32 copy f. */
static void widen_rows(opnd X, int64_t cols, int64_t ld, float *f, int64_t r0, int64_t r1) {
    if (ld == cols) widen_run(X, r0 * cols, f + r0 * cols, (r1 - r0) * cols);
    else
        for (int64_t r = r0; r < r1; r++) widen_run(X, r * ld, f + r * cols, cols);
}

/* Rows [r0, r1) of the dense f32 C (N wide) set to the bias row. */
static void bias_rows(bias_row bias, int64_t N, float *c, int64_t r0, int64_t r1) {
    if (r0 >= r1) return;
    float *row = c + r0 * N;
    if (bias.f32) memcpy(row, bias.p, sizeof(float) * (size_t)N);
    else rm_bf16_widen_run(bias.p, row, N);
    for (int64_t r = r0 + 1; r < r1; r++) memcpy(c + r * N, row, sizeof(float) * (size_t)N);
}

/* Rows [r0, r1) of the dense f32 c (N wide) rounded into the bf16 C (row stride ldc). */
static void narrow_rows(const float *c, int64_t N, uint16_t *C, int64_t ldc, int64_t r0,
                        int64_t r1) {
    if (ldc == N) rm_bf16_round_run(c + r0 * N, C + r0 * N, (r1 - r0) * N);
    else
        for (int64_t r = r0; r < r1; r++) rm_bf16_round_run(c + r * N, C + r * ldc, N);
}

/* The share [*r0, *r1) of `rows` rows that thread `id` of `nt` takes. */
static void share(int64_t rows, int nt, int id, int64_t *r0, int64_t *r1) {
    int64_t per = (rows + nt - 1) / nt;
    *r0 = per * id < rows ? per * id : rows;
    *r1 = *r0 + per < rows ? *r0 + per : rows;
}

/* The operands of one GEMM through f32: A (ar × ac as stored, row stride lda)
 * and B widened into a and b, and the f32 C c (M × N, NULL: C is f32 itself)
 * holding the bias rows or, with beta, C widened. */
typedef struct wide_in {
    opnd A, B;
    const uint16_t *C;
    int64_t ar, ac, lda, br, bc, ldb, M, N, ldc;
    bias_row bias;
    float beta;
    float *a, *b, *c;
} wide_in;

static void wide_fill(const wide_in *w, int nt, int id) {
    int64_t r0, r1;
    share(w->ar, nt, id, &r0, &r1);
    widen_rows(w->A, w->ac, w->lda, w->a, r0, r1);
    share(w->br, nt, id, &r0, &r1);
    widen_rows(w->B, w->bc, w->ldb, w->b, r0, r1);
    if (!w->c) return;
    share(w->M, nt, id, &r0, &r1);
    if (w->beta != 0) widen_rows((opnd){w->C, false}, w->N, w->ldc, w->c, r0, r1);
    else if (w->bias.p) bias_rows(w->bias, w->N, w->c, r0, r1);
}

/* C is bf16, or f32 when cf32 (then written in place, unrounded). A bias (only
 * with bf16 C and beta 0) is written into the f32 C's rows and the GEMM adds to
 * it (beta 1): what the sgemm gave when the bias was in C before the call.
 * The copies are the exact f32 values of the bf16 operands, so the result is
 * rm_sgemm's on them, rounded once; the widening, bias and rounding passes are
 * elementwise (split over the OpenMP team by rows) and add no dependence on the
 * thread count. */
static void bgemm_via_f32(bool ta, bool tb, int64_t M, int64_t N, int64_t K, opnd A, int64_t lda,
                          opnd B, int64_t ldb, bias_row bias, float beta, void *Cv, int64_t ldc,
                          bool cf32, float *ws) {
    wide_in w = {.A = A,
                 .B = B,
                 .C = Cv,
                 .ar = ta ? K : M,
                 .ac = ta ? M : K,
                 .lda = lda,
                 .br = tb ? N : K,
                 .bc = tb ? K : N,
                 .ldb = ldb,
                 .M = M,
                 .N = N,
                 .ldc = ldc,
                 .bias = bias,
                 .beta = beta};
    size_t na = (size_t)(M * K), nb = (size_t)(K * N), nc = cf32 ? 0 : (size_t)(M * N);
    size_t bytes = rm_bgemm_wide_bytes(M, N, K, cf32);
    float *s = ws ? ws : rm_cpu_ws_take(bytes);
    if (!s) { /* out of memory: never fails, slowly */
        bgemm_naive(ta, tb, M, N, K, A, lda, B, ldb, bias, beta, Cv, ldc, cf32);
        return;
    }
    w.a = s, w.b = s + na, w.c = cf32 ? NULL : s + na + nb;
    int nt = rm_bf16_pass_threads((int64_t)(na + nb + nc));
    if (nt <= 1) wide_fill(&w, 1, 0);
#ifdef _OPENMP
    else {
#pragma omp parallel num_threads(nt)
        wide_fill(&w, omp_get_num_threads(), omp_get_thread_num());
    }
#endif
    if (cf32) rm_sgemm(ta, tb, M, N, K, 1.0f, w.a, w.ac, w.b, w.bc, beta, Cv, ldc);
    else {
        float cbeta = bias.p ? 1.0f : beta; /* the f32 C's */
        rm_sgemm(ta, tb, M, N, K, 1.0f, w.a, w.ac, w.b, w.bc, cbeta, w.c, N);
        nt = rm_bf16_pass_threads((int64_t)nc);
        if (nt <= 1) narrow_rows(w.c, N, Cv, ldc, 0, M);
#ifdef _OPENMP
        else {
#pragma omp parallel num_threads(nt)
            {
                int64_t r0, r1;
                share(M, omp_get_num_threads(), omp_get_thread_num(), &r0, &r1);
                narrow_rows(w.c, N, Cv, ldc, r0, r1);
            }
        }
#endif
    }
    if (!ws) rm_cpu_ws_give(s, bytes);
}

/* ---- oneDNN --------------------------------------------------------------------------- */
/* oneDNN's bf16 GEMMs run so far (rm_bgemm_native_runs) and those with a
 * fused bias (rm_bgemm_bias_runs): zero in a build without oneDNN. */
static atomic_ullong g_native_runs;
static atomic_ullong g_bias_runs;
/* The scratchpad bytes calls hold through workspace.h now, and the most they held at once
 * since the last reset (rm_bgemm_scratchpad_most): tests of exact peaks on the native route
 * bound what oneDNN's scratchpads add with it, as their sizes are oneDNN's. */
static atomic_ullong g_pad_held;
static atomic_ullong g_pad_most;

#if defined(REMAT_GEMM_ONEDNN)
typedef struct bkey {
    int64_t M, N, K, lda, ldb, ldc;
    int ta, tb, acc, cf32;
    int bias; /* 0: none, 1: bf16, 2: f32 (oneDNN's bias argument, one row broadcast) */
    int nthr; /* the OpenMP team the primitive was made for: oneDNN splits the work
               * over omp_get_max_threads() once, when it makes the primitive, so one
               * made at 1 thread runs on 1 thread after the count goes up */
} bkey;

/* Member by member: the struct has padding after its three ints, which
 * memcmp would compare too. */
static bool bkey_eq(const bkey *a, const bkey *b) {
    return a->M == b->M && a->N == b->N && a->K == b->K && a->lda == b->lda && a->ldb == b->ldb &&
           a->ldc == b->ldc && a->ta == b->ta && a->tb == b->tb && a->acc == b->acc &&
           a->cf32 == b->cf32 && a->bias == b->bias && a->nthr == b->nthr;
}

typedef struct bentry {
    bkey key;
    dnnl_primitive_t prim;
    dnnl_memory_desc_t a, b, c, bias, scratch;
} bentry;

/* Primitives by shape, created once and kept for the process (a model has
 * a handful of GEMM shapes). Past the cap a primitive is made per call. */
#define BCACHE_CAP 256
static bentry g_cache[BCACHE_CAP];
static int g_n;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static dnnl_engine_t g_engine;
static _Thread_local dnnl_stream_t tls_stream;
/* Each call brings its own scratchpad (user mode): oneDNN's library-owned
 * one is shared by the calls of a primitive, which run concurrently when
 * matmul.c spreads a batch of GEMMs over threads. One of RM_CPU_WS_MIN bytes
 * or more (a large GEMM's packing buffers) is taken from the cpu device's
 * allocator for the call (workspace.h: counted, recycled by its cache); a
 * smaller one (the attention tiles' and a batch's small GEMMs, thousands a
 * step) is a buffer kept per thread, under 64 KiB, as a taken one would cost
 * a lock and an allocator event per 3-4 us tile GEMM. A large one taken on a
 * worker thread of a parallel region (a one-thread GEMM of matmul's batch
 * loop or panel team) counts in the allocator but not in the calling
 * thread's meter, which the planner reads: its size is oneDNN's to know,
 * per primitive, only once the primitive is made. */
static _Thread_local void *tls_scratch;
static _Thread_local size_t tls_scratch_size;
/* Each thread's memory objects of each cached primitive (A, B, C, scratchpad, bias),
 * made once and pointed at the call's buffers (dnnl_memory_set_data_handle): making
 * and destroying five per call cost about 1 us, a quarter of a 64 x 64 x 64 tile's
 * product. */
static _Thread_local dnnl_memory_t tls_mem[BCACHE_CAP][5];

static bool make_entry(bentry *e, const bkey *k) {
    dnnl_dims_t ad = {k->M, k->K}, bd = {k->K, k->N}, cd = {k->M, k->N};
    dnnl_dims_t as = {k->ta ? 1 : k->lda, k->ta ? k->lda : 1};
    dnnl_dims_t bs = {k->tb ? 1 : k->ldb, k->tb ? k->ldb : 1};
    dnnl_dims_t cs = {k->ldc, 1}, biasd = {1, k->N}, biass = {k->N, 1};
    if (dnnl_memory_desc_init_by_strides(&e->a, 2, ad, dnnl_bf16, as) ||
        dnnl_memory_desc_init_by_strides(&e->b, 2, bd, dnnl_bf16, bs) ||
        dnnl_memory_desc_init_by_strides(&e->c, 2, cd, k->cf32 ? dnnl_f32 : dnnl_bf16, cs))
        return false;
    if (k->bias && dnnl_memory_desc_init_by_strides(&e->bias, 2, biasd,
                                                    k->bias == 2 ? dnnl_f32 : dnnl_bf16, biass))
        return false;
    dnnl_matmul_desc_t md;
    if (dnnl_matmul_desc_init(&md, &e->a, &e->b, k->bias ? &e->bias : NULL, &e->c)) return false;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    bool ok =
        dnnl_primitive_attr_create(&attr) == dnnl_success &&
        dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == dnnl_success;
    if (ok && k->acc)
        ok = dnnl_post_ops_create(&po) == dnnl_success &&
             dnnl_post_ops_append_sum(po, 1.0f) == dnnl_success &&
             dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
    dnnl_primitive_desc_t pd = NULL;
    ok = ok && dnnl_primitive_desc_create(&pd, &md, attr, g_engine, NULL) == dnnl_success;
    ok = ok && dnnl_primitive_create(&e->prim, pd) == dnnl_success;
    const dnnl_memory_desc_t *smd =
        ok ? dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0) : NULL;
    if (smd) e->scratch = *smd;
    else ok = false;
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    e->key = *k;
    return ok;
}

/* *m (made for md at its first use, else pointed anew) holding handle h. */
static bool mem_at(dnnl_memory_t *m, const dnnl_memory_desc_t *md, void *h) {
    if (*m) return dnnl_memory_set_data_handle(*m, h) == dnnl_success;
    return dnnl_memory_create(m, md, g_engine, h) == dnnl_success;
}

/* Runs the GEMM of key on A, B (bias: its row or NULL) into C through a cached primitive
 * (made at first use); true if oneDNN ran it. */
static bool mm_dnnl(const bkey *key, const void *A, const void *B, const void *bias, void *C) {
    bentry tmp, *e = NULL;
    bool owned = false;
    pthread_mutex_lock(&g_mu);
    if (!g_engine && dnnl_engine_create(&g_engine, dnnl_cpu, 0) != dnnl_success) g_engine = NULL;
    for (int i = 0; i < g_n && g_engine; i++)
        if (bkey_eq(&g_cache[i].key, key)) e = &g_cache[i];
    if (!e && g_engine && g_n < BCACHE_CAP) {
        memset(&g_cache[g_n], 0, sizeof g_cache[g_n]);
        if (make_entry(&g_cache[g_n], key)) e = &g_cache[g_n++];
    }
    pthread_mutex_unlock(&g_mu);
    if (!g_engine) return false;
    if (!e) { /* cache full */
        memset(&tmp, 0, sizeof tmp);
        if (!make_entry(&tmp, key)) {
            if (tmp.prim) dnnl_primitive_destroy(tmp.prim);
            return false;
        }
        e = &tmp;
        owned = true;
    }
    if (!tls_stream && dnnl_stream_create(&tls_stream, g_engine, dnnl_stream_default_flags))
        tls_stream = NULL;
    size_t ss = dnnl_memory_desc_get_size(&e->scratch);
    void *scr = NULL; /* taken for this call, when large */
    if (ss >= RM_CPU_WS_MIN && (scr = rm_cpu_ws_take(ss))) {
        unsigned long long held = atomic_fetch_add(&g_pad_held, ss) + ss;
        unsigned long long most = atomic_load(&g_pad_most);
        while (held > most && !atomic_compare_exchange_weak(&g_pad_most, &most, held)) {}
    } else if (ss > tls_scratch_size) {
        free(tls_scratch);
        tls_scratch = malloc(ss);
        tls_scratch_size = tls_scratch ? ss : 0;
    }
    void *sp = ss >= RM_CPU_WS_MIN ? scr : tls_scratch;
    dnnl_memory_t own[5] = {NULL}, *m = owned ? own : tls_mem[e - g_cache];
    bool ok = tls_stream && (ss == 0 || sp) && mem_at(&m[0], &e->a, (void *)A) &&
              mem_at(&m[1], &e->b, (void *)B) && mem_at(&m[2], &e->c, C) &&
              mem_at(&m[3], &e->scratch, sp) && (!bias || mem_at(&m[4], &e->bias, (void *)bias));
    if (ok) {
        dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, m[0]},
                                   {DNNL_ARG_WEIGHTS, m[1]},
                                   {DNNL_ARG_DST, m[2]},
                                   {DNNL_ARG_SCRATCHPAD, m[3]},
                                   {DNNL_ARG_BIAS, m[4]}};
        ok = dnnl_primitive_execute(e->prim, tls_stream, bias ? 5 : 4, args) == dnnl_success &&
             dnnl_stream_wait(tls_stream) == dnnl_success;
    }
    if (scr) {
        atomic_fetch_sub(&g_pad_held, ss);
        rm_cpu_ws_give(scr, ss);
    }
    for (int i = 0; i < 5; i++)
        if (own[i]) dnnl_memory_destroy(own[i]);
    if (owned) dnnl_primitive_destroy(tmp.prim);
    return ok;
}

/* true if oneDNN ran it */
static bool bgemm_dnnl(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t *A,
                       int64_t lda, const uint16_t *B, int64_t ldb, bias_row bias, float beta,
                       void *C, int64_t ldc, bool cf32) {
    bkey key;
    memset(&key, 0, sizeof key);
    int nthr = omp_in_parallel() ? 1 : omp_get_max_threads();
    key = (bkey){M,   N, K, lda, ldb, ldc, ta, tb, beta != 0, cf32, !bias.p ? 0 : bias.f32 ? 2 : 1,
                 nthr};
    bool ok = mm_dnnl(&key, A, B, bias.p, C);
    if (ok) atomic_fetch_add_explicit(&g_native_runs, 1, memory_order_relaxed);
    if (ok && bias.p) atomic_fetch_add_explicit(&g_bias_runs, 1, memory_order_relaxed);
    return ok;
}
#endif

/* CPUID leaf 7: subleaf 1 EAX bit 5 is AVX512_BF16; subleaf 0 EDX bit 22
 * is AMX-BF16 (usable only once the OS grants the tile state, which oneDNN
 * asks for itself). */
static int cpuid_bf16(void) {
#if defined(__x86_64__) || defined(__i386__)
    unsigned a = 0, b = 0, c = 0, d = 0;
    int has = 0;
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) has |= (int)((a >> 5) & 1u);
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) has |= (int)((d >> 22) & 1u);
    return has;
#else
    return 0;
#endif
}

/* The CPU's bf16 instructions, as far as oneDNN may use them: ONEDNN_MAX_CPU_ISA
 * (or DNNL_MAX_CPU_ISA) below AVX512_CORE_BF16 caps oneDNN as on a CPU without
 * them, and the bf16 GEMMs then take the f32 route such a CPU takes (oneDNN's
 * own bf16 matmul would be its emulation on AVX-512 and none at all on AVX2,
 * which failed every call). So `make test-isa` runs the suites as on those CPUs.
 * REMAT_NO_BF16 in the environment pretends neither is there (tests of the
 * fallback). */
bool remat_cpu_has_bf16(void) {
    static atomic_int cached = -1;
    int has = atomic_load(&cached);
    if (has < 0) {
        has = cpuid_bf16();
#if defined(REMAT_GEMM_ONEDNN)
        dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
        if (isa != dnnl_cpu_isa_all &&
            (isa & dnnl_cpu_isa_avx512_core_bf16) != dnnl_cpu_isa_avx512_core_bf16)
            has = 0;
#endif
        atomic_store(&cached, has);
    }
    const char *env = getenv("REMAT_NO_BF16");
    return has && !(env && *env && *env != '0');
}

bool rm_bgemm_native(void) {
#if defined(REMAT_GEMM_ONEDNN)
    return remat_cpu_has_bf16();
#else
    return false;
#endif
}

uint64_t rm_bgemm_native_runs(void) {
    return atomic_load_explicit(&g_native_runs, memory_order_relaxed);
}
uint64_t rm_bgemm_bias_runs(void) {
    return atomic_load_explicit(&g_bias_runs, memory_order_relaxed);
}
size_t rm_bgemm_scratchpad_most(bool reset) {
    unsigned long long most = atomic_load(&g_pad_most);
    if (reset) atomic_store(&g_pad_most, atomic_load(&g_pad_held));
    return (size_t)most;
}

/* bias: only with bf16 C and beta 0 (rm_bgemm_bias). An f32 operand (rm_bgemm_wide)
 * goes through f32 whatever the CPU. */
static void bgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, opnd A, int64_t lda, opnd B,
                  int64_t ldb, bias_row bias, float beta, void *C, int64_t ldc, bool cf32,
                  float *ws) {
    if (M <= 0 || N <= 0) return;
    lda = fix_ld(ta ? K : M, ta ? M : K, lda);
    ldb = fix_ld(tb ? N : K, tb ? K : N, ldb);
    ldc = fix_ld(M, N, ldc);
    if (K <= 0) {
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                if (beta != 0) continue;
                float v = bias.p ? bias_at(bias, j) : 0.0f;
                if (cf32) ((float *)C)[i * ldc + j] = v;
                else ((uint16_t *)C)[i * ldc + j] = rm_f32_to_bf16(v);
            }
        return;
    }
#if defined(REMAT_GEMM_ONEDNN)
    if (remat_cpu_has_bf16()) {
        if (!A.f32 && !B.f32 &&
            bgemm_dnnl(ta, tb, M, N, K, A.p, lda, B.p, ldb, bias, beta, C, ldc, cf32))
            return;
    } else {
        rm_warn("bf16 matmul: this CPU has neither AVX512_BF16 nor AMX-BF16 (or "
                "ONEDNN_MAX_CPU_ISA is below AVX512_CORE_BF16, or REMAT_NO_BF16 is set); bf16 "
                "GEMMs run in f32 (slower than f32 itself, same results up to summation order)");
    }
#else
    rm_warn("bf16 matmul: remat was built without oneDNN (REMAT_GEMM=%s); bf16 GEMMs run in "
            "f32",
            remat_gemm_backend());
#endif
    bgemm_via_f32(ta, tb, M, N, K, A, lda, B, ldb, bias, beta, C, ldc, cf32, ws);
}

void rm_bgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t *A, int64_t lda,
              const uint16_t *B, int64_t ldb, float beta, uint16_t *C, int64_t ldc) {
    bgemm(ta, tb, M, N, K, (opnd){A, false}, lda, (opnd){B, false}, ldb, (bias_row){NULL, false},
          beta, C, ldc, false, NULL);
}

void rm_bgemm_bias(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t *A,
                   int64_t lda, const uint16_t *B, int64_t ldb, const void *bias, bool bias_f32,
                   uint16_t *C, int64_t ldc) {
    bgemm(ta, tb, M, N, K, (opnd){A, false}, lda, (opnd){B, false}, ldb, (bias_row){bias, bias_f32},
          0.0f, C, ldc, false, NULL);
}

void rm_bgemm_f32(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t *A, int64_t lda,
                  const uint16_t *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    bgemm(ta, tb, M, N, K, (opnd){A, false}, lda, (opnd){B, false}, ldb, (bias_row){NULL, false},
          beta, C, ldc, true, NULL);
}

void rm_bgemm_wide(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void *A, bool a_f32,
                   int64_t lda, const void *B, bool b_f32, int64_t ldb, const void *bias,
                   bool bias_f32, float beta, void *C, bool c_f32, int64_t ldc, void *ws) {
    bgemm(ta, tb, M, N, K, (opnd){A, a_f32}, lda, (opnd){B, b_f32}, ldb, (bias_row){bias, bias_f32},
          beta, C, ldc, c_f32, ws);
}
