/* src/core/tensor_pool.c — where tensor structs live: a type-stable pool.
 *
 * A tensor handle is a pointer to its struct, and users keep handles after
 * they released them (a second remat_release, a use after release). So a
 * struct is never given back to malloc: a released one is marked dead —
 * its shape, dtype, name and origin kept for the message that reports the
 * mistake — and queued. Queued structs are reused in release order, and
 * only while more than rm_ref_quarantine() of them wait, so a released
 * handle stays recognisably dead until that many other tensors were
 * released after it; in deep mode (REMAT_REF_CHECKS=deep,
 * remat_set_ref_checks) never. Every reuse bumps the struct's generation,
 * which the holders that outlive user calls (scope entries) compare. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

#define SLAB_SLOTS 256

typedef struct slab {
    struct slab *next;
    remat_tensor slots[SLAB_SLOTS];
} slab;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static slab *g_slabs;        /* every slab ever made (reachable: no leak reports) */
static int g_slab_used;      /* slots of g_slabs handed out */
static remat_tensor *g_head; /* released structs, oldest first */
static remat_tensor *g_tail;
static size_t g_queued;

remat_tensor *rm_tensor_slot_take(void) {
    remat_tensor *t = NULL;
    size_t keep = rm_ref_quarantine();
    pthread_mutex_lock(&g_lock);
    if (g_queued > keep) {
        t = g_head;
        g_head = t->pool_next;
        if (!g_head) g_tail = NULL;
        g_queued--;
    } else {
        if (!g_slabs || g_slab_used == SLAB_SLOTS) {
            slab *s = calloc(1, sizeof *s);
            if (s) {
                s->next = g_slabs;
                g_slabs = s;
                g_slab_used = 0;
            }
        }
        if (g_slabs && g_slab_used < SLAB_SLOTS) t = &g_slabs->slots[g_slab_used++];
    }
    pthread_mutex_unlock(&g_lock);
    if (!t) return NULL;
    uint32_t gen = t->gen + 1;
    char *name = t->name; /* kept while it was dead, for the messages */
    memset(t, 0, sizeof *t);
    free(name);
    t->gen = gen;
    return t;
}

void rm_tensor_slot_put(remat_tensor *t) {
    t->dead = RM_TENSOR_DEAD;
    t->pool_next = NULL;
    pthread_mutex_lock(&g_lock);
    if (g_tail) g_tail->pool_next = t;
    else g_head = t;
    g_tail = t;
    g_queued++;
    pthread_mutex_unlock(&g_lock);
}
