/* src/backends/cpu/rope.c — cpu kernel of rope (src/ops/rope.c): rotary
 * position embedding in the Hugging Face Llama convention (rotate_half:
 * the pairs are (i, i + D/2), not interleaved).
 *
 *   inv_freq[i] = theta^(-2i/D),  a = pos[t] · inv_freq[i],  h = D/2,  i < h
 *   y[t, i]     = x[t, i] · cos a − x[t, i + h] · sin a
 *   y[t, i + h] = x[t, i + h] · cos a + x[t, i] · sin a
 *
 * The backward is the rotation by −a (inverse: the same table, the signs of the sine
 * terms flipped in the loop: bitwise the rotation by a table of negated sines). The
 * angles, cosines and sines are computed in double for the (T, h) table and rounded to
 * the data's type (f32 for the bf16 path, which runs this kernel on widened values), then
 * every row of x (its leading dims) reuses the table: the values do not depend on the
 * thread count, and the forward and the backward use the same cos and sin.
 *
 * Why a table cache: the table costs 2 T h libm calls (cos, sin), which cost more than
 * rotating the rows they serve (a Llama step at T 256, D 64 called sincos 8k times per
 * rope, ~0.5 ms, against ~0.1 ms for the rotation itself), and every layer's q and k and
 * their gradients use the same one. Tables for the default positions (0 .. T-1) are kept
 * process-wide: a few slots, each published once (atomically) and immutable after, never
 * freed, so a reader needs no lock and cannot see one go; when the slots are full, or a
 * table is over RM_ROPE_CACHE_MAX bytes, or positions are given, the call builds its own
 * table and frees it. A cached table is bitwise the one a call would build. */
#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#include "clones.h"
#include "cpu.h"
#include "tmpl.h"

#define RM_ROPE_CACHE_SLOTS 8
#define RM_ROPE_CACHE_MAX ((size_t)4 << 20) /* bytes a cached table may have */

typedef struct rope_tab {
    double theta;
    int64_t Tn, D;
    size_t esize;         /* sizeof(T): f32 or f64 */
    unsigned char data[]; /* the table: 2 Tn (D/2) elements */
} rope_tab;

static _Atomic(rope_tab *) g_rope_tabs[RM_ROPE_CACHE_SLOTS];

typedef void (*rope_fill_fn)(void *tab, double theta, int64_t Tn, int64_t D, const int64_t *pos);

/* The (Tn, D/2) cosines then sines for theta, in elements of esize bytes: a cached table
 * (pos NULL), or one built for this call (*own, which the caller frees). NULL when out of
 * memory. */
static const void *rope_table(double theta, int64_t Tn, int64_t D, const int64_t *pos, size_t esize,
                              rope_fill_fn fill, void **own) {
    const size_t bytes = esize * 2 * (size_t)Tn * (size_t)(D / 2);
    *own = NULL;
    const bool cacheable = !pos && bytes <= RM_ROPE_CACHE_MAX;
    if (cacheable)
        for (int i = 0; i < RM_ROPE_CACHE_SLOTS; i++) {
            rope_tab *t = atomic_load_explicit(&g_rope_tabs[i], memory_order_acquire);
            if (!t) break; /* slots fill in order: nothing further on */
            if (t->theta == theta && t->Tn == Tn && t->D == D && t->esize == esize) return t->data;
        }
    rope_tab *t = malloc(sizeof *t + bytes);
    if (!t) return NULL;
    *t = (rope_tab){.theta = theta, .Tn = Tn, .D = D, .esize = esize};
    fill(t->data, theta, Tn, D, pos);
    if (cacheable)
        for (int i = 0; i < RM_ROPE_CACHE_SLOTS; i++) {
            rope_tab *expected = NULL;
            if (atomic_compare_exchange_strong_explicit(&g_rope_tabs[i], &expected, t,
                                                        memory_order_acq_rel, memory_order_acquire))
                return t->data; /* published: the cache owns it */
        }
    *own = t; /* not cached: this call's own (a slot taken meanwhile may hold a twin) */
    return t->data;
}

/* ---- the kernels, once per dtype: rope_body.h ------------------------------------------ */
#define T f32
#include "rope_body.h"

#define T f64
#include "rope_body.h"
