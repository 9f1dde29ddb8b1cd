/* src/backends/cpu/bf16.c — bf16 on the cpu: the conversion kernels
 * (f32 → bf16 rounds to nearest, ties to even; NaN stays NaN, infinities
 * stay infinite) and the bf16 kernel of every op that has no native one:
 * its f32 kernel run on f32 copies of the bf16 operands, the outputs
 * rounded back. That costs conversion passes but no accuracy beyond bf16
 * storage; the kernels where bf16 pays (the GEMMs: matmul.c, gemm.c) are
 * native. */
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "clones.h"
#include "cpu.h"

#ifdef _OPENMP
#include <omp.h>
#define BF16_THREAD() omp_get_thread_num()
#define BF16_TEAM() omp_get_num_threads()
#else
#define BF16_THREAD() 0
#define BF16_TEAM() 1
#endif

RM_CPU_CLONES_EXTERN void rm_bf16_widen_run(const uint16_t *restrict x, float *restrict y,
                                            int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = rm_bf16_to_f32(x[i]);
}

RM_CPU_CLONES static void round_run_loop(const float *restrict x, uint16_t *restrict y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = rm_f32_to_bf16(x[i]);
}

/* Where the CPU has AVX512_BF16, its vcvtne2ps2bf16 rounds 32 floats at once, to nearest
 * even with NaNs quieted as rm_f32_to_bf16 does (the bit pattern (x >> 16) | 0x40), but it
 * reads subnormal inputs as zero: a block of 32 that holds one is rounded by
 * rm_f32_to_bf16 instead, and so is a tail. Bitwise round_run_loop's results in 0.7x its
 * time over a (2048, 384) activation, 0.5x in cache (the loop's integer rounding is ~25
 * instructions per 32). */
#if defined(__x86_64__) && defined(__GNUC__) &&                                                    \
    (defined(__clang__) ? __clang_major__ >= 9 : __GNUC__ >= 10)
#include <immintrin.h>
#define BF16_CVTNE 1
__attribute__((target("avx512f,avx512bw,avx512bf16"))) static void
round_run_cvtne(const float *restrict x, uint16_t *restrict y, int64_t n) {
    const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF), sub_max = _mm512_set1_epi32(0x007FFFFF);
    const __m512i one = _mm512_set1_epi32(1);
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 a = _mm512_loadu_ps(x + i), b = _mm512_loadu_ps(x + i + 16);
        /* subnormal: 0 < |bits| <= 0x007FFFFF, i.e. |bits| - 1 < 0x007FFFFF unsigned */
        __m512i sa = _mm512_sub_epi32(_mm512_and_si512(_mm512_castps_si512(a), abs_mask), one);
        __m512i sb = _mm512_sub_epi32(_mm512_and_si512(_mm512_castps_si512(b), abs_mask), one);
        __mmask16 da = _mm512_cmplt_epu32_mask(sa, sub_max),
                  db = _mm512_cmplt_epu32_mask(sb, sub_max);
        if (__builtin_expect((da | db) != 0, 0)) {
            for (int k = 0; k < 32; k++) y[i + k] = rm_f32_to_bf16(x[i + k]);
            continue;
        }
        __m512bh r = _mm512_cvtne2ps_pbh(b, a); /* a in the low half */
        __m512i bits;
        memcpy(&bits, &r, sizeof bits);
        _mm512_storeu_si512((void *)(y + i), bits);
    }
    for (; i < n; i++) y[i] = rm_f32_to_bf16(x[i]);
}
#endif

void rm_bf16_round_run(const float *restrict x, uint16_t *restrict y, int64_t n) {
#ifdef BF16_CVTNE
    static int has = -1; /* racing first calls both store the same answer */
    int h = __atomic_load_n(&has, __ATOMIC_RELAXED);
    if (h < 0) {
        __builtin_cpu_init();
        h = __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw");
        __atomic_store_n(&has, h, __ATOMIC_RELAXED);
    }
    if (h) {
        round_run_cvtne(x, y, n);
        return;
    }
#endif
    round_run_loop(x, y, n);
}

