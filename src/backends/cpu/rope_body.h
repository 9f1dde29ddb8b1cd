/* src/backends/cpu/rope_body.h — the rope kernel (see rope.c), written once
 * and compiled once per dtype: rope.c includes this file with T defined as f32 or
 * f64. Each function is named TFN(name): name_f32 or name_f64 (tmpl.h).
 * No include guard: included once per dtype. */
#include "tmpl.h"

/* x, y (R, Tn, 2h); cs (Tn, h) cosines, sn (Tn, h) sines. inverse: the rotation by the
 * opposite angle, written with the signs flipped (a * c + b * s is bitwise a * c - b * (-s)). */
RM_CPU_CLONES static void TFN(rope_apply)(const T *restrict x, T *restrict y, const T *restrict cs,
                                          const T *restrict sn, int64_t R, int64_t Tn, int64_t h,
                                          bool inverse) {
    const int64_t rows = R * Tn;
#pragma omp parallel for if (rows * h > RM_OMP_MIN / 2)
    for (int64_t rt = 0; rt < rows; rt++) {
        const int64_t t = rt % Tn;
        const T *restrict xr = x + rt * 2 * h;
        T *restrict yr = y + rt * 2 * h;
        const T *restrict c = cs + t * h, *restrict s = sn + t * h;
        if (inverse)
            for (int64_t i = 0; i < h; i++) {
                const T a = xr[i], b = xr[i + h];
                yr[i] = a * c[i] + b * s[i];
                yr[i + h] = b * c[i] - a * s[i];
            }
        else
            for (int64_t i = 0; i < h; i++) {
                const T a = xr[i], b = xr[i + h];
                yr[i] = a * c[i] - b * s[i];
                yr[i + h] = b * c[i] + a * s[i];
            }
    }
}

/* The (Tn, h) table into tab (2 Tn h: the cosines, then the sines): the angles in double,
 * rounded to T. pos NULL: positions 0 .. Tn-1. */
static void TFN(rope_fill)(void *tabv, double theta, int64_t Tn, int64_t D, const int64_t *pos) {
    T *cs = tabv, *sn = cs + Tn * (D / 2);
    const int64_t h = D / 2;
    for (int64_t i = 0; i < h; i++) {
        const double inv = 1.0 / pow(theta, (double)(2 * i) / (double)D);
        for (int64_t t = 0; t < Tn; t++) {
            const double a = (double)(pos ? pos[t] : t) * inv;
            cs[t * h + i] = (T)cos(a);
            sn[t * h + i] = (T)sin(a);
        }
    }
}

remat_status TFN(rm_cpu_rope)(const rm_kargs *k) {
    const rm_rope_params *p = k->params;
    const remat_tensor *x = k->in[0];
    const int64_t *pos = k->in[1] ? rm_ptr(k->in[1]) : NULL;
    int n = x->ndim;
    const int64_t Tn = x->shape[n - 2], D = x->shape[n - 1], h = D / 2;
    const int64_t R = Tn * D > 0 ? remat_numel(x) / (Tn * D) : 0;
    if (R == 0 || h == 0) return REMAT_OK;
    void *own = NULL;
    const T *tab = rope_table(p->theta, Tn, D, pos, sizeof(T), TFN(rope_fill), &own);
    if (!tab) return rm_err(REMAT_ENOMEM, "out of memory");
    TFN(rope_apply)(rm_ptr(x), rm_ptr(k->out[0]), tab, tab + Tn * h, R, Tn, h, p->inverse);
    free(own);
    return REMAT_OK;
}

#undef T
