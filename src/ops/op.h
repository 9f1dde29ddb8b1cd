/* src/ops/op.h — op descriptors and the one driver every op
 * runs through.
 *
 * An op is a descriptor (rm_op_desc): its name, arity, checks, output
 * shapes, save plan, backward and kernel. rm_dispatch runs it:
 *   1. the interception bracket (selective checkpointing, traces), then
 *      the argument checks the flags ask for and the op's own check,
 *   2. output shapes and dtype (infer), the kernel looked up for the first
 *      input's device type and dtype (REMAT_EUNSUPPORTED if none),
 *   3. when grad is needed: the graph node (with a copy of the params as
 *      its ctx) and, for RM_OPF_SAVE_EARLY ops, the saved inputs,
 *   4. the outputs (data-less in skip mode; or views of the first input)
 *      and the kernel, unless an operand has no data,
 *   5. the node's outputs and the saves made after the kernel (outputs,
 *      custom tensors such as relu's bit mask, late inputs), in slot order,
 *   6. the outputs handed to the caller (and the open scope).
 * Saving inputs before the kernel matters for early-stopped recomputation:
 * the save that fills a checkpoint's last placeholder turns skip mode on,
 * so the output is made without data and the kernel is not run.
 * docs/ops.md walks through adding an op. */
#ifndef REMAT_DISPATCH_H
#define REMAT_DISPATCH_H

#include <string.h>

#include "ops_internal.h"

#define RM_OP_MAX_IN RM_KERNEL_MAX_IN
#define RM_OP_MAX_OUT RM_KERNEL_MAX_OUT
#define RM_OP_MAX_SAVED 6

/* Flags of a descriptor. */
enum {
    RM_OPF_FLOAT = 1u << 0,       /* every input is f32, f64 or bf16 (rm_check_float_dtype) */
    RM_OPF_SAME_DTYPE = 1u << 1,  /* every input has in[0]'s dtype */
    RM_OPF_SAME_DEVICE = 1u << 2, /* every input is on in[0]'s device */
    RM_OPF_CONTIGUOUS = 1u << 3,  /* the kernel reads contiguous inputs */
    RM_OPF_SAVE_EARLY = 1u << 4,  /* saved inputs are saved before the kernel */
    /* in[0] is f32, f64 or bf16, the other inputs only non-NULL (the op's
     * check or RM_OPF_INDEX_IN1 says what they are: embedding's and
     * cross_entropy's i64 indices come second, and their old messages
     * checked in[0]'s dtype first) */
    RM_OPF_FLOAT_IN0 = 1u << 5,
    /* the op's check makes every argument check itself, in its own order
     * (the driver checks only `out`): masked_fill's mask, the in-place ops */
    RM_OPF_OWN_CHECKS = 1u << 6,
    /* out[0] is in[0], written in place (the in-place ops): nothing is
     * handed out (outs may be NULL); the kernel gets in[0] as it is (any
     * strides) and every other input as it is or, when it overlaps in[0]
     * in another view, as a copy (taken before the node and the early
     * saves); in[0]'s version is bumped after the kernel, and the saves
     * made after the kernel come before the node takes in[0] over
     * (rm_node_set_output rebases its history), so that a failing save
     * leaves that history intact. With RM_OPF_SAVE_EARLY, custom slots are
     * early too (mul_ saves a copy of its target before overwriting it). */
    RM_OPF_INPLACE = 1u << 7,
    /* the call gives the number of inputs (rm_dispatch_n: remat_cat's n
     * tensors): each is checked as the flags say, each gets an edge; the
     * kernel gets none in k.in (too few slots): the op's run hook reads
     * c->in */
    RM_OPF_VARIADIC = 1u << 8,
    /* in[1] is an index operand (embedding's indices, cross_entropy's
     * targets): i64, on in[0]'s device; its values are checked by the
     * kernel, on that device */
    RM_OPF_INDEX_IN1 = 1u << 9,
};

/* How autocast treats an op's floating inputs (remat/autocast.h,
 * docs/autocast.md; src/ops/autocast.c casts them before the op runs).
 * f64 inputs are never cast. */
typedef enum rm_autocast_kind {
    RM_AC_NONE = 0, /* runs in its inputs' dtype */
    RM_AC_LOWER,    /* autocast on: f32 inputs cast to bf16 (matmul, linear, attention) */
    RM_AC_F32,      /* autocast on: bf16 inputs cast to f32 (norms, softmax, losses, sums) */
    RM_AC_PROMOTE,  /* always: bf16 inputs mixed with wider ones cast to the widest */
} rm_autocast_kind;