RM_CPU_CLONES_EXTERN void rm_bf16_round_f32_run(const float *restrict x, float *restrict y,
                                                int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = rm_bf16_to_f32(rm_f32_to_bf16(x[i]));
}

RM_CPU_CLONES_EXTERN void rm_bf16_add_run(const uint16_t *restrict x, float *restrict y,
                                          int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += rm_bf16_to_f32(x[i]);
}

int rm_bf16_pass_threads(int64_t n) {
#ifdef _OPENMP
    if (n > RM_OMP_MIN && !omp_in_parallel()) return omp_get_max_threads();
#else
    (void)n;
#endif
    return 1;
}

/* Element runs per thread: long enough to amortise a wake-up, aligned to a
 * cache line of either dtype. */
static void pass_range(int64_t n, int nt, int id, int64_t *lo, int64_t *hi) {
    int64_t per = (n + nt - 1) / nt;
    per = (per + 31) & ~(int64_t)31;
    *lo = per * id < n ? per * id : n;
    *hi = *lo + per < n ? *lo + per : n;
}

/* The two conversion directions: one pass over [0, n) each (convert_pass). */
typedef enum bf16_dir { TO_BF16, TO_F32 } bf16_dir;

/* Elements [lo, hi) of x converted into y, in direction dir. */
static void convert_range(bf16_dir dir, const void *x, void *y, int64_t lo, int64_t hi) {
    if (dir == TO_BF16) rm_bf16_round_run((const float *)x + lo, (uint16_t *)y + lo, hi - lo);
    else rm_bf16_widen_run((const uint16_t *)x + lo, (float *)y + lo, hi - lo);
}

/* Converts n elements of x into y: on the calling thread when the pass is small, else one
 * contiguous range per thread (pass_range). */
static void convert_pass(bf16_dir dir, const void *x, void *y, int64_t n) {
    int nt = rm_bf16_pass_threads(n);
    if (nt <= 1) {
        convert_range(dir, x, y, 0, n);
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        int64_t lo, hi;
        pass_range(n, BF16_TEAM(), BF16_THREAD(), &lo, &hi);
        if (lo < hi) convert_range(dir, x, y, lo, hi);
    }
}

void rm_cpu_f32_to_bf16(const float *restrict x, uint16_t *restrict y, int64_t n) {
    convert_pass(TO_BF16, x, y, n);
}

void rm_cpu_bf16_to_f32(const uint16_t *restrict x, float *restrict y, int64_t n) {
    convert_pass(TO_F32, x, y, n);
}

/* An f32 twin of bf16 tensor t: the same offset, shape and strides over a
 * storage of as many f32 elements as t's has bf16 ones, holding t's whole
 * storage converted (so strided and custom-layout outputs keep their
 * layout, and a kernel that reads what it writes reads the old values). */
static remat_status f32_twin(remat_tensor **out, const remat_tensor *t) {
    *out = NULL;
    int64_t n = (int64_t)(t->storage->nbytes / sizeof(uint16_t));
    rm_storage *s = NULL;
    int rc = rm_storage_new(&s, (size_t)n * sizeof(float), t->storage->device, false);
    if (rc) return rc;
    remat_tensor *f = rm_tensor_alloc(s, t->offset, t->ndim, t->shape, t->strides, REMAT_F32);
    rm_storage_release(s);
    if (!f) return rm_err(REMAT_ENOMEM, "out of host memory for a tensor header");
    rm_cpu_bf16_to_f32(t->storage->data, f->storage->data, n);
    *out = f;
    return REMAT_OK;
}

/* Elements per chunk of the chunked path: 16 K (64 KiB of f32 per operand,
 * so a thread's chunk stays in its L2 between widening, the f32 kernel and
 * rounding). Chunk boundaries do not depend on the thread count. */
#define BF16_CHUNK ((int64_t)16 * 1024)

/* Whether the kernel is purely elementwise over operands that all are
 * contiguous with one element count (so any slice of them is a valid call):
 * then it runs chunk by chunk, through small f32 buffers, instead of on
 * whole f32 copies (which at the peak of a backward cost 2x its bf16
 * operands in f32). */
