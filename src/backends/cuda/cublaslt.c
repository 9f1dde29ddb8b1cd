/* src/backends/cuda/cublaslt.c — bf16 linear with its bias in cuBLASLt's epilogue (see
 * cublaslt.h). */
#include "cublaslt.h"

#include <cublasLt.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h" /* REMAT_MAX_DEVICES_PER_TYPE */

#define RM_STR_(x) #x
#define RM_STR(x) RM_STR_(x)
#define RM_CUBLASLT_SONAME "libcublasLt.so." RM_STR(CUBLAS_VER_MAJOR)
#define RM_LT_WORKSPACE ((size_t)32 << 20)
#define RM_LT_CACHE 32 /* shapes remembered a device (a GPT has 5 linear shapes) */

static struct {
    __typeof__(cublasLtCreate) *create;
    __typeof__(cublasLtMatmulDescCreate) *desc_create;
    __typeof__(cublasLtMatmulDescDestroy) *desc_destroy;
    __typeof__(cublasLtMatmulDescSetAttribute) *desc_set;
    __typeof__(cublasLtMatrixLayoutCreate) *layout_create;
    __typeof__(cublasLtMatrixLayoutDestroy) *layout_destroy;
    __typeof__(cublasLtMatmulPreferenceCreate) *pref_create;
    __typeof__(cublasLtMatmulPreferenceDestroy) *pref_destroy;
    __typeof__(cublasLtMatmulPreferenceSetAttribute) *pref_set;
    __typeof__(cublasLtMatmulAlgoGetHeuristic) *heuristic;
    __typeof__(cublasLtMatmul) *matmul;
} g_lt;
static bool g_lt_ok;
static pthread_once_t g_lt_once = PTHREAD_ONCE_INIT;

static void lt_load(void) {
    const char *env = getenv("REMAT_CUDA_LT");
    if (env && strcmp(env, "0") == 0) return;
    void *h = dlopen(RM_CUBLASLT_SONAME, RTLD_NOW | RTLD_LOCAL);
#ifdef REMAT_CUDA_LIBDIR
    if (!h) h = dlopen(REMAT_CUDA_LIBDIR "/" RM_CUBLASLT_SONAME, RTLD_NOW | RTLD_LOCAL);
#endif
    if (!h) return;
    struct {
        void **slot;
        const char *name;
    } fns[] = {
        {(void **)&g_lt.create, "cublasLtCreate"},
        {(void **)&g_lt.desc_create, "cublasLtMatmulDescCreate"},
        {(void **)&g_lt.desc_destroy, "cublasLtMatmulDescDestroy"},
        {(void **)&g_lt.desc_set, "cublasLtMatmulDescSetAttribute"},
        {(void **)&g_lt.layout_create, "cublasLtMatrixLayoutCreate"},
        {(void **)&g_lt.layout_destroy, "cublasLtMatrixLayoutDestroy"},
        {(void **)&g_lt.pref_create, "cublasLtMatmulPreferenceCreate"},
        {(void **)&g_lt.pref_destroy, "cublasLtMatmulPreferenceDestroy"},
        {(void **)&g_lt.pref_set, "cublasLtMatmulPreferenceSetAttribute"},
        {(void **)&g_lt.heuristic, "cublasLtMatmulAlgoGetHeuristic"},
        {(void **)&g_lt.matmul, "cublasLtMatmul"},
    };
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++)
        if (!(*fns[i].slot = dlsym(h, fns[i].name))) {
            dlclose(h);
            return;
        }
    g_lt_ok = true; /* kept open for the process, as cuBLAS */
}

/* A shape's heuristic answer: the algorithm, or none (the caller's way then). */
typedef struct lt_entry {
    int64_t key[10];
    bool found;
    cublasLtMatmulAlgo_t algo;
} lt_entry;

typedef struct lt_dev {
    cublasLtHandle_t h;
    void *ws;
    bool failed; /* the handle or the workspace could not be made: never again */
    int used, next;
    lt_entry cache[RM_LT_CACHE];
} lt_dev;
static lt_dev g_dev[REMAT_MAX_DEVICES_PER_TYPE];
static pthread_mutex_t g_lt_lock = PTHREAD_MUTEX_INITIALIZER;

/* The largest power of two (<= 256) dividing p's address: the alignment the heuristic may
 * assume of an operand. */
static int64_t align_of(const void *p) {
    uintptr_t u = (uintptr_t)p;
    int64_t a = 1;
    while (a < 256 && !(u & (uintptr_t)a)) a <<= 1;
    return a;
}

static bool lt_device(int index, lt_dev **out) {
    lt_dev *d = &g_dev[index];
    *out = d;
    if (d->h) return true;
    if (d->failed) return false;
    if (g_lt.create(&d->h) != CUBLAS_STATUS_SUCCESS) d->h = NULL;
    if (d->h && cudaMalloc(&d->ws, RM_LT_WORKSPACE) != cudaSuccess) {
        (void)cudaGetLastError(); /* not sticky: clear it, the caller goes on without */
        d->ws = NULL;
    }
    if (!d->h || !d->ws) {
        d->failed = true;
        return false;
    }
    return true;
}

/* The operation's descriptors; false when one cannot be made (all made are destroyed). */
typedef struct lt_descs {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t b, a, d;
} lt_descs;

