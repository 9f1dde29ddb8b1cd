/* src/backends/cpu/copy_body.h — the copy loops (see copy.c), written once and compiled
 * once per element size: copy.c includes this file with T defined as u8, u16, u32 or u64
 * (bytes move as unsigned integers of the element's size, whatever the dtype). Each
 * function is named TFN(name): name_u32, .... No include guard: included once per size. */
#include "tmpl.h"

/* Row and strided loops: the last dim is the row; threads take equal slices
 * of the flat range [0, n). */
static void TFN(cp_rows)(const cp_plan *p, int64_t n) {
    int L = p->nd - 1;
    int64_t inner = p->shape[L], sd = p->ds[L], sl = p->ss[L];
    bool unit = sd == 1 && sl == 1;
    T *pd = (T *)(void *)p->d;
    const T *ps = (const T *)(const void *)p->s;
#pragma omp parallel if (n > 32768)
    {
        int nt, id;
        cp_omp_ids(&nt, &id);
        int64_t lo = n * id / nt, hi = n * (id + 1) / nt;
        if (lo < hi) {
            rm_iter it;
            rm_iter_init(&it, L, p->shape, 2);
            memcpy(it.strides[0], p->ds, sizeof(int64_t) * (size_t)L);
            memcpy(it.strides[1], p->ss, sizeof(int64_t) * (size_t)L);
            rm_iter_seek(&it, lo / inner);
            int64_t col = lo % inner, pos = lo;
            while (pos < hi) {
                int64_t len = inner - col < hi - pos ? inner - col : hi - pos;
                T *dd = pd + it.off[0] + col * sd;
                const T *sp = ps + it.off[1] + col * sl;
                if (unit) memcpy(dd, sp, (size_t)len * sizeof(T));
                else
                    for (int64_t i = 0; i < len; i++) dd[i * sd] = sp[i * sl];
                pos += len;
                col = 0;
                rm_iter_next(&it);
            }
        }
    }
}

/* dst (outer..., R, C) with dst stride 1 along C; src stride 1 along R and
 * sc along C. Work item = (outer index, block of CP_TILE_R rows of R). */
static void TFN(cp_transpose_tiles)(const cp_plan *p, int64_t n, const cp_tiles *t) {
    int no = t->no;
    int64_t n_rb = t->n_rb, n_work = t->n_work, R = t->R, dr = t->dr, C = t->C, sc = t->sc;
    T *pd = (T *)(void *)p->d;
    const T *ps = (const T *)(const void *)p->s;
#pragma omp parallel for schedule(static) if (n > 32768)
    for (int64_t w = 0; w < n_work; w++) {
        int64_t od, os;
        cp_seek(no, p->shape, p->ds, p->ss, w / n_rb, &od, &os);
        int64_t r0 = (w % n_rb) * CP_TILE_R;
        int64_t r1 = r0 + CP_TILE_R < R ? r0 + CP_TILE_R : R;
        for (int64_t c0 = 0; c0 < C; c0 += CP_TILE_C) {
            int64_t c1 = c0 + CP_TILE_C < C ? c0 + CP_TILE_C : C;
            for (int64_t r = r0; r < r1; r++) {
                T *dd = pd + od + r * dr;
                const T *sp = ps + os + r;
                for (int64_t c = c0; c < c1; c++) dd[c] = sp[c * sc];
            }
        }
    }
}

#undef T
