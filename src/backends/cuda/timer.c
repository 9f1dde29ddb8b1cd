/* src/backends/cuda/timer.c — the cuda device's marks for the kernel timer
 * (rm_timer_ops, src/core/backend.h; remat/timing.h): CUDA events recorded on the
 * device's stream, kept in a pool per device (creating an event costs more than
 * recording one), the time between two read once the later one has completed. */
#include <pthread.h>
#include <stdlib.h>

#include "cuda_backend.h"

typedef struct mark {
    cudaEvent_t ev;
    int index;
    struct mark *next; /* in the pool */
} mark;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static mark *g_pool[REMAT_MAX_DEVICES_PER_TYPE];

static void *cu_mark(int index) {
    if (index < 0 || index >= REMAT_MAX_DEVICES_PER_TYPE) return NULL;
    int prev;
    if (rm_cuda_guard("cuda timing", index, &prev)) return NULL;
    pthread_mutex_lock(&g_lock);
    mark *m = g_pool[index];
    if (m) g_pool[index] = m->next;
    pthread_mutex_unlock(&g_lock);
    if (!m) {
        m = calloc(1, sizeof *m);
        if (m && rm_cuda_check(cudaEventCreate(&m->ev), "cuda timing event")) {
            free(m);
            m = NULL;
        }
        if (m) m->index = index;
    }
    cudaStream_t s = m ? rm_cuda_stream(index) : NULL;
    if (m && (!s || rm_cuda_check(cudaEventRecord(m->ev, s), "cuda timing event"))) {
        cudaEventDestroy(m->ev);
        free(m);
        m = NULL;
    }
    rm_cuda_unguard(prev);
    return m;
}

static double cu_elapsed_ms(void *start, void *end) {
    const mark *a = start, *b = end;
    float ms = 0;
    if (!a || !b || rm_cuda_check(cudaEventSynchronize(b->ev), "cuda timing event") ||
        rm_cuda_check(cudaEventElapsedTime(&ms, a->ev, b->ev), "cuda timing event"))
        return -1;
    return ms;
}

static void cu_release(void *p) {
    mark *m = p;
    if (!m) return;
    pthread_mutex_lock(&g_lock);
    m->next = g_pool[m->index];
    g_pool[m->index] = m;
    pthread_mutex_unlock(&g_lock);
}

const rm_timer_ops rm_cuda_timer_ops = {cu_mark, cu_elapsed_ms, cu_release};
