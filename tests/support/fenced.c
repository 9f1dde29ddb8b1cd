/* tests/support/fenced.c — the "fenced" device type (see fenced.h). */
#include "fenced.h"

#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/backend.h"
#include "core/core.h"

#include "core/kernels.h"

/* The live allocations: mmap'd regions, PROT_NONE unless a kernel or a copy
 * has them open (opened counts the nesting). */
typedef struct fenced_block {
    char *base;
    size_t len;
    int opened;
    struct fenced_block *next;
} fenced_block;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static fenced_block *g_blocks;
static int g_type = -1;
static long g_kernel_runs[RM_K_COUNT];
static long g_copies[3];  /* by remat_copy_kind */
static long g_fail_at[3]; /* by kind: the count of g_copies at which the copy fails; 0: none */

static size_t page_round(size_t n) {
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    return n == 0 ? pg : (n + pg - 1) / pg * pg;
}

static void *fenced_alloc(void *ud, int index, size_t nbytes) {
    (void)ud, (void)index;
    fenced_block *b = malloc(sizeof *b);
    if (!b) return NULL;
    b->len = page_round(nbytes);
    b->base = mmap(NULL, b->len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (b->base == MAP_FAILED) {
        free(b);
        return NULL;
    }
    b->opened = 0;
    pthread_mutex_lock(&g_lock);
    b->next = g_blocks;
    g_blocks = b;
    pthread_mutex_unlock(&g_lock);
    return b->base;
}

static void fenced_free(void *ud, int index, void *ptr, size_t nbytes) {
    (void)ud, (void)index, (void)nbytes;
    pthread_mutex_lock(&g_lock);
    for (fenced_block **p = &g_blocks; *p; p = &(*p)->next)
        if ((*p)->base == ptr) {
            fenced_block *b = *p;
            *p = b->next;
            munmap(b->base, b->len);
            free(b);
            break;
        }
    pthread_mutex_unlock(&g_lock);
}

/* Opens (delta +1) or closes (-1) the block holding address p, if any. */
static void fence(const void *p, int delta) {
    if (!p) return;
    pthread_mutex_lock(&g_lock);
    for (fenced_block *b = g_blocks; b; b = b->next) {
        if ((const char *)p < b->base || (const char *)p >= b->base + b->len) continue;
        int was = b->opened;
        b->opened += delta;
        if ((was == 0) != (b->opened == 0))
            mprotect(b->base, b->len, b->opened ? PROT_READ | PROT_WRITE : PROT_NONE);
        break;
    }
    pthread_mutex_unlock(&g_lock);
}

static int fenced_copy(void *ud, int index, void *dst, const void *src, size_t n,
                       remat_copy_kind kind) {
    (void)ud, (void)index;
    if ((unsigned)kind < 3) {
        long c = __atomic_add_fetch(&g_copies[kind], 1, __ATOMIC_RELAXED);
        long at = __atomic_load_n(&g_fail_at[kind], __ATOMIC_RELAXED);
        if (at && c == at) { /* as a test asked: copies nothing, as a failed device copy */
            __atomic_store_n(&g_fail_at[kind], 0, __ATOMIC_RELAXED);
            return REMAT_EDEVICE;
        }
    }
    if (kind != REMAT_COPY_HOST_TO_DEVICE) fence(src, +1);
    if (kind != REMAT_COPY_DEVICE_TO_HOST) fence(dst, +1);
    memmove(dst, src, n);
    if (kind != REMAT_COPY_DEVICE_TO_HOST) fence(dst, -1);
    if (kind != REMAT_COPY_HOST_TO_DEVICE) fence(src, -1);
    return REMAT_OK;
}

static int fenced_count(void *ud) {
    (void)ud;
    return 1;
}

/* Runs the cpu kernel of `id` with every fenced operand opened, handed to it as a cpu
 * tensor over the same bytes (so that the cpu code it calls, e.g. rm_copy_into, treats the
 * memory as the host's instead of dispatching back to this device). Operands that are the
 * same tensor, or share a storage, stay so. */
static int fenced_run(rm_kernel_id id, remat_dtype dtype, const rm_kargs *k) {
    enum { N = RM_KERNEL_MAX_IN + RM_KERNEL_MAX_OUT };
    rm_kernel_fn fn = rm_kernel_lookup(id, REMAT_CPU, dtype);
    if (!fn) return remat_set_error(REMAT_EUNSUPPORTED, "fenced: no cpu kernel %d", (int)id);
    __atomic_add_fetch(&g_kernel_runs[id], 1, __ATOMIC_RELAXED);
    remat_tensor *ops[N], *views[N] = {0};
    rm_storage *orig[N], host[N]; /* host[j]: a cpu alias of orig[j], never freed */
    int n_st = 0, rc = REMAT_OK;
    for (int i = 0; i < RM_KERNEL_MAX_IN; i++) ops[i] = k->in[i];
    for (int i = 0; i < RM_KERNEL_MAX_OUT; i++) ops[RM_KERNEL_MAX_IN + i] = k->out[i];
    for (int i = 0; i < N && !rc; i++) {
        remat_tensor *t = ops[i];
        if (!t || t->storage->device.type != g_type) {
            views[i] = t ? remat_retain(t) : NULL;
            continue;
        }
        for (int j = 0; j < i && !views[i]; j++)
            if (ops[j] == t) views[i] = remat_retain(views[j]);
        if (views[i]) continue;
        int s = 0;
        while (s < n_st && orig[s] != t->storage) s++;
        if (s == n_st) {
            orig[s] = t->storage;
            host[s].data = t->storage->data;
            host[s].nbytes = t->storage->nbytes;
            host[s].device = REMAT_DEVICE_CPU;
            atomic_init(&host[s].refcount, 1);
            atomic_init(&host[s].version, atomic_load(&t->storage->version));
            n_st++;
            fence(t->storage->data, +1);
        }
        views[i] = rm_tensor_alloc(&host[s], t->offset, t->ndim, t->shape, t->strides, t->dtype);
        if (!views[i]) rc = remat_set_error(REMAT_ENOMEM, "fenced: out of memory");
    }
    if (!rc) {
        rm_kargs hk = *k;
        for (int i = 0; i < RM_KERNEL_MAX_IN; i++) hk.in[i] = views[i];
        for (int i = 0; i < RM_KERNEL_MAX_OUT; i++) hk.out[i] = views[RM_KERNEL_MAX_IN + i];
        rc = fn(&hk);
    }
    for (int i = 0; i < N; i++) remat_release(views[i]);
    for (int s = 0; s < n_st; s++) fence(orig[s]->data, -1);
    return rc;
}

/* One wrapper per (kernel id, dtype) (a kernel is handed only its operands, and the dtype
 * it was looked up under is not always its first operand's). */
#define FENCED_WRAP1_(id, dt)                                                                      \
    static int fenced_##id##_##dt(const rm_kargs *k) {                                             \
        return fenced_run(RM_K_##id, (remat_dtype)dt, k);                                          \
    }
#define FENCED_WRAP_(id, text)                                                                     \
    FENCED_WRAP1_(id, 0)                                                                           \
    FENCED_WRAP1_(id, 1) FENCED_WRAP1_(id, 2) FENCED_WRAP1_(id, 3) FENCED_WRAP1_(id, 4)
RM_KERNEL_LIST(FENCED_WRAP_)
#undef FENCED_WRAP_
#undef FENCED_WRAP1_
_Static_assert(RM_N_DTYPES == 5, "one fenced wrapper per dtype");
static const rm_kernel_fn k_wrappers[RM_K_COUNT][RM_N_DTYPES] = {
#define FENCED_ROW_(id, text)                                                                      \
    [RM_K_##id] = {fenced_##id##_0, fenced_##id##_1, fenced_##id##_2, fenced_##id##_3,             \
                   fenced_##id##_4},
    RM_KERNEL_LIST(FENCED_ROW_)
#undef FENCED_ROW_
};

/* A fault inside fenced memory: says so with a backtrace (addr2line -e the test
 * binary turns the addresses into lines), then dies of the signal as before. It does not chain
 * to the action it replaced: under ASan that is ASan's SEGV report, which exits instead of
 * dying of the signal (and fenced_device::host_write_faults expects the signal). */
static void on_fault(int sig, siginfo_t *si, void *uc) {
    (void)uc;
    const char *a = si->si_addr;
    bool ours = false;
    for (fenced_block *b = g_blocks; b; b = b->next) /* no lock: the process is dying */
        ours |= a >= b->base && a < b->base + b->len;
    if (ours) {
        static const char msg[] = "fenced: host access to device memory outside a kernel or a "
                                  "copy, from:\n";
        if (write(2, msg, sizeof msg - 1) < 0) {}
        void *bt[32];
        backtrace_symbols_fd(bt, backtrace(bt, 32), 2);
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Its kernel rows: a wrapper wherever the cpu has a kernel, but the optimizer's list
 * kernels, whose tensors are in their parameters where the wrapper cannot open them: the
 * optimizer updates one parameter at a time here, as on cuda. */
static void fenced_registered(int type) {
    for (int k = 0; k < RM_K_COUNT; k++)
        for (int dt = 0; dt < RM_N_DTYPES; dt++)
            if (k != RM_K_ADAMW_LIST && k != RM_K_SGD_LIST &&
                rm_kernel_lookup((rm_kernel_id)k, REMAT_CPU, (remat_dtype)dt))
                rm_kernel_register((rm_kernel_id)k, type, (remat_dtype)dt, k_wrappers[k][dt]);
}

/* mse's backward may write over its saved prediction (buffer donation, src/autograd/graph.h),
 * as on cuda; the norms write a bf16 y, the add + norm reads a bf16 r uncast and the loss
 * autocast's bf16 logits (the cpu kernels do: remat_layer_norm_to, autocast's residual
 * branch and logits on a device that is not the cpu, as on cuda). */
static const unsigned char k_fenced_flags[RM_K_COUNT] = {
    [RM_K_MSE_BWD] = RM_KF_IN_PLACE,
    [RM_K_LAYER_NORM] = RM_KF_BF16_Y,
    [RM_K_RMS_NORM] = RM_KF_BF16_Y,
    [RM_K_ADD_LAYER_NORM] = RM_KF_BF16_Y | RM_KF_AUTOCAST_KEEP,
    [RM_K_CROSS_ENTROPY] = RM_KF_AUTOCAST_KEEP,
};

/* The fenced backend's record (src/core/backend.h), registered as every backend is. */
static const rm_backend k_fenced_backend = {
    .device =
        {
            .name = "fenced",
            .alloc = fenced_alloc,
            .free = fenced_free,
            .copy = fenced_copy,
            .device_count = fenced_count,
        },
    .kernel_flags = k_fenced_flags,
    .registered = fenced_registered,
};

int rt_fenced_type(void) {
    if (g_type >= 0) return g_type;
    int id = remat_device_type_id("fenced");
    if (id < 0) {
        if (rm_backend_register(&k_fenced_backend, &id)) return -1;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_fault;
        sa.sa_flags = SA_SIGINFO;
        sigaction(SIGSEGV, &sa, NULL);
    }
    g_type = id;
    return id;
}

long rt_fenced_kernel_runs(int kernel_id) {
    if (kernel_id < 0 || kernel_id >= RM_K_COUNT) return -1;
    return __atomic_load_n(&g_kernel_runs[kernel_id], __ATOMIC_RELAXED);
}

long rt_fenced_copies(int kind) {
    if (kind < 0 || kind >= 3) return -1;
    return __atomic_load_n(&g_copies[kind], __ATOMIC_RELAXED);
}

void rt_fenced_fail_copy(int kind, long nth) {
    if ((unsigned)kind >= 3) return;
    long at = nth > 0 ? __atomic_load_n(&g_copies[kind], __ATOMIC_RELAXED) + nth : 0;
    __atomic_store_n(&g_fail_at[kind], at, __ATOMIC_RELAXED);
}