static bool chunkable(rm_kernel_id id, const rm_kargs *k, int64_t *n) {
    if (id != RM_K_UNARY && id != RM_K_UNARY_BWD && id != RM_K_ELEMENTWISE) return false;
    *n = -1;
    for (int i = 0; i < RM_KERNEL_MAX_IN + RM_KERNEL_MAX_OUT; i++) {
        remat_tensor *t = i < RM_KERNEL_MAX_IN ? k->in[i] : k->out[i - RM_KERNEL_MAX_IN];
        if (!t) continue;
        if (!remat_is_contiguous(t) || (t->dtype != REMAT_BF16 && t->dtype != REMAT_F32))
            return false;
        int64_t m = remat_numel(t);
        if (*n >= 0 && m != *n) return false;
        *n = m;
    }
    return *n > BF16_CHUNK;
}

enum { NOPS = RM_KERNEL_MAX_IN + RM_KERNEL_MAX_OUT };

/* One thread's f32 side of the chunked path: a 1-D view per operand, over
 * its own buffer for a bf16 operand, over the operand's storage for an f32
 * one (offset and length set per chunk). */
typedef struct chunk_views {
    remat_tensor *v[NOPS];
    bool widened[NOPS];
} chunk_views;

static void chunk_views_free(chunk_views *cv) {
    for (int i = 0; i < NOPS; i++) rm_release(cv->v[i]);
}

static remat_status chunk_views_make(chunk_views *cv, remat_tensor *const *ops) {
    int64_t len = BF16_CHUNK, one = 1;
    for (int i = 0; i < NOPS; i++) {
        if (!ops[i]) continue;
        cv->widened[i] = ops[i]->dtype == REMAT_BF16;
        rm_storage *s = ops[i]->storage;
        if (cv->widened[i]) {
            int rc = rm_storage_new(&s, BF16_CHUNK * sizeof(float), ops[i]->storage->device, false);
            if (rc) return rc;
        }
        cv->v[i] = rm_tensor_alloc(s, 0, 1, &len, &one, REMAT_F32);
        if (cv->widened[i]) rm_storage_release(s);
        if (!cv->v[i]) return rm_err(REMAT_ENOMEM, "out of host memory for a tensor header");
    }
    return REMAT_OK;
}

/* Elements [off, off + len) of every operand through thread views cv. */
static remat_status chunk_run(rm_kernel_fn f32, const rm_kargs *k, remat_tensor *const *ops,
                              chunk_views *cv, int64_t off, int64_t len) {
    rm_kargs c = {.params = k->params};
    for (int i = 0; i < NOPS; i++) {
        remat_tensor *v = cv->v[i];
        if (!v) continue;
        v->shape[0] = len;
        v->offset = cv->widened[i] ? 0 : ops[i]->offset + off;
        if (cv->widened[i] && i < RM_KERNEL_MAX_IN)
            rm_bf16_widen_run((const uint16_t *)rm_ptr(ops[i]) + off, v->storage->data, len);
        if (i < RM_KERNEL_MAX_IN) c.in[i] = v;
        else c.out[i - RM_KERNEL_MAX_IN] = v;
    }
    int rc = f32(&c);
    for (int i = RM_KERNEL_MAX_IN; i < NOPS && !rc; i++)
        if (cv->v[i] && cv->widened[i])
            rm_bf16_round_run(cv->v[i]->storage->data, (uint16_t *)rm_ptr(ops[i]) + off, len);
    return rc;
}

/* The chunks split over the threads in one parallel region, each thread
 * with its own buffers; the f32 kernel runs on one thread per chunk (one
 * region per chunk and per conversion cost more than the work at 2 threads:
 * ~10 µs to wake a passive worker for ~20 µs of a 64 K chunk). */
