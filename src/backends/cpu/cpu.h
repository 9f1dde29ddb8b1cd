/* src/backends/cpu/cpu.h — the cpu backend's kernels (rm_kernel_fn, the
 * ABI in src/dispatch/kernels.h), one declaration per (kernel, dtype);
 * table.c puts them in rm_cpu_kernels. */
#ifndef REMAT_BACKENDS_CPU_H
#define REMAT_BACKENDS_CPU_H

#include "../../dispatch/kernels.h"

/* unary.c */
int rm_cpu_unary_f32(const rm_kargs *k);
int rm_cpu_unary_f64(const rm_kargs *k);
int rm_cpu_unary_bwd_f32(const rm_kargs *k);
int rm_cpu_unary_bwd_f64(const rm_kargs *k);
int rm_cpu_relu_mask_f32(const rm_kargs *k);
int rm_cpu_relu_mask_f64(const rm_kargs *k);
int rm_cpu_relu_mask_bwd_f32(const rm_kargs *k);
int rm_cpu_relu_mask_bwd_f64(const rm_kargs *k);

/* elementwise.c (f32 and f64 alike: the engine switches on y's dtype) */
int rm_cpu_elementwise(const rm_kargs *k);

#endif /* REMAT_BACKENDS_CPU_H */