/* What a save slot holds. */
typedef enum rm_save_kind {
    RM_SAVE_NONE = 0,
    RM_SAVE_INPUT,  /* in[index] */
    RM_SAVE_OUTPUT, /* out[index], after the kernel */
    RM_SAVE_CUSTOM, /* what desc->save_custom makes, after the kernel */
} rm_save_kind;

typedef struct rm_save_spec {
    unsigned char kind; /* rm_save_kind */
    unsigned char index;
    /* bit i: the gradient of input i reads this slot; the slot is saved
     * only if one of those inputs needs a gradient. 0: always saved. */
    unsigned char for_grads;
} rm_save_spec;

/* How an output comes to be. */
typedef enum rm_out_kind {
    RM_OUT_NEW = 0, /* allocated (data-less in skip mode); the kernel writes it */
    RM_OUT_VIEW,    /* a view of in[0]'s storage: shape, strides, offset below; no kernel */
    /* in[0] itself (contiguous of a contiguous tensor, dropout in eval mode):
     * when every handed-out output is, no node, no by-product, no kernel */
    RM_OUT_INPUT,
} rm_out_kind;

/* Shape and dtype of one output (on in[0]'s device), and how it is made
 * (infer leaves kind RM_OUT_NEW unless it sets another). */
typedef struct rm_out_spec {
    int ndim;
    int64_t shape[REMAT_MAX_DIMS];
    remat_dtype dtype;
    rm_out_kind kind;
    int64_t strides[REMAT_MAX_DIMS]; /* RM_OUT_VIEW */
    int64_t offset;                  /* RM_OUT_VIEW, elements */
    /* RM_OUT_NEW on `device` instead of in[0]'s (remat_to_device) */
    bool other_device;
    remat_device device;
    /* spec[0] only: the node's name when it is not the descriptor's
     * (reshape that has to copy: UnsafeViewBackward); NULL otherwise */
    const char *node_name;
} rm_out_spec;

typedef struct rm_op_desc rm_op_desc;

/* One running op, as the driver and the descriptor's functions see it. */
typedef struct rm_op_call {
    const rm_op_desc *op;
    remat_tensor *const *in; /* the caller's inputs */
    /* The op's parameter struct. It is the caller's: an op whose check
     * completes it (normalised dims, a reduction mask, dropout's RNG draw,
     * which must happen in skip mode too) is handed a writable one by its
     * public function, and only that op's own functions write it. */
    const void *params;
    remat_node *node;   /* NULL when no graph is recorded */
    rm_kargs k;         /* the kernel's operands: (contiguous) inputs, outputs */
    int n_in, n_out;    /* this call's: the descriptor's, or a variadic op's */
    remat_tensor **out; /* the outputs: k.out, or n_out of them (variadic outputs) */
} rm_op_call;

