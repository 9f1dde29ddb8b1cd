/* src/autograd/leaves.c — the leaves a backward pass will accumulate into,
 * read from the graph before the pass runs (data parallelism's
 * gradient-ready counts, src/dist/ddp.c; see accumulate.h). */
#include <stdlib.h>

#include "accumulate.h"
#include "core/ptrtab.h"
#include "graph.h"

typedef struct node_set {
    remat_node **slot;
    size_t cap, n;
} node_set;

/* Adds n; 1 if added, 0 if present, -1 out of memory. */
static int set_add(node_set *s, remat_node *n) {
    if (2 * (s->n + 1) > s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 256;
        remat_node **slot = rm_ptrtab_grow(s->slot, s->cap, cap, sizeof *slot);
        if (!slot) return -1;
        s->slot = slot;
        s->cap = cap;
    }
    size_t j = rm_ptrtab_slot(s->slot, s->cap, sizeof *s->slot, n);
    if (s->slot[j]) return 0;
    s->slot[j] = n;
    s->n++;
    return 1;
}

remat_status rm_graph_leaf_accumulators(remat_tensor *root, rm_accumulate_observer_fn fn,
                                        void *user_data, bool *opaque) {
    *opaque = false;
    if (!root || !root->requires_grad) return REMAT_OK;
    if (!root->grad_fn) { /* a leaf root: the pass accumulates into it */
        fn(user_data, root);
        return REMAT_OK;
    }
    node_set seen = {0};
    remat_node **stack = NULL;
    size_t n = 0, cap = 0;
    int rc = REMAT_OK;
    if (set_add(&seen, root->grad_fn) < 0 || !(stack = malloc((cap = 64) * sizeof *stack)))
        rc = REMAT_ENOMEM;
    else stack[n++] = root->grad_fn;
    while (rc == REMAT_OK && n > 0) {
        remat_node *v = stack[--n];
        if (v->leaf) fn(user_data, v->leaf);
        /* a custom function's nested passes: known if it recorded them */
        if (rm_node_runs_backward(v) && !rm_node_nested_leaves(v, fn, user_data)) *opaque = true;
        for (int i = 0; rc == REMAT_OK && i < v->n_next; i++) {
            remat_node *c = v->next[i].node;
            int added = c ? set_add(&seen, c) : 0;
            if (added < 0) rc = REMAT_ENOMEM;
            if (added <= 0) continue;
            if (n == cap) {
                remat_node **ns = realloc(stack, 2 * cap * sizeof *ns);
                if (!ns) {
                    rc = REMAT_ENOMEM;
                    break;
                }
                stack = ns;
                cap *= 2;
            }
            stack[n++] = c;
        }
    }
    free(stack);
    free(seen.slot);
    return rc == REMAT_OK ? REMAT_OK : rm_err(rc, "reading the autograd graph: out of memory");
}
