/* src/autograd/engine.c — the backward engine: graph discovery, dependency
 * counting, execution in reverse creation order, gradient accumulation,
 * capture for remat_grad, and graph release.
 *
 * The engine is re-entrant (a node's backward may call remat_backward, as
 * reentrant checkpointing does): all state of one pass lives in a `task`
 * on the C stack; a thread-local stack of tasks answers "which backward am
 * I in". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accumulate.h"
#include "core/kernels.h"
#include "core/ptrtab.h"
#include "core/timing.h"
#include "graph.h"

/* ---- per-pass bookkeeping --------------------------------------------------------- */
typedef struct ninfo {
    remat_node *node;
    int deps;
    bool needed;   /* partial pass: must run (a capture lies beyond it) */
    bool captured; /* partial pass: an input's gradient is captured here */
    bool visited;
    remat_tensor **buf; /* n_outputs accumulated input gradients */
} ninfo;

typedef struct capture {
    remat_node *node;
    int input_nr;
    remat_tensor *tensor; /* backward(inputs=) non-leaf: accumulate into .grad */
    remat_tensor *grad;   /* captured (grad()) */
    bool is_leaf;
} capture;

typedef struct task {
    uint64_t id;
    bool partial;
    bool keep_grad; /* false for remat_grad: never touch .grad */
    bool retain_graph;
    bool create_graph;                 /* backward records a differentiable graph */
    remat_tensor *const *running_gout; /* the buffer handed to the running backward */
    ninfo *tab;                        /* open-addressing hash on node pointer */
    size_t cap, count;
    capture *caps;
    int n_caps;
    struct task *parent;
} task;

static RM_TLS task *tls_task;
static atomic_uint_fast64_t g_task_id;

bool remat_in_backward(void) { return tls_task != NULL; }
bool rm_backward_retains_graph(void) { return !tls_task || tls_task->retain_graph; }

/* Whether t is the sole holder of a contiguous storage with data that it spans exactly. */
static bool sole_whole(const remat_tensor *t) {
    const rm_storage *st = t->storage;
    return atomic_load(&t->refcount) == 1 && atomic_load(&st->refcount) == 1 && st->data &&
           t->offset == 0 && remat_is_contiguous(t) &&
           (size_t)remat_numel(t) * remat_dtype_size(t->dtype) == st->nbytes;
}

remat_tensor *rm_donation_take(remat_node *n, remat_tensor *const *gout, rm_buf buf, int i,
                               rm_kernel_id kernel) {
    const task *t = tls_task;
    if (!t || !n) return NULL;
    if (buf == RM_BUF_GRAD) { /* the engine's buffer dies as the backward returns */
        if (t->create_graph || !gout || gout != t->running_gout || i < 0 || i >= n->n_outputs)
            return NULL;
        remat_tensor *g = gout[i];
        if (!g || g->requires_grad || !sole_whole(g) ||
            !rm_kernel_allows(kernel, g->storage->device.type, RM_KF_IN_PLACE))
            return NULL;
        return rm_retain(g); /* the engine's reference goes as the backward returns */
    }
    if (t->retain_graph || i < 0 || i >= n->n_saved) return NULL; /* the slot dies with n */
    rm_saved *s = &n->saved[i];
    remat_tensor *x = s->data;
    if (!s->defined || s->freed || s->has_hooks || !x || !sole_whole(x) ||
        !rm_kernel_allows(kernel, x->storage->device.type, RM_KF_IN_PLACE))
        return NULL;
    remat_tensor *fresh = rm_tensor_alloc(x->storage, 0, x->ndim, x->shape, x->strides, x->dtype);
    if (!fresh) return NULL;
    rm_node_free_saved(n, i);
    return fresh;
}

void rm_donation_drop(remat_node *n, rm_buf buf, int i) {
    const task *t = tls_task;
    if (t && !t->retain_graph && buf == RM_BUF_SAVED) rm_node_free_saved(n, i);
}

void rm_donation_read_wide(remat_node *n, int reader) {
    if (n && reader >= 0 && reader <= RM_DONATION_PASS) n->wide_grad_reader = reader;
}

remat_status rm_no_double_backward(const remat_node *n, const char *what) {
    const char *op = n->op_name ? n->op_name : remat_node_name(n);
    return rm_err(REMAT_EUNSUPPORTED,
                  "%s: double backward (create_graph) through %s%s%s is not supported: remat has "
                  "no differentiable backward for it",
                  remat_node_name(n), op, what ? " " : "", what ? what : "");
}
uint64_t remat_current_backward_id(void) { return tls_task ? tls_task->id : 0; }
bool remat_current_backward_is_partial(void) { return tls_task && tls_task->partial; }

/* The pass's nodes: a table keyed by node (src/core/ptrtab.h). */
static ninfo *tab_find(task *t, remat_node *n) {
    if (!t->cap) return NULL;
    ninfo *e = &t->tab[rm_ptrtab_slot(t->tab, t->cap, sizeof *t->tab, n)];
    return e->node ? e : NULL;
}

