/* src/autograd/graph.c — grad mode, graph nodes, saved tensors and their
 * hooks, leaf attributes and tensor hooks. The engine that walks the graph
 * is in engine.c; custom functions in function.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accumulate.h"
#include "core/intercept.h"
#include "core/kernels.h"
#include "graph.h"

/* ---- grad mode ------------------------------------------------------------------- */
static RM_TLS bool tls_grad_disabled; /* zero-initialised: grad enabled */
static RM_TLS bool tls_creates_graph; /* the running backward's create_graph */

bool rm_backward_creates_graph(void) { return tls_creates_graph; }
bool rm_set_backward_creates_graph(bool on) {
    bool prev = tls_creates_graph;
    tls_creates_graph = on;
    return prev;
}

bool remat_is_grad_enabled(void) { return !tls_grad_disabled; }
bool remat_set_grad_enabled(bool enabled) {
    bool prev = !tls_grad_disabled;
    tls_grad_disabled = !enabled;
    return prev;
}
bool remat_no_grad_begin(void) { return remat_set_grad_enabled(false); }
bool remat_enable_grad_begin(void) { return remat_set_grad_enabled(true); }
void remat_grad_mode_restore(bool prev) { remat_set_grad_enabled(prev); }

bool rm_needs_grad(int n, remat_tensor *const *inputs) {
    if (tls_grad_disabled) return false;
    for (int i = 0; i < n; i++)
        if (inputs[i] && inputs[i]->requires_grad) return true;
    return false;
}

/* ---- saved-tensor hooks stack -------------------------------------------------------
 * Per thread. The first RM_HOOK_INLINE entries live in thread-local
 * storage (no allocation for ordinary nesting); deeper stacks (a chain of
 * nested non-reentrant checkpoints, as the planner's minimum-memory plans
 * make) move to a heap array that doubles as needed and is freed when the
 * stack empties again. */
#define RM_HOOK_INLINE 64
typedef struct hook_entry {
    bool disabled;
    remat_saved_hooks hooks;
} hook_entry;
static RM_TLS hook_entry tls_hooks_inline[RM_HOOK_INLINE];
static RM_TLS hook_entry *tls_hooks_heap; /* NULL: the inline array is in use */
static RM_TLS int tls_hooks_cap;          /* capacity of tls_hooks_heap */
static RM_TLS int tls_n_hooks;

static hook_entry *hook_stack(void) { return tls_hooks_heap ? tls_hooks_heap : tls_hooks_inline; }

/* Room for one more entry; REMAT_ENOMEM (naming `call`) when it cannot grow. */
static remat_status hook_reserve(const char *call) {
    int cap = tls_hooks_heap ? tls_hooks_cap : RM_HOOK_INLINE;
    if (tls_n_hooks < cap) return REMAT_OK;
    if (cap > INT32_MAX / 2)
        return rm_err(REMAT_ENOMEM, "%s: hook stack depth %d cannot grow", call, tls_n_hooks);
    int ncap = cap * 2;
    hook_entry *a = realloc(tls_hooks_heap, (size_t)ncap * sizeof *a);
    if (!a)
        return rm_err(REMAT_ENOMEM, "%s: out of memory growing the hook stack past depth %d", call,
                      tls_n_hooks);
    if (!tls_hooks_heap) memcpy(a, tls_hooks_inline, sizeof tls_hooks_inline);
    tls_hooks_heap = a;
    tls_hooks_cap = ncap;
    return REMAT_OK;
}

remat_status remat_saved_hooks_push(const remat_saved_hooks *hooks) {
    if (!hooks || !hooks->pack || !hooks->unpack)
        return rm_err(REMAT_EINVAL, "remat_saved_hooks_push: hooks must supply pack and unpack");
    int rc = hook_reserve("remat_saved_hooks_push");
    if (rc) return rc;
    hook_entry *e = &hook_stack()[tls_n_hooks++];
    e->disabled = false;
    e->hooks = *hooks;
    return REMAT_OK;
}

remat_status remat_saved_hooks_push_disabled(void) {
    int rc = hook_reserve("remat_saved_hooks_push_disabled");
    if (rc) return rc;
    hook_entry *e = &hook_stack()[tls_n_hooks++];
    memset(e, 0, sizeof *e);
    e->disabled = true;
    return REMAT_OK;
}

