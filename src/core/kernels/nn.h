/* src/core/kernels/nn.h — kernels of the nn family (src/ops/nn.c):
 * ids (RM_KERNELS_NN, each with its operands in a comment) and their
 * parameter structs. Operands are contiguous. */
#ifndef REMAT_KERNELS_NN_H
#define REMAT_KERNELS_NN_H
#define RM_KERNELS_NN(X)                                                                           \
    /* y = softmax or log_softmax of x over dim. in: x; out: y. rm_softmax_params */               \
    X(SOFTMAX, "softmax")                                                                          \
    /* dx from g and the output y. in: g, y; out: dx. rm_softmax_params */                         \
    X(SOFTMAX_BWD, "softmax backward")                                                             \
    /* y = (x - mean) * rstd * w + b over the last n_norm dims. in: x, w, b (w, b NULL if    \
     * absent); out: y, mean, rstd (one per row). rm_layer_norm_params */     \
    X(LAYER_NORM, "layer_norm")                                                                    \
    /* in: g, x, w (or NULL), mean, rstd, gres (or NULL: added to dx, the fused residual     \
     * add's sum gradient, after dx is rounded); out: dx, dw, db (each NULL if not wanted).    \
     * rm_layer_norm_params */     \
    X(LAYER_NORM_BWD, "layer_norm backward")                                                       \
    /* sum = x + r, y = layer_norm(sum) as LAYER_NORM (the residual add before a norm). in: x,  \
     * r (x's dtype, or bf16 with an f32 x: widened), w, b (or NULL); out: sum, y, mean, rstd.  \
     * rm_layer_norm_params */  \
    X(ADD_LAYER_NORM, "add + layer_norm")                                                          \
    /* y = x * (kept ? 1 / (1 - p) : 0), kept from Philox (key, counter); bits: bit i of     \
     * byte i / 8 = element i kept. in: x; out: y, bits (u8, ceil(n / 8); NULL: not          \
     * written). rm_dropout_params */     \
    X(DROPOUT, "dropout")                                                                          \
    /* dx = g * (kept ? 1 / (1 - p) : 0). in: g, bits; out: dx. rm_dropout_params */               \
    X(DROPOUT_BWD, "dropout backward")                                                             \
    /* y = x * rstd * w over the last n_norm dims, rstd = 1 / sqrt(mean(x²) + eps). in: x, w   \
     * (NULL if absent); out: y, rstd (one per row; f32 for bf16 x). rm_layer_norm_params */  \
    X(RMS_NORM, "rms_norm")                                                                        \
    /* in: g, x, w (or NULL), rstd; out: dx, dw (each NULL if not wanted).                     \
     * rm_layer_norm_params */   \
    X(RMS_NORM_BWD, "rms_norm backward")                                                           \
    /* y = x rotated pair by pair (i, i + D/2) by pos[t] * theta^(-2i/D) (the opposite angle    \
     * when inverse: the backward). in: x (..., T, D), positions (T) i64 or NULL (0..T-1);      \
     * out: y. rm_rope_params */  \
    X(ROPE, "rope")
typedef struct rm_softmax_params {
    int dim;  /* normalised */
    bool log; /* log_softmax */
} rm_softmax_params;
typedef struct rm_layer_norm_params {
    int n_norm; /* the normalised (last) dims */
    double eps;
} rm_layer_norm_params;
typedef struct rm_rope_params {
    double theta; /* the base of the frequencies */
    bool inverse; /* rotate by the opposite angle (the gradient) */
} rm_rope_params;
typedef struct rm_dropout_params {
    double p;
    uint32_t key[2]; /* the Philox key and first block drawn for this call */
    uint64_t counter;
} rm_dropout_params;
#endif /* REMAT_KERNELS_NN_H */