static remat_status tab_insert(task *t, remat_node *n, ninfo **out) {
    if ((t->count + 1) * 2 > t->cap) {
        size_t ncap = t->cap ? t->cap * 2 : 256;
        ninfo *nt = rm_ptrtab_grow(t->tab, t->cap, ncap, sizeof *nt);
        if (!nt) return rm_err(REMAT_ENOMEM, "backward: out of memory");
        t->tab = nt;
        t->cap = ncap;
    }
    size_t j = rm_ptrtab_slot(t->tab, t->cap, sizeof *t->tab, n);
    t->tab[j].node = rm_node_retain(n); /* the pass keeps every node it may visit alive */
    t->count++;
    *out = &t->tab[j];
    return REMAT_OK;
}

static void task_free(task *t) {
    for (size_t i = 0; i < t->cap; i++) {
        ninfo *ni = &t->tab[i];
        if (!ni->node) continue;
        if (ni->buf) {
            for (int k = 0; k < ni->node->n_outputs; k++) rm_release(ni->buf[k]);
            free(ni->buf);
        }
        rm_node_release(ni->node);
    }
    free(t->tab);
    for (int i = 0; i < t->n_caps; i++) rm_release(t->caps[i].grad);
    free(t->caps);
}

/* ---- discovery: dependency counts ------------------------------------------------------ */
static remat_status discover(task *t, remat_node **roots, int n_roots) {
    remat_node **stack = NULL;
    int sp = 0, cap = 0;
    int rc = REMAT_OK;
#define PUSH(x)                                                                                    \
    do {                                                                                           \
        if (sp == cap) {                                                                           \
            remat_node **ns = rm_grow(stack, &cap, sp, 256, sizeof *ns);                           \
            if (!ns) {                                                                             \
                rc = rm_err(REMAT_ENOMEM, "backward: out of memory");                              \
                goto done;                                                                         \
            }                                                                                      \
            stack = ns;                                                                            \
        }                                                                                          \
        stack[sp++] = (x);                                                                         \
    } while (0)
    for (int i = 0; i < n_roots; i++) {
        if (!roots[i] || tab_find(t, roots[i])) continue;
        ninfo *ni;
        rc = tab_insert(t, roots[i], &ni);
        if (rc) goto done;
        PUSH(roots[i]);
    }
    while (sp > 0) {
        remat_node *n = stack[--sp];
        for (int i = 0; i < n->n_next; i++) {
            remat_node *c = n->next[i].node;
            if (!c) continue;
            ninfo *ci = tab_find(t, c);
            if (!ci) {
                rc = tab_insert(t, c, &ci);
                if (rc) goto done;
                PUSH(c);
            }
            ci->deps++;
        }
    }
done:
    free(stack);
    return rc;
#undef PUSH
}

/* The explicit stack of mark_needed's DFS: (node, next child) frames. */
typedef struct dfs_frame {
    remat_node *n;
    int i;
} dfs_frame;
typedef struct dfs_stack {
    dfs_frame *a;
    int n, cap;
} dfs_stack;

static remat_status dfs_push(dfs_stack *s, remat_node *n) {
    if (s->n == s->cap) {
        dfs_frame *ns = rm_grow(s->a, &s->cap, s->n, 256, sizeof *ns);
        if (!ns) return rm_err(REMAT_ENOMEM, "backward: out of memory");
        s->a = ns;
    }
    s->a[s->n++] = (dfs_frame){n, 0};
    return REMAT_OK;
}

/* As in PyTorch, a non-leaf input's own node is not needed for its capture: the
 * pass stops there (neither running nor freeing it) unless another input
 * lies beyond it. A leaf's accumulator is needed (it accumulates .grad). */
static void mark_captures(task *t) {
    for (int i = 0; i < t->n_caps; i++) {
        ninfo *ni = tab_find(t, t->caps[i].node);
        if (!ni) continue;
        ni->captured = true;
        if (t->caps[i].node->leaf) ni->needed = true;
    }
}

/* Marks nodes from which a capture target is reachable (post-order DFS). */
static remat_status mark_needed(task *t, remat_node **roots, int n_roots) {
    mark_captures(t);
    dfs_stack st = {0};
    int rc = REMAT_OK;
    for (int r = 0; r < n_roots && rc == REMAT_OK; r++) {
        ninfo *ri = tab_find(t, roots[r]);
        if (!ri || ri->visited) continue;
        ri->visited = true;
        rc = dfs_push(&st, roots[r]);
        while (rc == REMAT_OK && st.n > 0) {
            dfs_frame *f = &st.a[st.n - 1];
            if (f->i < f->n->n_next) {
                remat_node *c = f->n->next[f->i++].node;
                if (!c) continue;
                ninfo *ci = tab_find(t, c);
                if (ci->visited) {
                    if (ci->needed || ci->captured) tab_find(t, f->n)->needed = true;
                    continue;
                }
                ci->visited = true;
                rc = dfs_push(&st, c);
            } else {
                ninfo *fi = tab_find(t, f->n);
                bool nd = fi->needed || fi->captured;
                st.n--;
                if (st.n > 0 && nd) tab_find(t, st.a[st.n - 1].n)->needed = true;
            }
        }
    }
    free(st.a);
    return rc;
}

/* ---- ready queue: max-heap on seq ---------------------------------------------------------- */
typedef struct heap {
    remat_node **a;
    int n, cap;
} heap;

