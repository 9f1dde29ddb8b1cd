/* src/ops/select.c — selection: masked_fill and where.
 *
 * Both are y = cond ? A : B over a broadcast shape, where A and B are each
 * a tensor or a scalar; cond may be i64, f32 or f64 (non-zero = true, so a
 * NaN counts as true). Their backward passes are the same selection applied
 * to the output gradient with 0 in place of the other branch, reduced to
 * each input's shape with rm_sum_to. */
#include <stdlib.h>
#include <string.h>

#include "../internal.h"

#ifdef _OPENMP
#include <omp.h>
#endif

/* Operand slots of the iterator: 0 = y, 1 = cond, 2 = A, 3 = B. A missing
 * A/B tensor reads a local scalar through stride 0. Threads split the flat
 * range; each walks the outer dims with rm_iter and runs the (coalesced)
 * last dim as the inner loop. The inner loop has unit-stride versions (the
 * strides are fixed for the whole call, so the branch is predictable) that
 * the compiler vectorises: y = c ? A : b (masked_fill and its backward),
 * y = c ? a : B (where's backward), y = c ? a : b; anything else runs the
 * strided loop. */
#define SEL_LOOP(T, CT)                                                                       \
    do {                                                                                      \
        T *py = rm_ptr(y);                                                                    \
        const CT *pc = (const CT *)cbase;                                                     \
        T sa = (T)va, sb = (T)vb;                                                             \
        const T *pa = a ? (const T *)rm_ptr(a) : &sa;                                         \
        const T *pb = b ? (const T *)rm_ptr(b) : &sb;                                         \
        _Pragma("omp parallel if (n > 32768)")                                                \
        {                                                                                     \
            int nt = 1, id = 0;                                                               \
            sel_omp_ids(&nt, &id);                                                            \
            int64_t lo = n * id / nt, hi = n * (id + 1) / nt;                                 \
            rm_iter it;                                                                       \
            rm_iter_init(&it, nd - 1, base.shape, 4);                                         \
            for (int k = 0; k < 4; k++)                                                       \
                memcpy(it.strides[k], base.strides[k], sizeof(int64_t) * (size_t)(nd - 1));  \
            rm_iter_seek(&it, lo / inner);                                                    \
            int64_t col = lo % inner, pos = lo;                                               \
            while (pos < hi) {                                                                \
                int64_t len = inner - col < hi - pos ? inner - col : hi - pos;                \
                T *restrict yy = py + it.off[0] + col * s0;                                   \
                const CT *restrict cc = pc + it.off[1] + col * s1;                            \
                const T *restrict aa = pa + it.off[2] + col * s2;                             \
                const T *restrict bb = pb + it.off[3] + col * s3;                             \
                if (kind == SEL_SCALAR_A) {                                                   \
                    const T av = aa[0];                                                       \
                    for (int64_t i = 0; i < len; i++) yy[i] = cc[i] != 0 ? av : bb[i];       \
                } else if (kind == SEL_SCALAR_B) {                                            \
                    const T bv = bb[0];                                                       \
                    for (int64_t i = 0; i < len; i++) yy[i] = cc[i] != 0 ? aa[i] : bv;       \
                } else if (kind == SEL_UNIT) {                                                \
                    for (int64_t i = 0; i < len; i++) yy[i] = cc[i] != 0 ? aa[i] : bb[i];    \
                } else {                                                                      \
                    for (int64_t i = 0; i < len; i++)                                         \
                        yy[i * s0] = cc[i * s1] != 0 ? aa[i * s2] : bb[i * s3];               \
                }                                                                             \
                pos += len;                                                                   \
                col = 0;                                                                      \
                rm_iter_next(&it);                                                            \
            }                                                                                 \
        }                                                                                     \
    } while (0)

enum { SEL_STRIDED, SEL_SCALAR_A, SEL_SCALAR_B, SEL_UNIT };

static void sel_omp_ids(int *nt, int *id) {
#ifdef _OPENMP
    *nt = omp_get_num_threads();
    *id = omp_get_thread_num();
#else
    *nt = 1;
    *id = 0;
#endif
}

/* Drops size-1 dims and merges adjacent dims that are contiguous with each
 * other in every operand, so that the inner loop is as long as possible
 * (a (B, H, T, T) fill with a (T, T) mask runs T*T-long inner loops). */