remat_status remat_saved_hooks_pop(void) {
    if (tls_n_hooks == 0)
        return rm_err(REMAT_ESTATE, "remat_saved_hooks_pop: no saved-tensor hooks are pushed");
    tls_n_hooks--;
    if (tls_n_hooks == 0 && tls_hooks_heap) { /* back to the inline array */
        free(tls_hooks_heap);
        tls_hooks_heap = NULL;
        tls_hooks_cap = 0;
    }
    return REMAT_OK;
}

int remat_saved_hooks_depth(void) { return tls_n_hooks; }

bool rm_saved_hooks_top(remat_saved_hooks *out) {
    memset(out, 0, sizeof *out);
    if (tls_n_hooks == 0 || hook_stack()[tls_n_hooks - 1].disabled) return false;
    *out = hook_stack()[tls_n_hooks - 1].hooks;
    return true;
}

static remat_save_observer_fn g_save_obs;
static void *g_save_obs_ud;
void remat_set_save_observer(remat_save_observer_fn fn, void *user_data) {
    g_save_obs = fn;
    g_save_obs_ud = user_data;
}
void rm_notify_save(const char *op, remat_tensor *t) {
    if (g_save_obs) g_save_obs(g_save_obs_ud, op, t);
}
void rm_save_observer_get(remat_save_observer_fn *fn, void **user_data) {
    *fn = g_save_obs;
    *user_data = g_save_obs_ud;
}

static RM_TLS remat_tensor *tls_saving; /* the tensor a running pack hook saves */
remat_tensor *rm_node_saving(void) { return tls_saving; }

/* ---- nodes ------------------------------------------------------------------------------ */
static atomic_uint_fast64_t g_seq;

remat_node *rm_node_retain(remat_node *n) {
    if (n) atomic_fetch_add(&n->head.refcount, 1);
    return n;
}

static void free_saved(rm_saved *s) {
    if (!s->defined || s->freed) return;
    rm_node_release(s->grad_node);
    s->grad_node = NULL;
    if (s->has_hooks) {
        if (s->hooks.free_handle) s->hooks.free_handle(s->hooks.user_data, s->handle);
        s->handle = NULL;
    } else {
        rm_release(s->data);
        s->data = NULL;
    }
    s->freed = true;
}

void rm_node_release_saved(remat_node *n) {
    for (int i = 0; i < n->n_saved; i++) free_saved(&n->saved[i]);
}

void rm_node_free_saved(remat_node *n, int slot) {
    if (n && slot >= 0 && slot < n->n_saved) free_saved(&n->saved[slot]);
}

/* Frees a dead node (its children are released by the caller): its saved
 * tensors, ctx, hooks and leaf reference, and its block (node_alloc). */
static void node_free(remat_node *n) {
    rm_node_release_saved(n);
    if (n->ctx_free) n->ctx_free(n->ctx);
    else free(n->ctx);
    for (rm_node_hook *h = n->hooks; h;) {
        rm_node_hook *nx = h->next;
        free(h);
        h = nx;
    }
    if (n->leaf) {
        n->leaf->grad_accumulator = NULL;
        rm_release(n->leaf);
    }
    free(n->owned_name);
    free(n);
}

/* Destroys nodes iteratively: a long chain would otherwise recurse once per
 * node. */
void rm_node_release(remat_node *n) {
    if (!n) return;
    remat_node **stack = NULL;
    int sp = 0, cap = 0;
    remat_node *cur = n;
    for (;;) {
        if (cur && atomic_fetch_sub(&cur->head.refcount, 1) == 1) {
            /* the saved tensors' grad nodes and the edges go on the stack:
             * releasing them here could recurse once per node of a chain */
            for (int i = 0; i < cur->n_saved + cur->n_next; i++) {
                remat_node *child;
                if (i < cur->n_saved) {
                    child = cur->saved[i].freed ? NULL : cur->saved[i].grad_node;
                    cur->saved[i].grad_node = NULL;
                } else {
                    child = cur->next[i - cur->n_saved].node;
                }
                if (!child) continue;
                if (sp == cap) {
                    int nc = cap ? cap * 2 : 64;
                    remat_node **ns = realloc(stack, (size_t)nc * sizeof *ns);
                    if (!ns) {
                        rm_node_release(child); /* fall back to recursion */
                        continue;
                    }
                    stack = ns;
                    cap = nc;
                }
                stack[sp++] = child;
            }
            node_free(cur);
        }
        if (sp == 0) break;
        cur = stack[--sp];
    }
    free(stack);
}