static remat_status heap_push(heap *h, remat_node *n) {
    if (h->n == h->cap) {
        remat_node **na = rm_grow(h->a, &h->cap, h->n, 64, sizeof *na);
        if (!na) return rm_err(REMAT_ENOMEM, "backward: out of memory");
        h->a = na;
    }
    int i = h->n++;
    h->a[i] = n;
    while (i > 0) {
        int p = (i - 1) / 2;
        if (h->a[p]->seq >= h->a[i]->seq) break;
        remat_node *tmp = h->a[p];
        h->a[p] = h->a[i];
        h->a[i] = tmp;
        i = p;
    }
    return REMAT_OK;
}

static remat_node *heap_pop(heap *h) {
    remat_node *top = h->a[0];
    h->a[0] = h->a[--h->n];
    int i = 0;
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < h->n && h->a[l]->seq > h->a[m]->seq) m = l;
        if (r < h->n && h->a[r]->seq > h->a[m]->seq) m = r;
        if (m == i) break;
        remat_node *tmp = h->a[m];
        h->a[m] = h->a[i];
        h->a[i] = tmp;
        i = m;
    }
    return top;
}

/* ---- gradient buffers ---------------------------------------------------------------------- */
static remat_status accumulate_into(remat_tensor **slot, remat_tensor *g) {
    if (!*slot) {
        *slot = rm_retain(g);
        return REMAT_OK;
    }
    remat_tensor *sum;
    int rc = rm_grad_add(&sum, *slot, g);
    if (rc) return rc;
    rm_release(*slot);
    *slot = sum;
    return REMAT_OK;
}

/* PyTorch: validate_outputs. The gradient g that `producer` (NULL: a root's
 * gradient) computed for output input_nr of n, checked against that
 * output's metadata: another device is REMAT_EDEVICE; a shape the output
 * broadcasts to is summed down to it, any other shape is REMAT_ESHAPE;
 * another dtype is converted to the output's. *out: g itself (retained) or
 * the fixed-up copy. */
static remat_status validate_grad(remat_tensor **out, const remat_node *producer, remat_node *n,
                                  int input_nr, remat_tensor *g) {
    *out = NULL;
    const rm_out_meta *m = &n->out_meta[input_nr];
    char who[160], b1[200], b2[160]; /* who: "function XBackward returned a gradient" */
    if (producer)
        snprintf(who, sizeof who, "function %s returned a gradient", remat_node_name(producer));
    else snprintf(who, sizeof who, "the gradient given for a root is");
    remat_device d = g->storage->device;
    if (d.type != m->device.type || d.index != m->device.index)
        return rm_err(REMAT_EDEVICE, "backward: %s %s %s on %s:%d for a tensor on %s:%d", who,
                      rm_shape_str(g->ndim, g->shape, b1, sizeof b1), remat_dtype_name(g->dtype),
                      remat_device_type_name(d.type), d.index,
                      remat_device_type_name(m->device.type), m->device.index);
    remat_tensor *cur = rm_retain(g);
    int rc = REMAT_OK;
    if (g->ndim != m->ndim || memcmp(g->shape, m->shape, sizeof(int64_t) * (size_t)m->ndim) != 0) {
        int nd;
        int64_t bs[REMAT_MAX_DIMS];
        bool expandable = m->ndim <= g->ndim &&
                          rm_broadcast_shape("backward", m->ndim, m->shape, g->ndim, g->shape, &nd,
                                             bs) == REMAT_OK &&
                          memcmp(bs, g->shape, sizeof(int64_t) * (size_t)nd) == 0;
        if (!expandable) {
            rm_release(cur);
            return rm_err(REMAT_ESHAPE, "backward: %s of shape %s for a tensor of shape %s", who,
                          rm_shape_str(g->ndim, g->shape, b1, sizeof b1),
                          rm_shape_str(m->ndim, m->shape, b2, sizeof b2));
        }
        remat_tensor *sum = NULL;
        rc = rm_sum_to(&sum, cur, m->ndim, m->shape);
        rm_release(cur);
        if (rc) return rm_err_prefix(rc, "backward");
        cur = sum;
    }
    if (cur->dtype != m->dtype) {
        if (cur->requires_grad && remat_is_grad_enabled()) {
            rm_release(cur);
            return rm_err(REMAT_EUNSUPPORTED,
                          "backward: %s of dtype %s for a tensor of dtype %s; converting it "
                          "under create_graph is not supported",
                          who, remat_dtype_name(g->dtype), remat_dtype_name(m->dtype));
        }
        remat_tensor *conv = NULL;
        rc = rm_new_output(&conv, m->ndim, m->shape, m->dtype, m->device);
        if (!rc) rc = rm_copy_into(conv, cur);
        rm_release(cur);
        if (rc) {
            rm_release(conv);
            return rm_err_prefix(rc, "backward");
        }
        cur = conv;
    }
    *out = cur;
    return REMAT_OK;
}

static remat_leaf_grad_observer_fn g_leaf_grad_obs;
static void *g_leaf_grad_obs_ud;

void remat_set_leaf_grad_observer(remat_leaf_grad_observer_fn fn, void *user_data) {
    g_leaf_grad_obs = fn;
    g_leaf_grad_obs_ud = user_data;
}

