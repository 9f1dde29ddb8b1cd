/* tools/train/grad_meter.c — parameter-gradient bytes at the allocator's peak (grad_meter.h). */
#include "grad_meter.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void on_event(void *ud, remat_device device, const void *ptr, int64_t delta,
                     size_t current) {
    grad_meter *m = ud;
    if (device.type != m->device.type || device.index != m->device.index) return;
    pthread_mutex_lock(&m->lock);
    size_t e = ++m->events;
    if (delta > 0) {
        if (m->n == m->cap) {
            size_t cap = m->cap ? 2 * m->cap : 1024;
            grad_alloc *a = realloc(m->a, cap * sizeof *a);
            if (!a) {
                m->oom = true;
                pthread_mutex_unlock(&m->lock);
                return;
            }
            m->a = a;
            m->cap = cap;
        }
        m->a[m->n++] = (grad_alloc){ptr, (size_t)delta, e, SIZE_MAX, false};
        if (current > m->peak_bytes) { /* where the allocator raised its peak */
            m->peak_bytes = current;
            m->peak_event = e;
        }
    } else {
        for (size_t i = m->n; i-- > 0;) /* the live allocation at ptr: a recent one, mostly */
            if (m->a[i].died == SIZE_MAX && m->a[i].ptr == ptr) {
                m->a[i].died = e;
                break;
            }
    }
    pthread_mutex_unlock(&m->lock);
}

/* Marks the live allocation holding t's data as a parameter gradient (by its address on
 * the device: the allocator's events carry device addresses too). */
static void mark(grad_meter *m, const remat_tensor *t) {
    const char *p = t ? remat_data_ptr(t) : NULL;
    if (!p) return;
    pthread_mutex_lock(&m->lock);
    for (size_t i = m->n; i-- > 0;) {
        grad_alloc *a = &m->a[i];
        if (a->died == SIZE_MAX && p >= a->ptr && p < a->ptr + a->bytes) {
            a->grad = true;
            break;
        }
    }
    pthread_mutex_unlock(&m->lock);
}

static void on_leaf_grad(void *ud, const remat_tensor *leaf, const remat_tensor *grad) {
    grad_meter *m = ud;
    for (int i = 0; i < m->n_params; i++)
        if (m->params[i] == leaf) {
            mark(m, grad);
            return;
        }
}

void grad_meter_begin(grad_meter *m, remat_device device, remat_tensor *const *params, int n) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->lock, NULL);
    m->device = device;
    m->params = params;
    m->n_params = n;
    remat_alloc_stats s;
    if (remat_alloc_stats_get(device, &s) == REMAT_OK)
        m->start_bytes = m->peak_bytes = s.current_bytes;
    remat_set_alloc_event_observer(on_event, m);
    remat_set_leaf_grad_observer(on_leaf_grad, m);
}

void grad_meter_end(grad_meter *m) {
    remat_set_alloc_event_observer(NULL, NULL);
    remat_set_leaf_grad_observer(NULL, NULL);
    for (int i = 0; i < m->n_params; i++) mark(m, remat_tensor_grad(m->params[i]));
    m->grad_at_peak = 0;
    for (size_t i = 0; i < m->n; i++) {
        const grad_alloc *a = &m->a[i];
        if (a->grad && a->born <= m->peak_event && a->died > m->peak_event)
            m->grad_at_peak += a->bytes;
    }
}

void grad_meter_free(grad_meter *m) {
    if (!m) return;
    free(m->a);
    m->a = NULL;
    m->n = m->cap = 0;
    pthread_mutex_destroy(&m->lock);
}
