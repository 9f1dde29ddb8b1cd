/* src/backends/cpu/shape.h — the cpu kernels of the shape family
 * (src/dispatch/kernels/shape.h) and their table rows. */
#ifndef REMAT_CPU_SHAPE_H
#define REMAT_CPU_SHAPE_H

#include "../../dispatch/kernels.h"

/* copy.c */
int rm_cpu_copy(const rm_kargs *k);
int rm_cpu_zero(const rm_kargs *k);
int rm_cpu_copy_into(const rm_kargs *k);
/* select.c (f32 and f64 alike: switches on y's dtype) */
int rm_cpu_select(const rm_kargs *k);

#define RM_CPU_KERNELS_SHAPE                                                                 \
    [RM_K_COPY] = {rm_cpu_copy, rm_cpu_copy, rm_cpu_copy, rm_cpu_copy, rm_cpu_copy},          \
    [RM_K_SELECT] = {[REMAT_F32] = rm_cpu_select, [REMAT_F64] = rm_cpu_select},             \
    [RM_K_ZERO] = {rm_cpu_zero, rm_cpu_zero, rm_cpu_zero, rm_cpu_zero, rm_cpu_zero},          \
    [RM_K_COPY_INTO] = {rm_cpu_copy_into, rm_cpu_copy_into, rm_cpu_copy_into,                \
                        rm_cpu_copy_into, rm_cpu_copy_into},

#endif /* REMAT_CPU_SHAPE_H */
