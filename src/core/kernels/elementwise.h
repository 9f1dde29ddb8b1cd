/* src/core/kernels/elementwise.h — kernels of the elementwise family:
 * the unary ops (src/ops/unary.c), the broadcasting binary and in-place
 * ops and their backward formulas (src/ops/binary.c, inplace.c). */
#ifndef REMAT_KERNELS_ELEMENTWISE_H
#define REMAT_KERNELS_ELEMENTWISE_H

#define RM_KERNELS_ELEMENTWISE(X)                                                                  \
    /* y = f(x; p) elementwise. in: x; out: y (same shape). rm_unary_params */                     \
    X(UNARY, "unary")                                                                              \
    /* dx = g * f'(s). in: g, s (the saved x or y; NULL if f' needs none); out: dx */              \
    X(UNARY_BWD, "unary backward")                                                                 \
    /* m = bits(y > 0), 8 per byte. in: y; out: m (u8, ceil(n / 8) elements) */                    \
    X(RELU_MASK, "relu mask")                                                                      \
    /* dx = bit i of m ? g : 0. in: g, m; out: dx */                                               \
    X(RELU_MASK_BWD, "relu mask backward")                                                         \
    /* y = gelu(x + b), b (n) added to every row of x (rows, n). in: x, b (x's dtype; f32 for  \
     * bf16 x too: x + b rounded to bf16 before the GELU, as a bf16 add would); out: y.       \
     * rm_unary_params (op: RM_U_GELU_ERF or RM_U_GELU_TANH) */   \
    X(BIAS_GELU, "bias gelu")                                                                      \
    /* dx = g * gelu'(x + b), db = the column sums of dx (as RM_K_COLSUM sums them; in b's     \
     * dtype). in: g, x, b; out: dx, db (NULL: not wanted). rm_unary_params */   \
    X(BIAS_GELU_BWD, "bias gelu backward")                                                         \
    /* y = f(a, b, c; p), a/b/c broadcast to y, y any strided view. in: a, b, c (as many as  \
     * the op reads); out: y. rm_ew_params */     \
    X(ELEMENTWISE, "elementwise")

typedef enum rm_unary_op {
    RM_U_NEG,
    RM_U_EXP,
    RM_U_LOG,
    RM_U_SQRT,
    RM_U_TANH,
    RM_U_SIGMOID,
    RM_U_RELU,
    RM_U_GELU_ERF,
    RM_U_GELU_TANH,
    RM_U_SILU, /* x · sigmoid(x) */
    RM_U_POW,
    RM_U_ADD,
    RM_U_MUL,
    RM_U_RSUB
} rm_unary_op;
typedef struct rm_unary_params {
    rm_unary_op op;
    double p; /* the scalar of pow/add/mul/rsub */
} rm_unary_params;

/* The elementwise engine's formulas (operands g = gradient, x, y as noted). */
typedef enum rm_ew_op {
    RM_EW_FILL,     /* 0 operands: p                          */
    RM_EW_SCALE,    /* 1: a * p                               */
    RM_EW_RELU,     /* 1: max(a, 0)                           */
    RM_EW_ADD,      /* 2: a + b                               */
    RM_EW_SUB,      /* 2: a - b                               */
    RM_EW_MUL,      /* 2: a * b                               */
    RM_EW_DIV,      /* 2: a / b                               */
    RM_EW_POW,      /* 2: a ^ b                               */
    RM_EW_AXPY,     /* 2: a + p * b                           */
    RM_EW_RELU_BWD, /* 2: b > 0 ? a : 0        (a = g, b = y) */
    RM_EW_DIV_GB,   /* 3: -a * b / (c * c)     (g, x, y)      */
    RM_EW_POW_GA,   /* 3: a * c * b^(c - 1)    (g, base, exp) */
    RM_EW_POW_GB,   /* 3: a * b^c * log(b)     (g, base, exp) */
    RM_EW_N_OPS
} rm_ew_op;
typedef struct rm_ew_params {
    rm_ew_op op;
    double p;
} rm_ew_params;

#endif /* REMAT_KERNELS_ELEMENTWISE_H */