static remat_status chunked(rm_kernel_fn f32, const rm_kargs *k, int64_t n) {
    remat_tensor *ops[NOPS];
    memcpy(ops, k->in, sizeof k->in);
    memcpy(ops + RM_KERNEL_MAX_IN, k->out, sizeof k->out);
    int64_t nch = (n + BF16_CHUNK - 1) / BF16_CHUNK;
    int nt = rm_bf16_pass_threads(n);
    if (nt > nch) nt = (int)nch;
    if (nt < 1) nt = 1;
    chunk_views *cv = calloc((size_t)nt, sizeof *cv);
    if (!cv) return rm_err(REMAT_ENOMEM, "out of host memory for conversion buffers");
    int rc = REMAT_OK;
    for (int t = 0; t < nt && !rc; t++) rc = chunk_views_make(&cv[t], ops);
    if (!rc && nt == 1) {
        for (int64_t ch = 0; ch < nch && !rc; ch++) {
            int64_t off = ch * BF16_CHUNK;
            rc = chunk_run(f32, k, ops, &cv[0], off, n - off < BF16_CHUNK ? n - off : BF16_CHUNK);
        }
    } else if (!rc) {
        int fail = REMAT_OK;
#pragma omp parallel for schedule(static) num_threads(nt)
        for (int64_t ch = 0; ch < nch; ch++) {
            int64_t off = ch * BF16_CHUNK;
            int r = chunk_run(f32, k, ops, &cv[BF16_THREAD()], off,
                              n - off < BF16_CHUNK ? n - off : BF16_CHUNK);
            if (r) {
#pragma omp atomic write
                fail = r;
            }
        }
        if (fail) rc = rm_err(fail, "bf16 elementwise kernel failed on a worker thread");
    }
    for (int t = 0; t < nt; t++) chunk_views_free(&cv[t]);
    free(cv);
    return rc;
}

/* Runs the f32 kernel of `id` for the bf16 operands of k (see above). */
static remat_status via_f32(rm_kernel_id id, const rm_kargs *k) {
    rm_kernel_fn f32 = rm_cpu_kernels[id][REMAT_F32];
    if (!f32) return rm_err(REMAT_EUNSUPPORTED, "no bf16 or f32 kernel");
    int64_t n;
    if (chunkable(id, k, &n)) return chunked(f32, k, n);
    rm_kargs k2 = *k;
    int rc = REMAT_OK;
    for (int i = 0; i < RM_KERNEL_MAX_IN && !rc; i++)
        if (k->in[i] && k->in[i]->dtype == REMAT_BF16) {
            k2.in[i] = NULL;
            rc = f32_twin(&k2.in[i], k->in[i]);
        }
    for (int i = 0; i < RM_KERNEL_MAX_OUT && !rc; i++)
        if (k->out[i] && k->out[i]->dtype == REMAT_BF16) {
            k2.out[i] = NULL;
            rc = f32_twin(&k2.out[i], k->out[i]);
        }
    if (!rc) rc = f32(&k2);
    for (int i = 0; i < RM_KERNEL_MAX_OUT; i++) {
        if (!k->out[i] || k2.out[i] == k->out[i]) continue;
        if (!rc && k2.out[i])
            rm_cpu_f32_to_bf16(k2.out[i]->storage->data, k->out[i]->storage->data,
                               (int64_t)(k->out[i]->storage->nbytes / sizeof(uint16_t)));
        rm_release(k2.out[i]);
    }
    for (int i = 0; i < RM_KERNEL_MAX_IN; i++)
        if (k->in[i] && k2.in[i] != k->in[i]) rm_release(k2.in[i]);
    return rc;
}

#define RM_BF16_VIA_F32_(id, text)                                                                 \
    static remat_status bf16_via_f32_##id(const rm_kargs *k) { return via_f32(RM_K_##id, k); }
RM_KERNEL_LIST(RM_BF16_VIA_F32_)
#undef RM_BF16_VIA_F32_

const rm_kernel_fn rm_cpu_bf16_via_f32[RM_K_COUNT] = {
#define RM_BF16_ROW_(id, text) [RM_K_##id] = bf16_via_f32_##id,
    RM_KERNEL_LIST(RM_BF16_ROW_)
#undef RM_BF16_ROW_
};
