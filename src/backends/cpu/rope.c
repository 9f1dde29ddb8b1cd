/* src/backends/cpu/rope.c — cpu kernel of rope (src/ops/rope.c): rotary
 * position embedding in the Hugging Face Llama convention (rotate_half:
 * the pairs are (i, i + D/2), not interleaved).
 *
 *   inv_freq[i] = theta^(-2i/D),  a = pos[t] · inv_freq[i],  h = D/2,  i < h
 *   y[t, i]     = x[t, i] · cos a − x[t, i + h] · sin a
 *   y[t, i + h] = x[t, i + h] · cos a + x[t, i] · sin a
 *
 * The backward is the rotation by −a (inverse: sin a negated), the same
 * kernel. The angles, cosines and sines are computed in double once per
 * call for the (T, h) table and rounded to the data's type (f32 for the
 * bf16 path, which runs this kernel on widened values), then every row of
 * x (its leading dims) reuses the table: the values do not depend on the
 * thread count, and the forward and the backward use the same cos and sin. */
#include <math.h>
#include <stdlib.h>

#include "clones.h"
#include "cpu.h"

typedef float f32;
typedef double f64;

#define ROPE_KERNELS(T)                                                                            \
    /* x, y (R, Tn, 2h); cs (Tn, h) cosines, sn (Tn, h) sines (negated for the inverse) */         \
    RM_CPU_CLONES static void rope_apply_##T(const T *restrict x, T *restrict y,                   \
                                             const T *restrict cs, const T *restrict sn,           \
                                             int64_t R, int64_t Tn, int64_t h) {                   \
        const int64_t rows = R * Tn;                                                               \
        _Pragma("omp parallel for if (rows * h > RM_OMP_MIN / 2)") for (int64_t rt = 0; rt < rows; \
                                                                        rt++) {                    \
            const int64_t t = rt % Tn;                                                             \
            const T *restrict xr = x + rt * 2 * h;                                                 \
            T *restrict yr = y + rt * 2 * h;                                                       \
            const T *restrict c = cs + t * h, *restrict s = sn + t * h;                            \
            for (int64_t i = 0; i < h; i++) {                                                      \
                const T a = xr[i], b = xr[i + h];                                                  \
                yr[i] = a * c[i] - b * s[i];                                                       \
                yr[i + h] = b * c[i] + a * s[i];                                                   \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
                                                                                                   \
    remat_status rm_cpu_rope_##T(const rm_kargs *k) {                                              \
        const rm_rope_params *p = k->params;                                                       \
        const remat_tensor *x = k->in[0];                                                          \
        const int64_t *pos = k->in[1] ? rm_ptr(k->in[1]) : NULL;                                   \
        int n = x->ndim;                                                                           \
        const int64_t Tn = x->shape[n - 2], D = x->shape[n - 1], h = D / 2;                        \
        const int64_t R = Tn * D > 0 ? remat_numel(x) / (Tn * D) : 0;                              \
        if (R == 0 || h == 0) return REMAT_OK;                                                     \
        T *tab = malloc(sizeof(T) * (size_t)(2 * Tn * h));                                         \
        double *inv = malloc(sizeof(double) * (size_t)h);                                          \
        if (!tab || !inv) {                                                                        \
            free(tab), free(inv);                                                                  \
            return rm_err(REMAT_ENOMEM, "out of memory");                                          \
        }                                                                                          \
        for (int64_t i = 0; i < h; i++) inv[i] = 1.0 / pow(p->theta, (double)(2 * i) / (double)D); \
        T *cs = tab, *sn = tab + Tn * h;                                                           \
        const double sign = p->inverse ? -1.0 : 1.0;                                               \
        for (int64_t t = 0; t < Tn; t++) {                                                         \
            const double at = (double)(pos ? pos[t] : t);                                          \
            for (int64_t i = 0; i < h; i++) {                                                      \
                const double a = at * inv[i];                                                      \
                cs[t * h + i] = (T)cos(a);                                                         \
                sn[t * h + i] = (T)(sign * sin(a));                                                \
            }                                                                                      \
        }                                                                                          \
        rope_apply_##T(rm_ptr(x), rm_ptr(k->out[0]), cs, sn, R, Tn, h);                            \
        free(tab), free(inv);                                                                      \
        return REMAT_OK;                                                                           \
    }

ROPE_KERNELS(f32)
ROPE_KERNELS(f64)
