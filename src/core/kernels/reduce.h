/* src/core/kernels/reduce.h — kernels of the reduce family (src/ops/reduce.c, loss.c):
 * ids (RM_KERNELS_REDUCE, each with its operands in a comment) and their
 * parameter structs. Operands are contiguous. */
#ifndef REMAT_KERNELS_REDUCE_H
#define REMAT_KERNELS_REDUCE_H
#define RM_KERNELS_REDUCE(X)                                                                       \
    /* y = sum (mean: / count) of x over the dims of mask. in: x; out: y. rm_reduce_params */      \
    X(SUM, "sum")                                                                                  \
    /* dx = g * scale broadcast over the dims of mask. in: g (reduced shape); out: dx        \
     * (input shape). rm_reduce_params */     \
    X(SUM_BWD, "sum backward")                                                                     \
    /* y, idx = max and first argmax of x over dim (NaN is the max). in: x; out: y, idx      \
     * (i64). rm_dim_params */     \
    X(MAX, "max")                                                                                  \
    /* dx = 0 but dx[.., idx, ..] = g. in: g, idx; out: dx (input shape). rm_dim_params */         \
    X(MAX_BWD, "max backward")                                                                     \
    /* y (P, D) = w[idx[p], :]; fails with REMAT_EINVAL on an index out of range. in: w      \
     * (num, D), idx (i64, PyTorch elements); out: y */     \
    X(EMBEDDING, "embedding")                                                                      \
    /* dw (num, D) = sum over p with idx[p] = r of g[p, :]. in: g (P, D), idx; out: dw */          \
    X(EMBEDDING_BWD, "embedding backward")                                                         \
    /* loss = mean over rows n with t[n] != ignore of logsumexp(x[n]) - x[n, t[n]]; lse[n]   \
     * = logsumexp(x[n]); REMAT_EINVAL on a target out of range. in: x (N, C), t (i64, N);   \
     * out: loss (0-dim), lse (N). rm_ce_params */     \
    X(CROSS_ENTROPY, "cross_entropy")                                                              \
    /* dx = g / count * (softmax(x) - onehot(t)), 0 on ignored rows. in: x, t, lse, g        \
     * (0-dim); out: dx. rm_ce_params */     \
    X(CROSS_ENTROPY_BWD, "cross_entropy backward")                                                 \
    /* y = mean((a - b)^2). in: a, b; out: y (0-dim) */                                            \
    X(MSE, "mse_loss")                                                                             \
    /* da = 2 g / n * (a - b), db = -da. in: a, b, g (0-dim); out: da, db (either NULL; da   \
     * may be a itself) */     \
    X(MSE_BWD, "mse_loss backward")
/* SUM / SUM_BWD. The mask is over the input's dims (dx's for SUM_BWD). */
typedef struct rm_reduce_params {
    bool mask[REMAT_MAX_DIMS]; /* the reduced dims */
    bool mean;                 /* SUM: divide by the count of reduced elements */
    double scale;              /* SUM_BWD: 1 (sum) or 1 / count (mean) */
} rm_reduce_params;
/* MAX / MAX_BWD: the reduced dim, normalised (0 for a 0-dim tensor). */
typedef struct rm_dim_params {
    int dim;
} rm_dim_params;
/* CROSS_ENTROPY / CROSS_ENTROPY_BWD */
typedef struct rm_ce_params {
    int64_t ignore_index;
} rm_ce_params;
#endif /* REMAT_KERNELS_REDUCE_H */