static void descs_free(lt_descs *x) {
    if (x->op) g_lt.desc_destroy(x->op);
    if (x->b) g_lt.layout_destroy(x->b);
    if (x->a) g_lt.layout_destroy(x->a);
    if (x->d) g_lt.layout_destroy(x->d);
}

static bool descs_make(lt_descs *x, bool tb, bool ta, int64_t n, int64_t m, int64_t k, int64_t ldb,
                       int64_t lda, int64_t ldc, const void *bias) {
    memset(x, 0, sizeof *x);
    cublasOperation_t ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N, oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
    cudaDataType_t bt = CUDA_R_16BF;
    const cudaDataType_t bf = CUDA_R_16BF;
    bool ok = g_lt.desc_create(&x->op, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS;
    ok = ok && g_lt.desc_set(x->op, CUBLASLT_MATMUL_DESC_TRANSA, &ob, sizeof ob) == 0;
    ok = ok && g_lt.desc_set(x->op, CUBLASLT_MATMUL_DESC_TRANSB, &oa, sizeof oa) == 0;
    ok = ok && g_lt.desc_set(x->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep) == 0;
    ok = ok && g_lt.desc_set(x->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias) == 0;
    ok = ok && g_lt.desc_set(x->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt) == 0;
    /* the stored matrices: Lt's A is cuBLAS's first operand (B here), its B the second */
    ok = ok && g_lt.layout_create(&x->b, bf, tb ? (uint64_t)k : (uint64_t)n,
                                  tb ? (uint64_t)n : (uint64_t)k, ldb) == 0;
    ok = ok && g_lt.layout_create(&x->a, bf, ta ? (uint64_t)m : (uint64_t)k,
                                  ta ? (uint64_t)k : (uint64_t)m, lda) == 0;
    ok = ok && g_lt.layout_create(&x->d, bf, (uint64_t)n, (uint64_t)m, ldc) == 0;
    if (!ok) descs_free(x);
    return ok;
}

/* The heuristic's first algorithm for the shape and alignments, cached. */
static bool lt_algo(lt_dev *d, const lt_descs *x, const int64_t key[10],
                    cublasLtMatmulAlgo_t *algo) {
    for (int i = 0; i < d->used; i++)
        if (memcmp(d->cache[i].key, key, sizeof d->cache[i].key) == 0) {
            *algo = d->cache[i].algo;
            return d->cache[i].found;
        }
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t res;
    int nres = 0;
    size_t ws = RM_LT_WORKSPACE;
    /* partial sums in f32 only: no split-K reduction in bf16 */
    uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    uint32_t al[4] = {(uint32_t)key[7], (uint32_t)key[8], (uint32_t)key[9], (uint32_t)key[9]};
    bool ok = g_lt.pref_create(&pref) == CUBLAS_STATUS_SUCCESS;
    ok = ok && g_lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws) == 0;
    ok = ok && g_lt.pref_set(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &scheme,
                             sizeof scheme) == 0;
    ok = ok &&
         g_lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0], sizeof al[0]) == 0;
    ok = ok &&
         g_lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1], sizeof al[1]) == 0;
    ok = ok &&
         g_lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], sizeof al[2]) == 0;
    ok = ok &&
         g_lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[3], sizeof al[3]) == 0;
    ok = ok && g_lt.heuristic(d->h, x->op, x->b, x->a, x->d, x->d, pref, 1, &res, &nres) ==
                   CUBLAS_STATUS_SUCCESS;
    ok = ok && nres > 0 && res.state == CUBLAS_STATUS_SUCCESS;
    if (pref) g_lt.pref_destroy(pref);
    lt_entry *e = &d->cache[d->used < RM_LT_CACHE ? d->used++ : (d->next++ % RM_LT_CACHE)];
    memcpy(e->key, key, sizeof e->key);
    e->found = ok;
    if (ok) e->algo = res.algo;
    else memset(&e->algo, 0, sizeof e->algo);
    *algo = e->algo;
    return ok;
}

bool rm_cublaslt_bias_gemm(int index, cudaStream_t s, bool tb, bool ta, int64_t n, int64_t m,
                           int64_t k, const void *B, int64_t ldb, const void *A, int64_t lda,
                           void *D, int64_t ldc, const void *bias) {
    pthread_once(&g_lt_once, lt_load);
    if (!g_lt_ok || index < 0 || index >= REMAT_MAX_DEVICES_PER_TYPE || n <= 0 || m <= 0 || k <= 0)
        return false;
    /* the bias must be aligned as an element of D's rows is: 16 bytes or it is left out */
    if (align_of(bias) < 16) return false;
    pthread_mutex_lock(&g_lt_lock);
    lt_dev *d;
    bool done = false;
    lt_descs x;
    if (lt_device(index, &d) && descs_make(&x, tb, ta, n, m, k, ldb, lda, ldc, bias)) {
        const int64_t key[10] = {
            n,           m,           k,          ldb, lda, ldc, (int64_t)tb * 2 + (int64_t)ta,
            align_of(B), align_of(A), align_of(D)};
        cublasLtMatmulAlgo_t algo;
        if (lt_algo(d, &x, key, &algo)) {
            const float one = 1.0f, zero = 0.0f;
            done = g_lt.matmul(d->h, x.op, &one, B, x.b, A, x.a, &zero, D, x.d, D, x.d, &algo,
                               d->ws, RM_LT_WORKSPACE, s) == CUBLAS_STATUS_SUCCESS;
        }
        descs_free(&x);
    }
    pthread_mutex_unlock(&g_lt_lock);
    return done;
}