/* Bytes rounded up to a multiple of any object's alignment. */
static size_t align_up(size_t n) {
    const size_t a = _Alignof(max_align_t);
    return (n + a - 1) / a * a;
}

/* A node and its arrays (edges, outputs' metadata, saved slots) in one
 * zeroed block, freed with the node. */
static remat_node *node_alloc(const char *name, rm_backward_fn backward, int n_next, int n_outputs,
                              int n_saved) {
    const size_t at_next = align_up(sizeof(remat_node));
    const size_t at_meta = at_next + align_up((size_t)n_next * sizeof(rm_edge));
    const size_t at_saved = at_meta + align_up((size_t)n_outputs * sizeof(rm_out_meta));
    char *block = calloc(1, at_saved + (size_t)n_saved * sizeof(rm_saved));
    if (!block) return NULL;
    remat_node *n = (remat_node *)block;
    atomic_init(&n->head.refcount, 1);
    n->head.release = rm_node_release;
    n->name = name;
    n->backward = backward;
    n->wide_grad_reader = -1; /* rounds what arrives (rm_donation_read_wide) */
    n->seq = atomic_fetch_add(&g_seq, 1) + 1;
    n->n_next = n_next;
    n->n_outputs = n_outputs;
    n->n_saved = n_saved;
    n->next = n_next ? (rm_edge *)(block + at_next) : NULL;
    n->out_meta = n_outputs ? (rm_out_meta *)(block + at_meta) : NULL;
    n->saved = n_saved ? (rm_saved *)(block + at_saved) : NULL;
    return n;
}

remat_status rm_gradient_edge(remat_tensor *t, rm_edge *edge) {
    edge->node = NULL;
    edge->input_nr = 0;
    if (!t || !t->requires_grad) return REMAT_OK;
    if (t->grad_fn) {
        edge->node = rm_node_retain(t->grad_fn);
        edge->input_nr = t->output_nr;
        return REMAT_OK;
    }
    if (t->grad_accumulator) {
        edge->node = rm_node_retain(t->grad_accumulator);
        return REMAT_OK;
    }
    remat_node *acc = node_alloc("AccumulateGrad", NULL, 0, 1, 0);
    if (!acc) return rm_err(REMAT_ENOMEM, "out of memory creating a graph node");
    acc->seq = UINT64_MAX; /* accumulate as soon as ready */
    acc->leaf = rm_retain(t);
    acc->out_meta[0].ndim = t->ndim;
    memcpy(acc->out_meta[0].shape, t->shape, sizeof t->shape);
    acc->out_meta[0].dtype = t->dtype;
    acc->out_meta[0].device = t->storage->device;
    t->grad_accumulator = acc; /* weak */
    edge->node = acc;
    return REMAT_OK;
}

remat_status rm_node_new(remat_node **out, const char *name, rm_backward_fn backward, int n_inputs,
                         remat_tensor *const *inputs, int n_outputs, int n_saved) {
    *out = NULL;
    rm_progress_point(); /* an op recorded: recomputation in backward passes here too */
    remat_node *n = node_alloc(name, backward, n_inputs, n_outputs, n_saved);
    if (!n) return rm_err(REMAT_ENOMEM, "%s: out of memory creating a graph node", name);
    n->op_name = rm_op_current(NULL); /* the public op running (NULL: none) */
    for (int i = 0; i < n_inputs; i++) {
        int rc = rm_gradient_edge(inputs[i], &n->next[i]);
        if (rc) {
            rm_node_release(n);
            return rc;
        }
    }
    *out = n;
    return REMAT_OK;
}

remat_status rm_node_new_ctx(remat_node **out, const char *name, rm_backward_fn backward,
                             int n_inputs, remat_tensor *const *inputs, int n_outputs, int n_saved,
                             const void *ctx, size_t ctx_size) {
    int rc = rm_node_new(out, name, backward, n_inputs, inputs, n_outputs, n_saved);
    if (rc || !ctx_size) return rc;
    void *copy = malloc(ctx_size);
    if (!copy) {
        rm_node_release(*out);
        *out = NULL;
        return rm_err(REMAT_ENOMEM, "%s: out of memory for the node's parameters", name);
    }
    memcpy(copy, ctx, ctx_size);
    rm_node_set_ctx(*out, copy, NULL);
    return REMAT_OK;
}