static void observe_leaf_grad(const remat_node *n, const remat_tensor *g) {
    if (g_leaf_grad_obs && n->leaf && g) g_leaf_grad_obs(g_leaf_grad_obs_ud, n->leaf, g);
}

/* Whether g, the first gradient for output input_nr of n, is kept in n's
 * buffer as it is, f32 for a bf16 output, rather than rounded now (buffer
 * donation's gradient side, rm_donation_read_wide): n's backward reads it as
 * it is, by a kernel that reads one on the output's device (RM_KF_WIDE_GRAD)
 * or handing it on; g has the output's shape and device and no graph;
 * nothing else sees the buffer before n's backward (no hook on that output,
 * no capture at n, not create_graph); and something besides the producer's
 * return holds g (the residual stream's gradient, which add hands to both
 * its inputs), so keeping it wide costs nothing, where a gradient only n
 * would hold is cheaper rounded. */
static bool keep_wide(const task *t, const ninfo *ni, int input_nr, const remat_tensor *g) {
    const remat_node *n = ni->node;
    const rm_out_meta *m = &n->out_meta[input_nr];
    int reader = n->wide_grad_reader;
    if (reader < 0 || t->create_graph || ni->captured || (ni->buf && ni->buf[input_nr]))
        return false;
    if (g->dtype != REMAT_F32 || m->dtype != REMAT_BF16 || g->requires_grad ||
        g->storage->device.type != m->device.type || g->storage->device.index != m->device.index ||
        g->ndim != m->ndim || memcmp(g->shape, m->shape, sizeof(int64_t) * (size_t)m->ndim) != 0)
        return false;
    if (reader != RM_DONATION_PASS &&
        !rm_kernel_allows((rm_kernel_id)reader, m->device.type, RM_KF_WIDE_GRAD))
        return false;
    for (const rm_node_hook *h = n->hooks; h; h = h->next)
        if (h->output_nr == input_nr) return false;
    return atomic_load(&g->refcount) > 1 || atomic_load(&g->storage->refcount) > 1;
}

/* Rounds a gradient kept wide in slot i of n's buffer to the output's dtype
 * (as validate_grad would have when it arrived): before hooks or captures see
 * it, or a second gradient is added to it. */
static remat_status narrow_kept(remat_node *n, remat_tensor **slot, int i) {
    remat_tensor *v = NULL;
    if (!*slot || (*slot)->dtype == n->out_meta[i].dtype) return REMAT_OK;
    int rc = validate_grad(&v, NULL, n, i, *slot);
    if (rc) return rc;
    rm_release(*slot);
    *slot = v;
    return REMAT_OK;
}

static remat_status buf_add(task *t, const remat_node *producer, remat_node *n, int input_nr,
                            remat_tensor *g) {
    ninfo *ni = tab_find(t, n);
    if (!ni) return REMAT_OK;
    remat_tensor *v = NULL;
    observe_leaf_grad(n, g);
    bool wide = keep_wide(t, ni, input_nr, g);
    int rc = wide ? REMAT_OK : validate_grad(&v, producer, n, input_nr, g);
    if (rc) return rc;
    if (wide) v = rm_retain(g);
    if (v != g) observe_leaf_grad(n, v);
    if (!ni->buf) {
        ni->buf = calloc((size_t)n->n_outputs, sizeof *ni->buf);
        if (!ni->buf) {
            rm_release(v);
            return rm_err(REMAT_ENOMEM, "backward: out of memory");
        }
    }
    rc = narrow_kept(n, &ni->buf[input_nr], input_nr); /* a second gradient: summed as bf16 */
    if (!rc) rc = accumulate_into(&ni->buf[input_nr], v);
    if (!rc && ni->buf[input_nr] != v) observe_leaf_grad(n, ni->buf[input_nr]); /* the sum */
    rm_release(v);
    return rc;
}

static remat_status run_hook_chain(remat_grad_hook_fn fn, void *ud, remat_tensor **g) {
    remat_tensor *rep = NULL;
    int rc = fn(ud, *g, &rep);
    if (rc) {
        rm_release(rep);
        return rc;
    }
    if (rep) {
        if (rm_dead(rep)) return rm_released_err("gradient hook", "its result", rep);
        rm_adopt(rep);
        rm_release(*g);
        *g = rep;
    }
    return REMAT_OK;
}

/* Leaf gradient accumulation under create_graph (PyTorch: AccumulateGrad with
 * grad mode on): .grad keeps g's graph, a later gradient is added out of
 * place (a differentiable add), so .grad can itself be differentiated. */
static remat_status accumulate_leaf_in_graph(remat_tensor *leaf, remat_tensor *g) {
    remat_tensor *sum = NULL;
    /* the first gradient is copied (g * 1 is exact) so that .grad shares
     * no storage with a tensor of the graph */
    const rm_graph_ops *ops;
    int rc = rm_graph_ops_get("accumulating a leaf's gradient", &ops);
    if (!rc) rc = leaf->grad ? ops->add(&sum, leaf->grad, g) : ops->copy(&sum, g);
    if (rc) return rc;
    rm_release(leaf->grad);
    leaf->grad = sum;
    return REMAT_OK;
}