static void iter_coalesce(rm_iter *it) {
    int nd = 0;
    for (int d = 0; d < it->ndim; d++) {
        if (it->shape[d] == 1) continue;
        if (nd > 0) {
            bool merge = true;
            for (int k = 0; k < it->n_ops && merge; k++)
                merge = it->strides[k][nd - 1] == it->strides[k][d] * it->shape[d];
            if (merge) {
                it->shape[nd - 1] *= it->shape[d];
                for (int k = 0; k < it->n_ops; k++) it->strides[k][nd - 1] = it->strides[k][d];
                continue;
            }
        }
        it->shape[nd] = it->shape[d];
        for (int k = 0; k < it->n_ops; k++) it->strides[k][nd] = it->strides[k][d];
        nd++;
    }
    if (nd == 0) { /* one element */
        it->shape[0] = 1;
        for (int k = 0; k < it->n_ops; k++) it->strides[k][0] = 0;
        nd = 1;
    }
    it->ndim = nd;
}

/* A broadcast cond (a (T, T) mask under (B, H, T, T) scores) is read many
 * times: it is first packed into a contiguous byte mask (1 = true), 8x
 * smaller than an i64 mask, so that it stays in cache and the selection
 * loop compares bytes. Returns NULL (use cond as it is) when cond is not
 * reused at least twice or on allocation failure. */
static uint8_t *pack_cond(const remat_tensor *cond, int64_t n) {
    int64_t nc = rm_shape_numel(cond->ndim, cond->shape);
    if (nc == 0 || nc * 2 > n) return NULL;
    uint8_t *m = malloc((size_t)nc);
    if (!m) return NULL;
    rm_iter it;
    rm_iter_init(&it, cond->ndim, cond->shape, 1);
    memcpy(it.strides[0], cond->strides, sizeof(int64_t) * (size_t)cond->ndim);
    const void *p = rm_ptr(cond);
#define PACK(CT)                                                                              \
    do {                                                                                      \
        const CT *pc = p;                                                                     \
        for (int64_t i = 0; i < nc; i++) {                                                    \
            m[i] = pc[it.off[0]] != 0;                                                        \
            rm_iter_next(&it);                                                                \
        }                                                                                     \
    } while (0)
    if (cond->dtype == REMAT_I64) PACK(int64_t);
    else if (cond->dtype == REMAT_F32) PACK(float);
    else PACK(double);
#undef PACK
    return m;
}

/* y = cond ? (a or va) : (b or vb), everything broadcast to y's
 * shape (y contiguous, float). No autograd; meta tensors → no-op. */
static void sel_run(remat_tensor *y, remat_tensor *cond, remat_tensor *a, double va,
                    remat_tensor *b, double vb);

/* sel_run for a bf16 y: on f32 copies, rounded back (bf16 values are exact in
 * f32, so only the final rounding is bf16's). Out of memory leaves y unwritten. */
static void sel_run_bf16(remat_tensor *y, remat_tensor *cond, remat_tensor *a, double va,
                         remat_tensor *b, double vb) {
    remat_tensor *t[3] = {y, a, b}, *f[3] = {NULL, NULL, NULL};
    bool ok = true;
    for (int i = 0; i < 3 && ok; i++) {
        if (!t[i]) continue;
        ok = rm_new_output(&f[i], t[i]->ndim, t[i]->shape, REMAT_F32, t[i]->storage->device) == 0 &&
             (i == 0 || rm_copy_into(f[i], t[i]) == 0);
    }
    if (ok) {
        sel_run(f[0], cond, f[1], va, f[2], vb);
        rm_copy_into(y, f[0]);
    }
    for (int i = 0; i < 3; i++) remat_release(f[i]);
}