void rm_node_set_ctx(remat_node *n, void *ctx, void (*ctx_free)(void *)) {
    n->ctx = ctx;
    n->ctx_free = ctx_free;
}

void rm_node_set_output(remat_node *n, int i, remat_tensor *t) {
    rm_out_meta *m = &n->out_meta[i];
    m->ndim = t->ndim;
    memcpy(m->shape, t->shape, sizeof t->shape);
    m->dtype = t->dtype;
    m->device = t->storage->device;
    remat_node *old = t->grad_fn;
    t->grad_fn = rm_node_retain(n);
    t->output_nr = i;
    t->requires_grad = true;
    if (old) rm_node_release(old);
}

static remat_status make_alias(remat_tensor **out, remat_tensor *t) {
    remat_tensor *a =
        rm_tensor_alloc(t->storage, t->offset, t->ndim, t->shape, t->strides, t->dtype);
    if (!a) return rm_err(REMAT_ENOMEM, "out of memory creating a tensor alias");
    a->is_view = true;
    if (t->name) a->name = strdup(t->name);
    *out = a;
    return REMAT_OK;
}

remat_status rm_node_save(remat_node *n, int slot, remat_tensor *t) {
    rm_saved *s = &n->saved[slot];
    memset(s, 0, sizeof *s);
    if (!t) return REMAT_OK;
    s->defined = true;
    s->ndim = t->ndim;
    memcpy(s->shape, t->shape, sizeof t->shape);
    s->dtype = t->dtype;
    s->device = t->storage->device;
    s->saved_version = remat_version(t);
    s->was_output = t->grad_fn == n;
    rm_notify_save(n->name, t);
    remat_tensor *alias = NULL;
    int rc = make_alias(&alias, t);
    if (rc) return rc;
    if (tls_n_hooks > 0 && !hook_stack()[tls_n_hooks - 1].disabled) {
        remat_saved_hooks h = hook_stack()[tls_n_hooks - 1].hooks;
        remat_clear_error();
        void *prev_scope = rm_scope_suspend();
        remat_tensor *prev_saving = tls_saving;
        tls_saving = t;
        void *handle = h.pack(h.user_data, alias);
        tls_saving = prev_saving;
        rm_scope_resume(prev_scope);
        rm_release(alias);
        if (!handle) {
            s->defined = false;
            if (!remat_last_error()[0])
                return rm_err(REMAT_ECALLBACK, "%s: saved-tensor pack hook returned NULL", n->name);
            int st = rm_last_status(); /* e.g. REMAT_ENOMEM set by the hook: keep it */
            return rm_err_prefix(st ? st : REMAT_ECALLBACK, n->name);
        }
        s->has_hooks = true;
        s->hooks = h;
        s->handle = handle;
    } else {
        s->data = alias;
    }
    /* the tensor's place in the graph, for a create_graph unpack */
    s->requires_grad = t->requires_grad;
    s->output_nr = t->output_nr;
    if (t->requires_grad && !s->was_output) {
        if (t->grad_fn) {
            s->grad_node = rm_node_retain(t->grad_fn);
        } else {
            rm_edge e;
            int rc = rm_gradient_edge(t, &e);
            if (rc) {
                free_saved(s);
                s->defined = false;
                return rc;
            }
            s->grad_node = e.node;
            s->leaf = true;
        }
    }
    return REMAT_OK;
}

/* Under create_graph: *t (the unpacked data) replaced by an alias that
 * has the saved tensor's place in the graph (PyTorch: SavedVariable::unpack
 * rebuilding the variable around the data). A leaf's alias refers to the
 * leaf's AccumulateGrad node (weakly, as the leaf does; the saved slot
 * holds it), so gradients flowing into it reach the leaf's .grad. */
static remat_status unpack_in_graph(remat_node *n, const rm_saved *s, remat_tensor **t) {
    if (!s->requires_grad) return REMAT_OK;
    remat_tensor *a = NULL;
    int rc = make_alias(&a, *t);
    if (rc) return rc;
    a->requires_grad = true;
    if (s->leaf) {
        a->grad_accumulator = s->grad_node;
    } else {
        a->grad_fn = rm_node_retain(s->was_output ? n : s->grad_node);
        a->output_nr = s->output_nr;
    }
    rm_release(*t);
    *t = a;
    return REMAT_OK;
}

