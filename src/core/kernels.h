/* src/core/kernels.h — the kernel ABI: which kernels exist, what they
 * are handed, and the table that maps (kernel, device type, dtype) to the
 * function a device type registered for it.
 *
 * Kernels are the device half of an op: they read and write tensor data
 * and nothing else (no graph, no errors about the user's call, no skip
 * mode). The op half (src/ops) decides shapes, saves and backward; the
 * driver (src/ops/op.h) looks the kernel up and calls it. Each backend
 * brings its rows in its record (src/core/backend.h): the cpu's live under
 * src/backends/cpu; a host-addressable type without rows of its own adopts
 * backend 0's. */
#ifndef REMAT_DISPATCH_KERNELS_H
#define REMAT_DISPATCH_KERNELS_H

#include "core.h"

/* Every kernel: the families' lists (src/core/kernels/<family>.h say
 * what each kernel is handed: in[], out[] and its parameter struct).
 * Elementwise kernels get contiguous operands of one dtype; the dtype a
 * kernel is looked up under is that of in[0] (out[0] when in[0] is NULL). */
#include "core/kernels/elementwise.h"
#include "core/kernels/matmul.h"
#include "core/kernels/nn.h"
#include "core/kernels/optim.h"
#include "core/kernels/reduce.h"
#include "core/kernels/shape.h"

#define RM_KERNEL_LIST(X)                                                                          \
    RM_KERNELS_ELEMENTWISE(X)                                                                      \
    RM_KERNELS_REDUCE(X)                                                                           \
    RM_KERNELS_NN(X)                                                                               \
    RM_KERNELS_MATMUL(X)                                                                           \
    RM_KERNELS_SHAPE(X)                                                                            \
    RM_KERNELS_OPTIM(X)

typedef enum rm_kernel_id {
#define RM_KERNEL_ENUM_(id, text) RM_K_##id,
    RM_KERNEL_LIST(RM_KERNEL_ENUM_)
#undef RM_KERNEL_ENUM_
        RM_K_COUNT
} rm_kernel_id;

#define RM_N_DTYPES 5 /* REMAT_F32 .. REMAT_BF16 */
#define RM_KERNEL_MAX_IN 6
#define RM_KERNEL_MAX_OUT 4

/* What a kernel is handed: operands (unused ones NULL) and its parameters. */
typedef struct rm_kargs {
    remat_tensor *in[RM_KERNEL_MAX_IN];
    remat_tensor *out[RM_KERNEL_MAX_OUT];
    const void *params;
} rm_kargs;

/* A kernel. Called only when every operand has data (never in skip mode).
 * Returns REMAT_OK or a status with the message set (rm_err). */
typedef remat_status (*rm_kernel_fn)(const rm_kargs *k);