struct rm_op_desc {
    const char *name;      /* public name, as policies, traces and reports see it */
    const char *node_name; /* name of the backward node */
    /* Arity; a variadic op's least (cat: n_in 1; split: n_out 1). */
    unsigned char n_in, n_out, n_saved;
    /* Bit i: in[i] gets no edge in the node (0: every input does).
     * embedding's indices, cross_entropy's targets, where's condition and
     * masked_fill's mask are not differentiated; the node's inputs (and the
     * backward's gin[]) are the other inputs, in order. */
    unsigned char no_grad_in;
    /* The input whose dtype selects the kernel and is the default output
     * dtype (0 unless set): where(cond, a, b) computes in a's dtype. */
    unsigned char dtype_in;
    /* Outputs handed to the caller: the first n_ret (0: all n_out). The
     * others are by-products the kernel writes for the backward (layer_norm's
     * mean and rstd, cross_entropy's logsumexp, attention's row log-sum-exp): saved, then released. */
    unsigned char n_ret;
    /* Outputs the node differentiates: the first n_grad_out (0: all the
     * handed-out ones). max's indices are handed out but not differentiable. */
    unsigned char n_grad_out;
    /* Bit i: out[i] is made only when a node is recorded (the kernel gets
     * NULL otherwise): dropout's keep bits, which only the backward reads. */
    unsigned char grad_only_out;
    /* Bit i: in[i] may be NULL (layer_norm's weight and bias, linear's bias): not checked,
     * and NULL among the kernel's operands. */
    unsigned char optional_in;
    unsigned flags;         /* RM_OPF_* */
    unsigned char autocast; /* rm_autocast_kind */
    /* Bit i: under RM_AC_LOWER on the cpu an f32 in[i] is not cast by the driver; the kernel
     * rounds it into a scratch copy (linear's weight: the node saves the f32 parameter, not a
     * bf16 copy of it, and the weight's gradient comes out f32, as the parameter's).
     * Under RM_AC_PROMOTE on the cpu a bf16 in[i] next to f32 is not cast either: the f32
     * kernel widens it chunk by chunk (add's residual stream: no whole f32 copy of the bf16
     * operand), and the op's backward rounds that input's gradient to bf16 itself. */
    unsigned char autocast_keep;
    /* Argument names in messages ("a must be a float tensor"); NULL: a, b, c, ... */
    const char *const *arg_names;
    rm_kernel_id kernel;
    /* A function the driver calls instead of looking `kernel` up, for work
     * every device type can do through its registered functions (the
     * copies: rm_device_copy). NULL: the table's kernel. */
    rm_kernel_fn direct;
    size_t params_size; /* bytes of *params, copied into the node as its ctx */
    /* Records in the node's ctx (the params' copy) what the backward needs
     * from the checked inputs, e.g. their shapes (NULL: nothing). */
    void (*fill_ctx)(const rm_op_call *c, void *ctx);
    /* Extra argument checks after the flags' (NULL: none). Sets the error. */
    remat_status (*check)(const rm_op_call *c);
    /* Output shapes and dtypes, and views (NULL: one new output shaped like
     * in[0]). Ops whose outputs are all views or inputs need no kernel. */
    remat_status (*infer)(const rm_op_call *c, rm_out_spec *out);
    /* Makes output i from its spec on `device` in a layout of the op's
     * choosing, skip-mode aware as rm_new_output (NULL: rm_new_output,
     * contiguous). Attention stores a 4-D (B, H, T, D) output as (B, T, H, D). */
    remat_status (*new_output)(const rm_op_call *c, int i, const rm_out_spec *s,
                               remat_device device, remat_tensor **out);
    rm_save_spec saves[RM_OP_MAX_SAVED];
    /* Variadic outputs (remat_split's pieces): the number this call makes,
     * asked after the checks (which check the caller's array: the driver
     * neither checks nor clears `outs` then). NULL: n_out. */
    int (*n_outputs)(const rm_op_call *c);
    /* Runs the looked-up kernel itself, in place of one call on c->k
     * (remat_cat: once per input, into its window of the output). Called
     * when the kernel would be. NULL: kernel(&c->k). */
    remat_status (*run)(rm_op_call *c, rm_kernel_fn kernel);
    /* Bytes per input after the params in the node's ctx, for fill_ctx
     * (remat_cat: each input's extent along dim). */
    unsigned char ctx_per_in;
    /* Makes the tensor of an RM_SAVE_CUSTOM slot (new reference in *out). */
    remat_status (*save_custom)(rm_op_call *c, int slot, remat_tensor **out);
    /* Completes the outputs after the kernel, before the node takes them
     * (remat_tag names its view). NULL: nothing. */
    remat_status (*finish)(rm_op_call *c);
    /* The tag selective-checkpoint policies see (remat_tag's name; NULL:
     * none). NULL: no tag. */
    const char *(*tag)(const void *params);
    rm_backward_fn backward;
    /* The differentiable backward create_graph runs (see remat_node's
     * backward_diff, src/autograd/graph.h): written with public ops, or with
     * registered ops that have a backward of their own, so that a gradient
     * of it can be taken again. It may be `backward` itself when that is
     * already made of public ops. NULL: the op refuses create_graph. */
    rm_backward_fn backward_diff;
};

/* A descriptor's initializer: the op's public name and its node's name, then the
 * fields it sets, designated; the others are 0/NULL (their defaults above).
 *   const rm_op_desc rm_op_neg = RM_OP_DESC("remat_neg", "NegBackward", .n_in = 1, ...);
 * Written as one macro call, a descriptor is a compact block that clang-format fills
 * line by line; a braced list of designated fields it sets one per line, so every
 * descriptor would read as the same twenty-line column. */
#define RM_OP_DESC(name_, node_name_, ...)                                                         \
    { .name = (name_), .node_name = (node_name_), __VA_ARGS__ }

/* Runs op on in[0..n_in) with params, writing its n_ret outputs to outs.
 * `site` is the public function's caller (RM_OP_SITE() there). On failure
 * every outs[i] is NULL and the inputs are untouched. */
remat_status rm_dispatch(const rm_op_desc *op, remat_tensor **outs, remat_tensor *const *in,
                         const void *params, void *site);
/* rm_dispatch with n_in inputs (RM_OPF_VARIADIC; otherwise op->n_in) and,
 * for a variadic-output op, as many outputs as its n_outputs says (outs
 * has room for the count its check allows). *n_out (NULL: not wanted) is
 * the number of outputs handed out, 0 on failure. */
remat_status rm_dispatch_n(const rm_op_desc *op, remat_tensor **outs, int *n_out, int n_in,
                           remat_tensor *const *in, const void *params, void *site);