static const char *k_backward_twice =
    "Trying to backward through the graph a second time (or directly access saved tensors after "
    "they have already been freed). Saved intermediate values of the graph are freed when you "
    "call remat_backward() or remat_grad(). Pass retain_graph=true if you need to backward "
    "through the graph a second time or to access saved tensors after calling backward.";

remat_status rm_node_unpack(remat_node *n, int slot, remat_tensor **out) {
    *out = NULL;
    rm_saved *s = &n->saved[slot];
    if (!s->defined) return REMAT_OK;
    if (s->freed) return rm_err(REMAT_ESTATE, "%s: %s", n->name, k_backward_twice);
    if (s->has_hooks) {
        remat_tensor *t = NULL;
        void *prev_scope = rm_scope_suspend();
        int rc = s->hooks.unpack(s->hooks.user_data, s->handle, &t);
        rm_scope_resume(prev_scope);
        if (rc) return rc;
        if (!t)
            return rm_err(REMAT_ECALLBACK, "%s: saved-tensor unpack hook returned no tensor",
                          n->name);
        if (rm_dead(t)) return rm_released_err(n->name, "tensor from the unpack hook", t);
        rm_adopt(t);
        if (rm_backward_creates_graph() && (rc = unpack_in_graph(n, s, &t))) {
            rm_release(t);
            return rc;
        }
        *out = t;
        return REMAT_OK;
    }
    if (rm_dead(s->data)) /* its user released it once more than it was handed out */
        return rm_released_err(n->name, "saved tensor", s->data);
    uint64_t v = remat_version(s->data);
    if (v != s->saved_version) {
        char b[200];
        return rm_err(REMAT_EVERSION,
                      "one of the tensors needed for gradient computation has been modified by "
                      "an in-place operation: %s, saved by %s, is at version %llu; expected "
                      "version %llu instead",
                      rm_shape_str(s->ndim, s->shape, b, sizeof b), n->name, (unsigned long long)v,
                      (unsigned long long)s->saved_version);
    }
    remat_tensor *t = rm_retain(s->data);
    if (rm_backward_creates_graph()) {
        int rc = unpack_in_graph(n, s, &t);
        if (rc) {
            rm_release(t);
            return rc;
        }
    }
    *out = t;
    return REMAT_OK;
}

/* ---- leaf attributes -------------------------------------------------------------------- */
bool remat_requires_grad(const remat_tensor *t) {
    t = rm_live("remat_requires_grad", t);
    return t && t->requires_grad;
}

remat_status remat_set_requires_grad(remat_tensor *t, bool requires_grad) {
    if (!t) return rm_err(REMAT_EINVAL, "remat_set_requires_grad: tensor is NULL");
    if (rm_dead(t)) return rm_released_err("remat_set_requires_grad", "t", t);
    char b[200];
    if (t->grad_fn) {
        if (requires_grad) return REMAT_OK;
        return rm_err(REMAT_EINVAL,
                      "remat_set_requires_grad: %s is not a leaf (it was produced by %s); you can "
                      "only change requires_grad of leaves — use remat_detach",
                      rm_tensor_str(t, b, sizeof b), t->grad_fn->name);
    }
    if (requires_grad && t->dtype != REMAT_F32 && t->dtype != REMAT_F64 && t->dtype != REMAT_BF16)
        return rm_err(REMAT_EINVAL,
                      "remat_set_requires_grad: only floating point tensors can require grad, "
                      "got %s",
                      rm_tensor_str(t, b, sizeof b));
    t->requires_grad = requires_grad;
    return REMAT_OK;
}

remat_tensor *remat_tensor_grad(const remat_tensor *t) {
    t = rm_live("remat_tensor_grad", t);
    return t ? t->grad : NULL;
}

remat_status remat_set_grad(remat_tensor *t, remat_tensor *g) {
    if (!t) return rm_err(REMAT_EINVAL, "remat_set_grad: tensor is NULL");
    if (rm_dead(t)) return rm_released_err("remat_set_grad", "t", t);
    if (g && rm_dead(g)) return rm_released_err("remat_set_grad", "g", g);
    if (g) {
        char b1[200], b2[200];
        if (g->ndim != t->ndim ||
            memcmp(g->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim) != 0)
            return rm_err(REMAT_ESHAPE, "remat_set_grad: gradient %s does not match tensor %s",
                          rm_tensor_str(g, b1, sizeof b1), rm_tensor_str(t, b2, sizeof b2));
        if (g->dtype != t->dtype)
            return rm_err(REMAT_EDTYPE,
                          "remat_set_grad: gradient %s has another dtype than "
                          "tensor %s",
                          rm_tensor_str(g, b1, sizeof b1), rm_tensor_str(t, b2, sizeof b2));
        int rc = rm_check_same_device("remat_set_grad", t, g);
        if (rc) return rc;
    }
    remat_tensor *old = t->grad;
    t->grad = rm_retain(g);
    rm_release(old);
    return REMAT_OK;
}