static void sel_run(remat_tensor *y, remat_tensor *cond, remat_tensor *a, double va,
                    remat_tensor *b, double vb) {
    if (!rm_ptr(y) || !rm_ptr(cond) || (a && !rm_ptr(a)) || (b && !rm_ptr(b))) return;
    if (y->dtype == REMAT_BF16) {
        sel_run_bf16(y, cond, a, va, b, vb);
        return;
    }
    int64_t n = rm_shape_numel(y->ndim, y->shape);
    if (n == 0) return;
    uint8_t *packed = pack_cond(cond, n);
    rm_iter base;
    rm_iter_init(&base, y->ndim, y->shape, 4);
    memcpy(base.strides[0], y->strides, sizeof(int64_t) * (size_t)y->ndim);
    if (packed) { /* the packed mask is cond made contiguous */
        int64_t cs[REMAT_MAX_DIMS];
        rm_contiguous_strides(cond->ndim, cond->shape, cs);
        for (int i = 0; i < y->ndim; i++) {
            int j = cond->ndim - y->ndim + i;
            base.strides[1][i] =
                j >= 0 && cond->shape[j] == y->shape[i] && cond->shape[j] != 1 ? cs[j] : 0;
        }
    } else {
        rm_broadcast_strides(cond, y->ndim, y->shape, base.strides[1]);
    }
    if (a) rm_broadcast_strides(a, y->ndim, y->shape, base.strides[2]);
    if (b) rm_broadcast_strides(b, y->ndim, y->shape, base.strides[3]);
    iter_coalesce(&base);
    int nd = base.ndim;
    int64_t inner = base.shape[nd - 1];
    int64_t s0 = base.strides[0][nd - 1], s1 = base.strides[1][nd - 1],
            s2 = base.strides[2][nd - 1], s3 = base.strides[3][nd - 1];
    int kind = SEL_STRIDED;
    if (s0 == 1 && s1 == 1) {
        if (s2 == 0 && s3 == 1) kind = SEL_SCALAR_A;
        else if (s2 == 1 && s3 == 0) kind = SEL_SCALAR_B;
        else if (s2 == 1 && s3 == 1) kind = SEL_UNIT;
    }
    const void *cbase = packed ? (const void *)packed : rm_ptr(cond);
    bool f32 = y->dtype == REMAT_F32;
    switch (packed ? REMAT_U8 : cond->dtype) {
    case REMAT_U8:
        if (f32) SEL_LOOP(float, uint8_t); else SEL_LOOP(double, uint8_t);
        break;
    case REMAT_I64:
        if (f32) SEL_LOOP(float, int64_t); else SEL_LOOP(double, int64_t);
        break;
    case REMAT_F32:
        if (f32) SEL_LOOP(float, float); else SEL_LOOP(double, float);
        break;
    case REMAT_F64:
        if (f32) SEL_LOOP(float, double); else SEL_LOOP(double, double);
        break;
    default: /* storage-only dtypes never get here (rejected by the checks) */
        break;
    }
    free(packed);
}

/* New tensor of g's shape: cond ? g : 0 (g_when_true) or cond ? 0 : g. */
static int masked_grad(remat_tensor **out, remat_tensor *g, remat_tensor *cond, bool g_when_true) {
    int rc = rm_new_output(out, g->ndim, g->shape, g->dtype, g->storage->device);
    if (rc) return rc;
    if (g_when_true) sel_run(*out, cond, g, 0, NULL, 0);
    else sel_run(*out, cond, NULL, 0, g, 0);
    return REMAT_OK;
}

static int check_cond(const char *call, const char *arg, const remat_tensor *c) {
    int rc = rm_check_tensor(call, arg, c);
    if (!rc) rc = rm_check_host(call, c);
    if (rc) return rc;
    if (c->dtype != REMAT_I64 && c->dtype != REMAT_F32 && c->dtype != REMAT_F64) {
        char b[200];
        return rm_err(REMAT_EDTYPE, "%s: '%s' must be i64, f32 or f64, got %s", call, arg,
                      rm_tensor_str(c, b, sizeof b));
    }
    return REMAT_OK;
}

/* ---- masked_fill ------------------------------------------------------------------- */
/* Saved slot 0: the mask. da = mask ? 0 : g. */
static int masked_fill_backward(remat_node *node, remat_tensor *const *gout, remat_tensor **gin) {
    remat_tensor *mask = NULL;
    int rc = rm_node_unpack(node, 0, &mask);
    if (rc) return rc;
    if (node->next[0].node) rc = masked_grad(&gin[0], gout[0], mask, false);
    remat_release(mask);
    return rc;
}

static int masked_fill_impl(remat_tensor **out, remat_tensor *a, remat_tensor *mask, double value) {
    const char *call = "remat_masked_fill";
    rm_op_enter(call);
    if (!out) return rm_err(REMAT_EINVAL, "%s: out must not be NULL", call);
    *out = NULL;
    int rc = rm_check_float(call, "a", a);
    if (!rc) rc = check_cond(call, "mask", mask);
    if (!rc) rc = rm_check_same_device(call, a, mask);
    if (rc) return rc;
    int nd;
    int64_t shape[REMAT_MAX_DIMS];
    rc = rm_broadcast_shape(call, a->ndim, a->shape, mask->ndim, mask->shape, &nd, shape);
    if (rc) return rc;
    if (nd != a->ndim || memcmp(shape, a->shape, sizeof(int64_t) * (size_t)nd)) {
        char b1[200], b2[200];
        return rm_err(REMAT_ESHAPE, "%s: mask %s cannot be broadcast to the shape of a %s", call,
                      rm_tensor_str(mask, b1, sizeof b1), rm_tensor_str(a, b2, sizeof b2));
    }
    remat_tensor *y = NULL;
    rc = rm_new_output(&y, a->ndim, a->shape, a->dtype, a->storage->device);
    if (rc) return rm_err_prefix(rc, call);
    sel_run(y, mask, NULL, value, a, 0);
    if (rm_needs_grad(1, &a)) {
        remat_node *node;
        rc = rm_node_new(&node, "MaskedFillBackward", masked_fill_backward, 1, &a, 1, 1);
        if (rc == REMAT_OK) {
            rm_node_set_output(node, 0, y);
            rc = rm_op_save(node, 0, mask);
            rm_node_release(node);
        }
        if (rc) {
            remat_release(y);
            return rm_err_prefix(rc, call);
        }
    }
    return rm_hand_out(out, y);
}