/* The n_in (<= RM_OP_MAX_IN) inputs op runs on under the thread's autocast state: use[i] is in[i]
 * or its cast, cast[i] the new reference to the cast (NULL: none; the
 * caller releases them). The casts are differentiable ops of their own. */
remat_status rm_autocast_inputs(const rm_op_desc *op, int n_in, remat_tensor *const *in,
                                remat_tensor **use, remat_tensor **cast);

/* Two inputs' shapes, kept in a node's ctx by a binary op whose backward
 * sums the gradients back down to them (broadcasting) or allocates them. */
typedef struct rm_two_shapes {
    int nda, ndb;
    int64_t sa[REMAT_MAX_DIMS], sb[REMAT_MAX_DIMS];
} rm_two_shapes;
static inline void rm_two_shapes_of(rm_two_shapes *s, const remat_tensor *a,
                                    const remat_tensor *b) {
    s->nda = a->ndim;
    s->ndb = b->ndim;
    memcpy(s->sa, a->shape, sizeof s->sa);
    memcpy(s->sb, b->shape, sizeof s->sb);
}
/* g summed down to input i's shape (0: a, 1: b): rm_sum_to. */
static inline remat_status rm_two_shapes_sum_to(remat_tensor **out, remat_tensor *g,
                                                const rm_two_shapes *s, int i) {
    return i == 0 ? rm_sum_to(out, g, s->nda, s->sa) : rm_sum_to(out, g, s->ndb, s->sb);
}

/* For a backward: saved slot `slot` of node, contiguous, as a new
 * reference in *out. A slot saved as NULL is REMAT_ESTATE "<node name>:
 * <missing>" unless missing is NULL (then *out is NULL: an optional
 * input). */
remat_status rm_saved_contig(remat_node *node, int slot, const char *missing, remat_tensor **out);

/* For a backward whose input gradient is one kernel: *gin = a new tensor
 * of (ndim, shape) (shape NULL: g's shape), g's dtype and device, that
 * kernel kid (named in errors by node) writes from in = {g, s} (s may be
 * NULL) with params. g and s stay the caller's; on failure *gin is
 * untouched. */
remat_status rm_grad_kernel(const remat_node *node, rm_kernel_id kid, remat_tensor *g,
                            remat_tensor *s, int ndim, const int64_t *shape, const void *params,
                            remat_tensor **gin);
/* The whole backward of an op whose input 0's gradient is one kernel,
 * when input 0 wants one: rm_grad_kernel on {gout[0] made contiguous,
 * saved slot `slot` (rm_saved_contig with `missing`; slot < 0: none)}. */
remat_status rm_backward_kernel(remat_node *node, remat_tensor *const *gout, remat_tensor **gin,
                                rm_kernel_id kid, int slot, const char *missing, int ndim,
                                const int64_t *shape, const void *params);

/* ---- differentiable backwards (src/ops/double_backward.c) ------------------------------
 * For an op's backward_diff. An adjoint maps a gradient gg of the op's
 * input gradient back to a gradient of g (new reference in *out); it must
 * be differentiable itself. */
typedef remat_status (*rm_adjoint_fn)(remat_node *node, remat_tensor *gg, remat_tensor **out);
/* The recorded add, sum-to-shape and copy autograd runs under create_graph
 * (src/autograd/graph.h), on remat_add, remat_sum + remat_reshape and
 * remat_mul_scalar; the driver installs them when the library loads. */
extern const rm_graph_ops rm_ops_graph_ops;
/* gin[0] = node->backward's gradient of input 0 (linear in gout[0] alone),
 * recorded as a custom function whose backward is `adjoint`. */
remat_status rm_backward_linear(remat_node *node, remat_tensor *const *gout, remat_tensor **gin,
                                rm_adjoint_fn adjoint);
/* The adjoint of a self-adjoint backward (an elementwise mask): itself. */
remat_status rm_adjoint_self(remat_node *node, remat_tensor *gg, remat_tensor **out);
/* Rebuilds the op's output from its inputs with public ops (xs[i]: input i
 * as saved, NULL where not saved or absent): new reference in *y. */
typedef remat_status (*rm_recompose_fn)(remat_node *node, remat_tensor *const *xs,
                                        remat_tensor **y);
/* gin[i] for every input i that needs a gradient: a nested create_graph
 * grad of forward(xs) with gout[0] as its output gradient. slots[i]: the
 * saved slot holding input i (-1: none). */
remat_status rm_backward_recompose(remat_node *node, const int *slots, rm_recompose_fn forward,
                                   remat_tensor *const *gout, remat_tensor **gin);

#endif /* REMAT_DISPATCH_H */
