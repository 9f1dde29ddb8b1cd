/* src/dispatch/kernels.h — the kernel ABI: which kernels exist, what they
 * are handed, and the table that maps (kernel, device type, dtype) to the
 * function a device type registered for it.
 *
 * Kernels are the device half of an op: they read and write tensor data
 * and nothing else (no graph, no errors about the user's call, no skip
 * mode). The op half (src/ops) decides shapes, saves and backward; the
 * driver (dispatch.h) looks the kernel up and calls it. The cpu kernels
 * live under src/backends/cpu and are registered statically; another
 * device type registers its own with rm_kernel_register, and a
 * host-addressable type adopts the cpu ones when it is registered. */
#ifndef REMAT_DISPATCH_KERNELS_H
#define REMAT_DISPATCH_KERNELS_H

#include "../internal.h"

/* Every kernel, with the operands it is handed (in[], out[]) and its
 * parameter struct. Elementwise kernels get contiguous operands of one
 * dtype; the dtype a kernel is looked up under is that of in[0]. */
#define RM_KERNEL_LIST(X)                                                                    \
    /* y = f(x; p) elementwise. in: x; out: y (same shape). rm_unary_params */              \
    X(UNARY, "unary")                                                                        \
    /* dx = g * f'(s). in: g, s (the saved x or y; NULL if f' needs none); out: dx */        \
    X(UNARY_BWD, "unary backward")                                                           \
    /* m = bits(y > 0), 8 per byte. in: y; out: m (u8, ceil(n / 8) elements) */             \
    X(RELU_MASK, "relu mask")                                                                \
    /* dx = bit i of m ? g : 0. in: g, m; out: dx */                                         \
    X(RELU_MASK_BWD, "relu mask backward")                                                   \
    /* y = f(a, b, c; p), a/b/c broadcast to y, y any strided view. in: a, b, c (as many as  \
     * the op reads); out: y. rm_ew_params */                                                \
    X(ELEMENTWISE, "elementwise")

typedef enum rm_kernel_id {
#define RM_KERNEL_ENUM_(id, text) RM_K_##id,
    RM_KERNEL_LIST(RM_KERNEL_ENUM_)
#undef RM_KERNEL_ENUM_
    RM_K_COUNT
} rm_kernel_id;

#define RM_N_DTYPES 5 /* REMAT_F32 .. REMAT_BF16 */
#define RM_KERNEL_MAX_IN 3
#define RM_KERNEL_MAX_OUT 2

/* What a kernel is handed: operands (unused ones NULL) and its parameters. */
typedef struct rm_kargs {
    remat_tensor *in[RM_KERNEL_MAX_IN];
    remat_tensor *out[RM_KERNEL_MAX_OUT];
    const void *params;
} rm_kargs;

/* A kernel. Called only when every operand has data (never in skip mode).
 * Returns REMAT_OK or a status with the message set (rm_err). */
typedef int (*rm_kernel_fn)(const rm_kargs *k);

/* ---- parameter structs ---------------------------------------------------------------- */
typedef enum rm_unary_op {
    RM_U_NEG, RM_U_EXP, RM_U_LOG, RM_U_SQRT, RM_U_TANH, RM_U_SIGMOID, RM_U_RELU,
    RM_U_GELU_ERF, RM_U_GELU_TANH, RM_U_POW, RM_U_ADD, RM_U_MUL, RM_U_RSUB
} rm_unary_op;
typedef struct rm_unary_params {
    rm_unary_op op;
    double p; /* the scalar of pow/add/mul/rsub */
} rm_unary_params;

/* The elementwise engine's formulas (operands g = gradient, x, y as noted). */
typedef enum rm_ew_op {
    RM_EW_FILL,      /* 0 operands: p                          */
    RM_EW_SCALE,     /* 1: a * p                               */
    RM_EW_RELU,      /* 1: max(a, 0)                           */
    RM_EW_ADD,       /* 2: a + b                               */
    RM_EW_SUB,       /* 2: a - b                               */
    RM_EW_MUL,       /* 2: a * b                               */
    RM_EW_DIV,       /* 2: a / b                               */
    RM_EW_POW,       /* 2: a ^ b                               */
    RM_EW_AXPY,      /* 2: a + p * b                           */
    RM_EW_RELU_BWD,  /* 2: b > 0 ? a : 0        (a = g, b = y) */
    RM_EW_DIV_GB,    /* 3: -a * b / (c * c)     (g, x, y)      */
    RM_EW_POW_GA,    /* 3: a * c * b^(c - 1)    (g, base, exp) */
    RM_EW_POW_GB,    /* 3: a * b^c * log(b)     (g, base, exp) */
    RM_EW_N_OPS
} rm_ew_op;
typedef struct rm_ew_params {
    rm_ew_op op;
    double p;
} rm_ew_params;

/* ---- the table -------------------------------------------------------------------------- */
/* The cpu backend's kernels (src/backends/cpu/table.c), indexed [kernel][dtype]. */
extern const rm_kernel_fn rm_cpu_kernels[RM_K_COUNT][RM_N_DTYPES];

/* Registers fn for (kernel, device type, dtype); fn NULL removes it. The
 * cpu type's kernels are fixed. Not thread-safe: register at start-up, as
 * device types are. REMAT_EINVAL for an id, type or dtype out of range. */
int rm_kernel_register(rm_kernel_id id, int device_type, remat_dtype dtype, rm_kernel_fn fn);
/* Gives device type `type` the cpu kernels (host-addressable types), or
 * clears every kernel of it (adopt false: the type is unregistered). */
void rm_kernels_adopt_cpu(int type, bool adopt);
/* The kernel for (id, device type, dtype), or NULL. */
static inline rm_kernel_fn rm_kernel_lookup(rm_kernel_id id, int type, remat_dtype dtype);
/* Looks the kernel up for `device` and `dtype`; REMAT_EUNSUPPORTED naming
 * `call`, the device type and the dtype when there is none. */
int rm_kernel_find(rm_kernel_id id, remat_device device, remat_dtype dtype, const char *call,
                   rm_kernel_fn *out);
/* Runs kernel id on k, looked up for in[0]'s device and dtype (out[0]'s
 * when in[0] is NULL). Does nothing when an operand has no data (skip
 * mode). Errors name `call`. */
int rm_kernel_run(rm_kernel_id id, const char *call, rm_kargs *k);

extern rm_kernel_fn rm_kernel_table_[RM_K_COUNT][REMAT_MAX_DEVICE_TYPES][RM_N_DTYPES];
static inline rm_kernel_fn rm_kernel_lookup(rm_kernel_id id, int type, remat_dtype dtype) {
    if ((unsigned)dtype >= RM_N_DTYPES || (unsigned)type >= REMAT_MAX_DEVICE_TYPES) return NULL;
    return type == 0 ? rm_cpu_kernels[id][dtype] : rm_kernel_table_[id][type][dtype];
}

#endif /* REMAT_DISPATCH_KERNELS_H */