/* Leaf gradient accumulation (PyTorch: AccumulateGrad). */
static remat_status accumulate_leaf(remat_tensor *leaf, remat_tensor *g) {
    if (tls_task && tls_task->create_graph) return accumulate_leaf_in_graph(leaf, g);
    if (!leaf->grad) {
        /* Take g if nothing else refers to it; otherwise copy, so later
         * in-place accumulation cannot change another tensor. */
        if (atomic_load(&g->refcount) == 1 && atomic_load(&g->storage->refcount) == 1 &&
            remat_is_contiguous(g) && !g->is_view && g->storage->data) {
            leaf->grad = rm_retain(g);
            return REMAT_OK;
        }
        return rm_copy_new(&leaf->grad, g);
    }
    return rm_grad_add_into(leaf->grad, g);
}

static remat_status make_zeros_like_meta(remat_tensor **out, const rm_out_meta *m) {
    int rc = rm_new_output(out, m->ndim, m->shape, m->dtype, m->device);
    if (!rc) rc = rm_kernel_fill(*out, 0.0, "backward"); /* the device's kernel: not a memset */
    if (rc) rm_release_p(out);
    return rc;
}

/* Runs the tensor hooks registered on the node's outputs (non-leaf) or on
 * its leaf tensor, each of which may replace the gradient in buf. */
static remat_status run_grad_hooks(remat_node *n, remat_tensor **buf) {
    if (!buf) return REMAT_OK;
    for (rm_node_hook *h = n->hooks; h; h = h->next) {
        if (!buf[h->output_nr]) continue;
        int rc = run_hook_chain(h->fn, h->user_data, &buf[h->output_nr]);
        if (rc) return rc;
    }
    if (!n->leaf || !buf[0]) return REMAT_OK;
    for (rm_hook *h = n->leaf->hooks; h; h = h->next) {
        int rc = run_hook_chain(h->fn, h->user_data, &buf[0]);
        if (rc) return rc;
    }
    return REMAT_OK;
}

/* Hands the gradients arriving at n to the captures of a partial
 * backward/grad; *captured_leaf: a grad() capture took a leaf's gradient
 * (it must then not reach the leaf's .grad). */
static remat_status apply_captures(task *t, remat_node *n, remat_tensor **buf,
                                   bool *captured_leaf) {
    *captured_leaf = false;
    if (!buf) return REMAT_OK;
    for (int i = 0; i < t->n_caps; i++) {
        capture *c = &t->caps[i];
        if (c->node != n || !buf[c->input_nr]) continue;
        int rc = REMAT_OK;
        if (c->tensor && !c->is_leaf) {
            rc = accumulate_leaf(c->tensor, buf[c->input_nr]);
        } else if (!t->keep_grad) {
            rc = accumulate_into(&c->grad, buf[c->input_nr]);
        }
        if (rc) return rc;
        if (c->is_leaf && !t->keep_grad) *captured_leaf = true;
    }
    return REMAT_OK;
}

/* Under create_graph, whether n's input gradients depend on something that
 * requires grad (a gradient arriving at n, a tensor n saved): then they
 * must be computed by the differentiable backward. Otherwise they are
 * constants and the first-order kernels give them exactly. */
static bool needs_differentiable_backward(const remat_node *n, remat_tensor *const *buf) {
    for (int i = 0; i < n->n_outputs; i++)
        if (buf[i] && buf[i]->requires_grad) return true;
    for (int i = 0; i < n->n_saved; i++)
        if (n->saved[i].defined && n->saved[i].requires_grad) return true;
    return false;
}

/* Calls n's backward on its output gradients (missing ones as zeros) and
 * routes the input gradients to the next nodes that need them. */
static remat_status call_backward(task *t, remat_node *n, remat_tensor **buf) {
    for (int i = 0; i < n->n_outputs; i++) {
        if (buf[i]) continue;
        int rc = make_zeros_like_meta(&buf[i], &n->out_meta[i]);
        if (rc) return rc;
    }
    rm_backward_fn backward = n->backward;
    if (t->create_graph && needs_differentiable_backward(n, buf)) {
        if (!n->backward_diff) return rm_no_double_backward(n, NULL);
        backward = n->backward_diff;
    }
    remat_tensor **gin = n->n_next ? calloc((size_t)n->n_next, sizeof *gin) : NULL;
    if (n->n_next && !gin) return rm_err(REMAT_ENOMEM, "backward: out of memory");
    remat_tensor *const *prev_gout = t->running_gout;
    t->running_gout = buf;
    int rc = backward(n, buf, gin);
    t->running_gout = prev_gout;
    /* free this node's input gradients right away: they are dead now */
    for (int i = 0; i < n->n_outputs; i++) rm_release_p(&buf[i]);
    for (int i = 0; i < n->n_next && rc == REMAT_OK; i++) {
        if (!gin[i] || !n->next[i].node) continue;
        ninfo *ci = tab_find(t, n->next[i].node);
        if (t->partial && ci && !ci->needed && !ci->captured) continue;
        rc = buf_add(t, n, n->next[i].node, n->next[i].input_nr, gin[i]);
    }
    for (int i = 0; i < n->n_next; i++) rm_release(gin[i]);
    free(gin);
    return rc;
}

