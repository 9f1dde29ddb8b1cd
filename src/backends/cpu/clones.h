/* src/backends/cpu/clones.h — runtime CPU dispatch for the hot f32 kernels.
 *
 * The library is built for baseline x86-64 (no -march=native unless
 * REMAT_NATIVE=ON), where GCC leaves the exp/tanh/GELU/softmax/layer_norm
 * row loops scalar and fmaf is a library call: GELU and softmax measured
 * ~100x slower than the native build. RM_CPU_CLONES compiles a kernel three
 * times (AVX-512, AVX2+FMA, baseline) and the dynamic loader picks the best
 * one for the CPU once by its ISA level (GCC 12 target_clones on x86-64-v4
 * and -v3, an ifunc; clang builds stay baseline); the OpenMP
 * regions inside a kernel are cloned with it. Each clone computes every
 * element with the same operations (no -ffast-math), so results depend on
 * the CPU only where a loop is an explicit OpenMP simd reduction.
 *
 * The clone is the CPU's own: ONEDNN_MAX_CPU_ISA caps oneDNN (and, through
 * remat_cpu_has_bf16, whether bf16 GEMMs run natively: make test-isa) but not
 * these, which an environment variable cannot reach (the loader resolves them
 * before main). That leaves out only the simd reductions' summation order,
 * which no test asserts bitwise across CPUs. */
#ifndef REMAT_BACKENDS_CPU_CLONES_H
#define REMAT_BACKENDS_CPU_CLONES_H

#if defined(__x86_64__) && defined(__ELF__) && !defined(REMAT_NATIVE_BUILD) &&                     \
    !defined(__SANITIZE_ADDRESS__) && !defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 12
#define RM_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#define RM_CPU_CLONED 1 /* the kernels are cloned (vmath.h's RM_FMAF_CL) */
#else
#define RM_CPU_CLONES
#endif
/* A cloned function other files call is an ifunc, which GCC 12 exports
 * whatever -fvisibility (or a visibility attribute) says: the shared
 * library's version script (cmake/remat.map) keeps it local. */
#define RM_CPU_CLONES_EXTERN RM_CPU_CLONES

#endif