bool remat_is_leaf(const remat_tensor *t) {
    t = rm_live("remat_is_leaf", t);
    return t && !t->grad_fn;
}
remat_node *remat_grad_fn(const remat_tensor *t) {
    t = rm_live("remat_grad_fn", t);
    return t ? t->grad_fn : NULL;
}

remat_status remat_detach(remat_tensor **out, remat_tensor *t) {
    if (!out) return rm_err(REMAT_EINVAL, "remat_detach: out must not be NULL");
    *out = NULL;
    int rc = rm_check_tensor("remat_detach", "t", t);
    if (rc) return rc;
    remat_tensor *a = NULL;
    rc = make_alias(&a, t);
    if (rc) return rm_err_prefix(rc, "remat_detach");
    return rm_hand_out(out, a);
}

const char *remat_node_name(const remat_node *node) {
    if (!node) return NULL;
    return node->owned_name ? node->owned_name : node->name;
}
int remat_node_num_next(const remat_node *node) { return node ? node->n_next : 0; }
remat_node *remat_node_next(const remat_node *node, int i) {
    if (!node || i < 0 || i >= node->n_next) return NULL;
    return node->next[i].node;
}

remat_status rm_check_inplace(const char *call, remat_tensor *t) {
    if (remat_is_grad_enabled() && t->requires_grad && !t->grad_fn) {
        char b[200];
        return rm_err(REMAT_ESTATE,
                      "%s: %s is a leaf that requires grad and is being used in an in-place "
                      "operation; wrap the update in remat_no_grad_begin()/restore",
                      call, rm_tensor_str(t, b, sizeof b));
    }
    return REMAT_OK;
}

/* ---- tensor hooks ------------------------------------------------------------------------ */
remat_status remat_register_hook(remat_tensor *t, remat_grad_hook_fn fn, void *user_data) {
    if (!t || !fn)
        return rm_err(REMAT_EINVAL, "remat_register_hook: tensor and fn must not be NULL");
    if (rm_dead(t)) return rm_released_err("remat_register_hook", "t", t);
    if (!t->requires_grad) {
        char b[200];
        return rm_err(REMAT_ENOGRAD,
                      "remat_register_hook: cannot register a hook on %s, which does not "
                      "require grad",
                      rm_tensor_str(t, b, sizeof b));
    }
    if (t->grad_fn) {
        rm_node_hook *h = calloc(1, sizeof *h);
        if (!h) return rm_err(REMAT_ENOMEM, "remat_register_hook: out of memory");
        h->output_nr = t->output_nr;
        h->fn = fn;
        h->user_data = user_data;
        /* append: hooks run in registration order */
        rm_node_hook **pp = &t->grad_fn->hooks;
        while (*pp) pp = &(*pp)->next;
        *pp = h;
        return REMAT_OK;
    }
    rm_hook *h = calloc(1, sizeof *h);
    if (!h) return rm_err(REMAT_ENOMEM, "remat_register_hook: out of memory");
    h->fn = fn;
    h->user_data = user_data;
    rm_hook **pp = &t->hooks;
    while (*pp) pp = &(*pp)->next;
    *pp = h;
    return REMAT_OK;
}

/* ---- gradient reduction for broadcasting ------------------------------------------------- */
/* *out = x summed over the dims of mask, keeping them (size 1): the sum
 * kernel remat_sum runs, on a contiguous x. */
static remat_status sum_keepdim(remat_tensor **out, remat_tensor *x, const bool *mask) {
    rm_kernel_fn fn;
    int rc = rm_kernel_find(RM_K_SUM, x->storage->device, x->dtype, "remat_sum", &fn);
    if (rc) return rc;
    int64_t shape[REMAT_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) shape[d] = mask[d] ? 1 : x->shape[d];
    remat_tensor *xc = NULL;
    rc = rm_contig(&xc, x);
    if (!rc) rc = rm_new_output(out, x->ndim, shape, x->dtype, x->storage->device);
    if (!rc) {
        rm_reduce_params p = {.scale = 1.0};
        memcpy(p.mask, mask, sizeof p.mask);
        rm_kargs k = {.in = {xc}, .out = {*out}, .params = &p};
        rc = rm_kernel_run(RM_K_SUM, "remat_sum", &k);
        if (rc) rm_release_p(out);
    }
    rm_release(xc);
    return rc;
}