/* Executes one node with its accumulated input gradients. */
static remat_status run_node(task *t, ninfo *ni) {
    remat_node *n = ni->node;
    remat_tensor **buf = ni->buf;
    bool captured_leaf = false;
    int rc = REMAT_OK;
    /* hooks and captures see the output's dtype (one registered after a
     * gradient was kept wide included) */
    for (int i = 0; buf && (n->hooks || ni->captured) && i < n->n_outputs && !rc; i++)
        rc = narrow_kept(n, &buf[i], i);
    if (!rc) rc = run_grad_hooks(n, buf);
    if (!rc) rc = apply_captures(t, n, buf, &captured_leaf);
    if (rc) return rc;
    if (n->leaf) {
        if (!buf || !buf[0]) return REMAT_OK;
        bool skip = captured_leaf || (t->partial && (!t->keep_grad || !ni->needed));
        if (!skip) rc = accumulate_leaf(n->leaf, buf[0]);
        if (!skip && rc == REMAT_OK) rm_accumulate_notify(n->leaf);
        /* The buffer is dead now: freeing it here keeps the pass from
         * holding one gradient per parameter until it ends. */
        rm_release_p(&buf[0]);
        return rc;
    }
    if (t->partial && !ni->needed) return REMAT_OK;
    bool any = false;
    for (int i = 0; buf && i < n->n_outputs; i++) any |= buf[i] != NULL;
    if (!any || !n->backward) return REMAT_OK;
    rm_progress_point();
    rc = call_backward(t, n, buf);
    if (rc == REMAT_OK && !t->retain_graph) {
        rm_node_release_saved(n);
        n->released = true;
    }
    return rc;
}

static remat_status execute(task *t, remat_node **roots, int n_roots) {
    heap h = {0};
    int rc = REMAT_OK;
    for (int i = 0; i < n_roots; i++) {
        ninfo *ni = tab_find(t, roots[i]);
        if (ni && ni->deps == 0 && !ni->visited) {
            ni->visited = true; /* reused as "queued" */
            rc = heap_push(&h, roots[i]);
            if (rc) goto out;
        }
    }
    while (h.n > 0) {
        remat_node *n = heap_pop(&h);
        ninfo *ni = tab_find(t, n);
        rc = run_node(t, ni);
        if (rc) goto out;
        /* ni may have moved if the table grew; it cannot grow while running */
        for (int i = 0; i < n->n_next; i++) {
            remat_node *c = n->next[i].node;
            if (!c) continue;
            ninfo *ci = tab_find(t, c);
            if (--ci->deps == 0) {
                rc = heap_push(&h, c);
                if (rc) goto out;
            }
        }
    }
out:
    free(h.a);
    return rc;
}

/* ---- entry points ------------------------------------------------------------------------------ */
/* Checks the arguments of a backward/grad call before anything runs. */
static remat_status check_backward_args(const char *call, int n, remat_tensor *const *roots,
                                        remat_tensor *const *grad_outputs, int n_inputs,
                                        remat_tensor *const *inputs) {
    if (n <= 0 || !roots) return rm_err(REMAT_EINVAL, "%s: no output tensors given", call);
    if (n_inputs < 0 || (n_inputs > 0 && !inputs))
        return rm_err(REMAT_EINVAL, "%s: inputs is NULL with n_inputs %d", call, n_inputs);
    char b1[200], b2[200];
    for (int i = 0; i < n; i++) { /* released tensors first: nothing else of theirs is read */
        remat_tensor *g = grad_outputs ? grad_outputs[i] : NULL;
        if (roots[i] && rm_dead(roots[i])) {
            snprintf(b1, sizeof b1, "output %d", i);
            return rm_released_err(call, b1, roots[i]);
        }
        if (g && rm_dead(g)) {
            snprintf(b1, sizeof b1, "grad_output %d", i);
            return rm_released_err(call, b1, g);
        }
    }
    for (int i = 0; i < n_inputs; i++)
        if (inputs[i] && rm_dead(inputs[i])) {
            snprintf(b1, sizeof b1, "input %d", i);
            return rm_released_err(call, b1, inputs[i]);
        }
    for (int i = 0; i < n; i++) {
        if (!roots[i]) return rm_err(REMAT_EINVAL, "%s: output %d is NULL", call, i);
        if (!roots[i]->requires_grad)
            return rm_err(REMAT_ENOGRAD,
                          "%s: element %d of tensors does not require grad and does not have a "
                          "grad_fn (%s)",
                          call, i, rm_tensor_str(roots[i], b1, sizeof b1));
        remat_tensor *g = grad_outputs ? grad_outputs[i] : NULL;
        if (g) {
            if (g->ndim != roots[i]->ndim ||
                memcmp(g->shape, roots[i]->shape, sizeof(int64_t) * (size_t)g->ndim) != 0)
                return rm_err(REMAT_ESHAPE, "%s: grad_output %d has shape %s but output %d is %s",
                              call, i, rm_tensor_str(g, b1, sizeof b1), i,
                              rm_tensor_str(roots[i], b2, sizeof b2));
        } else if (remat_numel(roots[i]) != 1) {
            return rm_err(REMAT_EINVAL,
                          "%s: grad can be implicitly created only for one-element outputs; "
                          "output %d is %s — pass grad_outputs",
                          call, i, rm_tensor_str(roots[i], b1, sizeof b1));
        }
    }
    for (int i = 0; i < n_inputs; i++) {
        if (!inputs[i]) return rm_err(REMAT_EINVAL, "%s: input %d is NULL", call, i);
        if (!inputs[i]->requires_grad)
            return rm_err(REMAT_ENOGRAD, "%s: input %d (%s) does not require grad", call, i,
                          rm_tensor_str(inputs[i], b1, sizeof b1));
    }
    return REMAT_OK;
}