/* The f32 and f64 kernels rm_cpu_<name>_f32/_f64 as one table row. */
#define RM_CPU_F32_F64(name)                                                                       \
    { [REMAT_F32] = rm_cpu_##name##_f32, [REMAT_F64] = rm_cpu_##name##_f64 }
/* A cpu family header lists its kernels once, X(ID, name, dtypes), and
 * derives from the list their declarations (RM_CPU_DECL) and its rows of
 * the table (RM_CPU_ROW). dtypes: F32_F64, rm_cpu_<name>_f32 and _f64;
 * FLOAT, one rm_cpu_<name> for f32 and f64 (it switches on the dtype);
 * F32_F64_BF16, those and rm_cpu_<name>_bf16; FLOAT_BF16, the same for bf16
 * too (the cpu's other bf16 kernels go through f32: rm_cpu_bf16_via_f32); ALL, one rm_cpu_<name> for every
 * dtype. */
#define RM_CPU_DECL(id, name, dtypes) RM_CPU_DECL_##dtypes(name)
#define RM_CPU_DECL_F32_F64(name)                                                                  \
    remat_status rm_cpu_##name##_f32(const rm_kargs *k);                                           \
    remat_status rm_cpu_##name##_f64(const rm_kargs *k);
#define RM_CPU_DECL_F32_F64_BF16(name)                                                             \
    RM_CPU_DECL_F32_F64(name) remat_status rm_cpu_##name##_bf16(const rm_kargs *k);
#define RM_CPU_DECL_FLOAT(name) remat_status rm_cpu_##name(const rm_kargs *k);
#define RM_CPU_DECL_FLOAT_BF16(name) remat_status rm_cpu_##name(const rm_kargs *k);
#define RM_CPU_DECL_ALL(name) remat_status rm_cpu_##name(const rm_kargs *k);
#define RM_CPU_ROW(id, name, dtypes) [RM_K_##id] = RM_CPU_ROW_##dtypes(name),
#define RM_CPU_ROW_F32_F64(name) RM_CPU_F32_F64(name)
#define RM_CPU_ROW_F32_F64_BF16(name)                                                              \
    {                                                                                              \
        [REMAT_F32] = rm_cpu_##name##_f32, [REMAT_F64] = rm_cpu_##name##_f64,                      \
        [REMAT_BF16] = rm_cpu_##name##_bf16                                                        \
    }
#define RM_CPU_ROW_FLOAT(name)                                                                     \
    { [REMAT_F32] = rm_cpu_##name, [REMAT_F64] = rm_cpu_##name }
#define RM_CPU_ROW_FLOAT_BF16(name)                                                                \
    { [REMAT_F32] = rm_cpu_##name, [REMAT_F64] = rm_cpu_##name, [REMAT_BF16] = rm_cpu_##name }
#define RM_CPU_ROW_ALL(name)                                                                       \
    { rm_cpu_##name, rm_cpu_##name, rm_cpu_##name, rm_cpu_##name, rm_cpu_##name }

/* The kernel's name as messages say it ("matmul", "layer norm backward"); "?" out of
 * range. */
const char *rm_kernel_name(rm_kernel_id id);

/* ---- the table -------------------------------------------------------------------------- */
/* Registers fn for (kernel, device type, dtype); fn NULL removes it: for a backend's rows
 * that cannot be static (its record's `registered`, src/core/backend.h). Backend 0's
 * kernels are fixed. Not thread-safe: register at start-up, as device types are.
 * REMAT_EINVAL for an id, type or dtype out of range. */
remat_status rm_kernel_register(rm_kernel_id id, int device_type, remat_dtype dtype,
                                rm_kernel_fn fn);
/* What a backend's kernel allows beyond the ABI, by kernel id (its record's kernel_flags,
 * src/core/backend.h): the device conditions of buffer donation (src/autograd/graph.h). */
#define RM_KF_IN_PLACE 1u /* its out[0] may be one of its inputs, element for element */
#define RM_KF_WIDE_GRAD                                                                            \
    2u /* (MATMUL) an f32 operand of a bf16 product flagged RM_MM_PANEL is
                            * rounded by the kernel, panel by panel */
#define RM_KF_GRAD_SCALE                                                                           \
    4u /* (ADAMW, SGD) reads the gradient times the params' grad_scale (optim.h) */
/* (LAYER_NORM, ADD_LAYER_NORM) writes a bf16 y for an f32 x, rounded as the converting copy
 * rounds, and the type's bf16 LAYER_NORM_BWD reads a bf16 g for an f32 x, widened as the
 * cast's backward widens it: remat_layer_norm_to's cast folded into the norm (else the
 * norm then a cast) */
#define RM_KF_BF16_Y 8u
/* (any) converts the inputs its op's autocast_keep names itself (src/ops/autocast.c), on a
 * device other than the cpu (whose kernels all do) */
#define RM_KF_AUTOCAST_KEEP 16u
/* (src/core/device.c) Fills the row of device type `type` from rows (NULL: clears it),
 * a NULL bf16 entry from bf16_fallback (when not NULL), and its flags (NULL: none). */
void rm_kernels_set_rows(int type, const rm_kernel_fn (*rows)[RM_N_DTYPES],
                         const rm_kernel_fn *bf16_fallback, const unsigned char *flags);
/* The kernel for (id, device type, dtype), or NULL. */
static inline rm_kernel_fn rm_kernel_lookup(rm_kernel_id id, int type, remat_dtype dtype);
/* Looks the kernel up for `device` and `dtype`; REMAT_EUNSUPPORTED naming
 * `call`, the device type and the dtype when there is none. */
remat_status rm_kernel_find(rm_kernel_id id, remat_device device, remat_dtype dtype,
                            const char *call, rm_kernel_fn *out);
/* Whether every operand of k (NULL ones aside) has data: kernels run only
 * then (an operand without data is skip mode's). */
bool rm_kargs_have_data(const rm_kargs *k);
/* Runs kernel id on k, looked up for in[0]'s device and dtype (out[0]'s
 * when in[0] is NULL). Does nothing when an operand has no data (skip
 * mode). Errors name `call`. */
remat_status rm_kernel_run(rm_kernel_id id, const char *call, rm_kargs *k);
/* t := v through t's strides, on t's device by its kernels (ZERO for 0, else the
 * elementwise FILL): the one way code outside the backends fills tensor memory, which a
 * GPU's host code cannot write. Nothing for a tensor without data (skip mode). Errors
 * name `call` (REMAT_EUNSUPPORTED when the device has no such kernel for t's dtype). */
remat_status rm_kernel_fill(remat_tensor *t, double v, const char *call);

/* [kernel][device type][dtype]: every backend's rows, filled at its registration. */
extern rm_kernel_fn rm_kernel_table_[RM_K_COUNT][REMAT_MAX_DEVICE_TYPES][RM_N_DTYPES];
static inline rm_kernel_fn rm_kernel_lookup(rm_kernel_id id, int type, remat_dtype dtype) {
    if ((unsigned)dtype >= RM_N_DTYPES || (unsigned)type >= REMAT_MAX_DEVICE_TYPES) return NULL;
    return rm_kernel_table_[id][type][dtype];
}
/* [kernel][device type]: RM_KF_* flags, filled with the rows. */
extern unsigned char rm_kernel_flags_[RM_K_COUNT][REMAT_MAX_DEVICE_TYPES];
/* Whether device type `type`'s kernel id allows `flag` (RM_KF_*). */
static inline bool rm_kernel_allows(rm_kernel_id id, int type, unsigned flag) {
    return (unsigned)type < REMAT_MAX_DEVICE_TYPES && (rm_kernel_flags_[id][type] & flag);
}

#endif /* REMAT_DISPATCH_KERNELS_H */