/* *out = a view of contiguous s with shape (ndim, shape), the same numel. */
static remat_status view_as(remat_tensor **out, remat_tensor *s, int ndim, const int64_t *shape) {
    int64_t strides[REMAT_MAX_DIMS];
    rm_contiguous_strides(ndim, shape, strides);
    remat_tensor *v = rm_tensor_alloc(s->storage, s->offset, ndim, shape, strides, s->dtype);
    if (!v) return rm_err(REMAT_ENOMEM, "out of memory creating a view");
    v->is_view = true;
    *out = v;
    return REMAT_OK;
}

/* ---- the recorded sums of create_graph (graph.h) ------------------------------------------ */
static const rm_graph_ops *g_graph_ops;

void rm_set_graph_ops(const rm_graph_ops *ops) { g_graph_ops = ops; }

remat_status rm_graph_ops_get(const char *what, const rm_graph_ops **ops) {
    *ops = g_graph_ops;
    if (!*ops)
        return rm_err(REMAT_ESTATE,
                      "%s under create_graph: no differentiable ops are installed "
                      "(the library's ops layer is not linked)",
                      what);
    return REMAT_OK;
}

remat_status rm_sum_to(remat_tensor **out, remat_tensor *grad, int ndim, const int64_t *shape) {
    *out = NULL;
    if (grad->ndim == ndim && memcmp(grad->shape, shape, sizeof(int64_t) * (size_t)ndim) == 0) {
        *out = rm_retain(grad);
        return REMAT_OK;
    }
    bool mask[REMAT_MAX_DIMS] = {false};
    bool any = false;
    int lead = grad->ndim - ndim;
    for (int d = 0; d < grad->ndim; d++) {
        /* leading dims the target lacks, and dims it broadcast from 1 */
        if (d < lead || (shape[d - lead] == 1 && grad->shape[d] != 1)) mask[d] = any = true;
    }
    if (remat_is_grad_enabled() && grad->requires_grad) {
        const rm_graph_ops *ops;
        int rc = rm_graph_ops_get("summing a gradient down to its input's shape", &ops);
        return rc ? rc : ops->sum_to(out, grad, ndim, shape);
    }
    remat_tensor *s = NULL;
    int rc = any ? sum_keepdim(&s, grad, mask) : rm_contig(&s, grad);
    if (!rc) rc = view_as(out, s, ndim, shape);
    rm_release(s);
    return rc;
}

remat_status rm_grad_add(remat_tensor **out, remat_tensor *a, remat_tensor *b) {
    /* under create_graph the sum is recorded */
    if (remat_is_grad_enabled() && (a->requires_grad || b->requires_grad)) {
        const rm_graph_ops *ops;
        int rc = rm_graph_ops_get("adding gradients", &ops);
        return rc ? rc : ops->add(out, a, b);
    }
    int rc = rm_new_output(out, a->ndim, a->shape, a->dtype, a->storage->device);
    if (rc) return rc;
    const rm_ew_params p = {RM_EW_ADD, 0};
    rm_kargs k = {.in = {a, b}, .out = {*out}, .params = &p};
    rc = rm_kernel_run(RM_K_ELEMENTWISE, "remat_add", &k);
    if (rc) rm_release_p(out);
    return rc;
}

remat_status rm_grad_add_into(remat_tensor *acc, remat_tensor *g) {
    remat_tensor *b = NULL;
    int rc = REMAT_OK;
    if (remat_shares_storage(acc, g)) { /* read g from a copy: acc is written as it is read */
        rc = rm_copy_new(&b, g);
    } else {
        b = rm_retain(g);
    }
    if (!rc) {
        /* a + 1 * b: exactly a + b */
        const rm_ew_params p = {RM_EW_AXPY, 1.0};
        rm_kargs k = {.in = {acc, b}, .out = {acc}, .params = &p};
        rc = rm_kernel_run(RM_K_ELEMENTWISE, "remat_add_", &k);
    }
    if (!rc) rm_bump_version(acc);
    rm_release(b);
    return rc;
}