/* One capture per input of a partial backward/grad: where its gradient
 * arrives in the graph, and whether it is a leaf. */
static remat_status add_captures(task *t, const char *call, int n_inputs,
                                 remat_tensor *const *inputs, bool keep_grad) {
    t->caps = calloc((size_t)n_inputs, sizeof *t->caps);
    if (!t->caps) return rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    for (int i = 0; i < n_inputs; i++) {
        rm_edge e;
        int rc = rm_gradient_edge(inputs[i], &e);
        if (rc) return rc;
        t->caps[i].node = e.node;
        t->caps[i].input_nr = e.input_nr;
        t->caps[i].is_leaf = inputs[i]->grad_fn == NULL;
        t->caps[i].tensor = keep_grad ? inputs[i] : NULL;
        t->n_caps++;
        rm_node_release(e.node); /* the tensor's graph keeps it alive */
    }
    return REMAT_OK;
}

/* Puts each root's gradient (grad_outputs[i], or a one for a one-element
 * root) into the buffer of its node. */
static remat_status seed_root_grads(task *t, int n, remat_tensor *const *roots,
                                    remat_tensor *const *grad_outputs, remat_node **root_nodes,
                                    const rm_edge *root_edges) {
    int rc = REMAT_OK;
    for (int i = 0; i < n && rc == REMAT_OK; i++) {
        remat_tensor *g = grad_outputs ? grad_outputs[i] : NULL;
        remat_tensor *ones = NULL;
        if (!g) {
            rc = rm_new_output(&ones, roots[i]->ndim, roots[i]->shape, roots[i]->dtype,
                               roots[i]->storage->device);
            /* on the root's device by its kernel (a GPU's memory is not the host's) */
            if (!rc) rc = rm_kernel_fill(ones, 1.0, "backward");
            if (rc) {
                rm_release(ones);
                break;
            }
            g = ones;
        }
        rc = buf_add(t, NULL, root_nodes[i], root_edges[i].input_nr, g);
        rm_release(ones);
    }
    return rc;
}

/* Moves the captured gradients of a grad() call to grads_out (all or
 * nothing: an unused input without allow_unused fails and releases the
 * ones already moved). */
static remat_status take_grads(task *t, const char *call, int n_inputs, remat_tensor *const *inputs,
                               bool allow_unused, remat_tensor **grads_out) {
    char b1[200];
    for (int i = 0; i < n_inputs; i++) {
        grads_out[i] = NULL;
        if (!t->caps[i].grad && !allow_unused) {
            for (int k = 0; k < i; k++) rm_release_p(&grads_out[k]);
            return rm_err(REMAT_EINVAL,
                          "%s: one of the differentiated tensors (input %d, %s) appears to not "
                          "have been used in the graph; pass allow_unused=true if this is the "
                          "desired behavior",
                          call, i, rm_tensor_str(inputs[i], b1, sizeof b1));
        }
        grads_out[i] = t->caps[i].grad;
        t->caps[i].grad = NULL;
    }
    return REMAT_OK;
}

static remat_status run_backward(const char *call, int n, remat_tensor *const *roots,
                                 remat_tensor *const *grad_outputs, bool retain_graph,
                                 bool create_graph, int n_inputs, remat_tensor *const *inputs,
                                 bool keep_grad, bool allow_unused, remat_tensor **grads_out) {
    int rc = check_backward_args(call, n, roots, grad_outputs, n_inputs, inputs);
    if (rc) return rc;

    task t = {0};
    t.id = atomic_fetch_add(&g_task_id, 1) + 1;
    t.partial = n_inputs > 0;
    t.keep_grad = keep_grad;
    t.retain_graph = retain_graph;
    t.create_graph = create_graph;
    rm_edge *root_edges = calloc((size_t)n, sizeof *root_edges);
    remat_node **root_nodes = calloc((size_t)n, sizeof *root_nodes);
    if (!root_edges || !root_nodes) {
        free(root_edges);
        free(root_nodes);
        return rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    }
    void *scope = rm_scope_suspend();
    /* PyTorch: the engine runs backward functions with grad mode = create_graph */
    bool prev_grad = remat_set_grad_enabled(create_graph);
    t.parent = tls_task;
    tls_task = &t;
    const remat_phase prev_phase = rm_phase_set(REMAT_PHASE_BACKWARD);
    bool prev_creates = rm_set_backward_creates_graph(create_graph);

    for (int i = 0; i < n && rc == REMAT_OK; i++) {
        rc = rm_gradient_edge(roots[i], &root_edges[i]);
        root_nodes[i] = root_edges[i].node;
    }
    if (rc == REMAT_OK && n_inputs > 0) rc = add_captures(&t, call, n_inputs, inputs, keep_grad);
    if (rc == REMAT_OK) rc = discover(&t, root_nodes, n);
    if (rc == REMAT_OK && t.partial) rc = mark_needed(&t, root_nodes, n);
    if (rc == REMAT_OK) {
        for (size_t i = 0; i < t.cap; i++) t.tab[i].visited = false;
        rc = seed_root_grads(&t, n, roots, grad_outputs, root_nodes, root_edges);
    }
    if (rc == REMAT_OK) rc = execute(&t, root_nodes, n);
    if (rc == REMAT_OK && grads_out)
        rc = take_grads(&t, call, n_inputs, inputs, allow_unused, grads_out);

    rm_set_backward_creates_graph(prev_creates);
    rm_phase_set(prev_phase);
    tls_task = t.parent;
    remat_set_grad_enabled(prev_grad);
    rm_scope_resume(scope);
    for (int i = 0; i < n; i++) rm_node_release(root_edges[i].node);
    free(root_edges);
    free(root_nodes);
    task_free(&t);
    if (rc && call && !strstr(remat_last_error(), call)) rm_err_prefix(rc, call);
    if (rc == REMAT_OK && grads_out && (rc = rm_hand_out_n(grads_out, n_inputs)) && call)
        rm_err_prefix(rc, call);
    return rc;
}