/* ---- where ---------------------------------------------------------------------------- */
typedef struct wctx {
    int nda, ndb;
    int64_t sa[REMAT_MAX_DIMS], sb[REMAT_MAX_DIMS];
} wctx;

/* Saved slot 0: cond. da = sum_to(cond ? g : 0), db = sum_to(cond ? 0 : g). */
static int where_backward(remat_node *node, remat_tensor *const *gout, remat_tensor **gin) {
    wctx *cx = node->ctx;
    remat_tensor *cond = NULL, *t = NULL;
    int rc = rm_node_unpack(node, 0, &cond);
    if (rc) return rc;
    for (int i = 0; i < 2 && !rc; i++) {
        if (!node->next[i].node) continue;
        rc = masked_grad(&t, gout[0], cond, i == 0);
        if (!rc) rc = rm_sum_to(&gin[i], t, i == 0 ? cx->nda : cx->ndb, i == 0 ? cx->sa : cx->sb);
        remat_release_p(&t);
    }
    remat_release(cond);
    return rc;
}

static int where_impl(remat_tensor **out, remat_tensor *cond, remat_tensor *a, remat_tensor *b) {
    const char *call = "remat_where";
    rm_op_enter(call);
    if (!out) return rm_err(REMAT_EINVAL, "%s: out must not be NULL", call);
    *out = NULL;
    int rc = check_cond(call, "cond", cond);
    if (!rc) rc = rm_check_float(call, "a", a);
    if (!rc) rc = rm_check_float(call, "b", b);
    if (!rc) rc = rm_check_same_dtype(call, a, b);
    if (!rc) rc = rm_check_same_device(call, a, b);
    if (!rc) rc = rm_check_same_device(call, cond, a);
    if (rc) return rc;
    int nd1, nd;
    int64_t s1[REMAT_MAX_DIMS], shape[REMAT_MAX_DIMS];
    rc = rm_broadcast_shape(call, cond->ndim, cond->shape, a->ndim, a->shape, &nd1, s1);
    if (!rc) rc = rm_broadcast_shape(call, nd1, s1, b->ndim, b->shape, &nd, shape);
    if (rc) return rc;
    remat_tensor *y = NULL;
    rc = rm_new_output(&y, nd, shape, a->dtype, a->storage->device);
    if (rc) return rm_err_prefix(rc, call);
    sel_run(y, cond, a, 0, b, 0);
    remat_tensor *in[2] = {a, b};
    if (rm_needs_grad(2, in)) {
        remat_node *node;
        rc = rm_node_new(&node, "WhereBackward", where_backward, 2, in, 1, 1);
        if (rc == REMAT_OK) {
            wctx *cx = malloc(sizeof *cx);
            if (!cx) rc = rm_err(REMAT_ENOMEM, "out of memory");
            else {
                cx->nda = a->ndim;
                cx->ndb = b->ndim;
                memcpy(cx->sa, a->shape, sizeof cx->sa);
                memcpy(cx->sb, b->shape, sizeof cx->sb);
                rm_node_set_ctx(node, cx, NULL);
                rm_node_set_output(node, 0, y);
                rc = rm_op_save(node, 0, cond);
            }
            rm_node_release(node);
        }
        if (rc) {
            remat_release(y);
            return rm_err_prefix(rc, call);
        }
    }
    return rm_hand_out(out, y);
}

/* ---- public entries: interception brackets (src/dispatch/intercept.c) ---------------------- */
int remat_masked_fill(remat_tensor **out, remat_tensor *a, remat_tensor *mask, double value) {
    remat_tensor *in_[] = {a, mask};
    RM_OP_RUN1("remat_masked_fill", out, 2, in_, NULL, masked_fill_impl(out, a, mask, value));
}

int remat_where(remat_tensor **out, remat_tensor *cond, remat_tensor *a, remat_tensor *b) {
    remat_tensor *in_[] = {cond, a, b};
    RM_OP_RUN1("remat_where", out, 3, in_, NULL, where_impl(out, cond, a, b));
}
