/* src/backends/cpu/tmpl.h — naming for the cpu kernels' per-dtype bodies.
 *
 * A kernel family's body (nn_body.h, ...) is plain C written once; its .c
 * file includes it once per dtype with T defined as the element type's name
 * (f32 or f64, typedefs of float and double) and the family's per-dtype
 * helpers defined beside it. TFN(name) names the copy for T: TFN(softmax_fwd)
 * is softmax_fwd_f32 in the f32 copy. The code is real lines, not a macro's
 * expansion, so gdb steps through it and clang-tidy and lizard read it; the
 * only macros left are the kernel table's rows (cpu.h). */
#ifndef REMAT_BACKENDS_CPU_TMPL_H
#define REMAT_BACKENDS_CPU_TMPL_H

typedef float f32;
typedef double f64;

#define RM_TCAT_(a, b) a##_##b
#define RM_TCAT(a, b) RM_TCAT_(a, b)
#define TFN(name) RM_TCAT(name, T)

#endif /* REMAT_BACKENDS_CPU_TMPL_H */