remat_status remat_backward(int n, remat_tensor *const *roots, remat_tensor *const *grad_outputs,
                            bool retain_graph, int n_inputs, remat_tensor *const *inputs) {
    return run_backward("remat_backward", n, roots, grad_outputs, retain_graph, false, n_inputs,
                        inputs, true, true, NULL);
}

remat_status remat_backward_scalar(remat_tensor *root) {
    return run_backward("remat_backward", 1, &root, NULL, false, false, 0, NULL, true, true, NULL);
}

remat_status remat_grad(int n_outputs, remat_tensor *const *outputs,
                        remat_tensor *const *grad_outputs, int n_inputs,
                        remat_tensor *const *inputs, bool retain_graph, bool allow_unused,
                        remat_tensor **grads) {
    if (!grads) return rm_err(REMAT_EINVAL, "remat_grad: grads must not be NULL");
    if (n_inputs <= 0 || !inputs)
        return rm_err(REMAT_EINVAL, "remat_grad: at least one input is required");
    for (int i = 0; i < n_inputs; i++) grads[i] = NULL;
    return run_backward("remat_grad", n_outputs, outputs, grad_outputs, retain_graph, false,
                        n_inputs, inputs, false, allow_unused, grads);
}

/* retain_graph as the options give it: unset means create_graph (PyTorch). */
static remat_status resolve_retain(const char *call, const remat_backward_options *o,
                                   bool *retain) {
    *retain = o && o->create_graph;
    if (!o || o->retain_graph == REMAT_OPT_DEFAULT) return REMAT_OK;
    if (o->retain_graph != REMAT_OPT_TRUE && o->retain_graph != REMAT_OPT_FALSE)
        return rm_err(REMAT_EINVAL,
                      "%s: retain_graph must be REMAT_OPT_DEFAULT, REMAT_OPT_TRUE "
                      "or REMAT_OPT_FALSE, got %d",
                      call, (int)o->retain_graph);
    *retain = o->retain_graph == REMAT_OPT_TRUE;
    return REMAT_OK;
}

remat_status remat_backward_ex(int n, remat_tensor *const *roots, remat_tensor *const *grad_outputs,
                               int n_inputs, remat_tensor *const *inputs,
                               const remat_backward_options *opts) {
    bool retain;
    int rc = resolve_retain("remat_backward", opts, &retain);
    if (rc) return rc;
    rc = run_backward("remat_backward", n, roots, grad_outputs, retain, opts && opts->create_graph,
                      n_inputs, inputs, true, true, NULL);
    static atomic_bool warned;
    if (!rc && opts && opts->create_graph && !atomic_exchange(&warned, true)) /* P warns too */
        rm_warn("remat_backward_ex: create_graph with gradients accumulated into .grad makes a "
                "reference cycle between each leaf and its .grad (the gradient's graph refers "
                "to the leaf), which leaks both: remat_set_grad(leaf, NULL) once done with the "
                "gradients breaks it; remat_grad_ex returns them without touching .grad");
    return rc;
}

remat_status remat_grad_ex(int n_outputs, remat_tensor *const *outputs,
                           remat_tensor *const *grad_outputs, int n_inputs,
                           remat_tensor *const *inputs, const remat_backward_options *opts,
                           remat_tensor **grads) {
    if (!grads) return rm_err(REMAT_EINVAL, "remat_grad: grads must not be NULL");
    if (n_inputs <= 0 || !inputs)
        return rm_err(REMAT_EINVAL, "remat_grad: at least one input is required");
    for (int i = 0; i < n_inputs; i++) grads[i] = NULL;
    bool retain;
    int rc = resolve_retain("remat_grad", opts, &retain);
    if (rc) return rc;
    return run_backward("remat_grad", n_outputs, outputs, grad_outputs, retain,
                        opts && opts->create_graph, n_inputs, inputs, false,
                        opts && opts->allow_unused, grads);
}
