/* src/backends/cpu/copy.c — the cpu same-dtype copy kernel behind
 * rm_copy_into (src/core/tensor.c) and the zeroing of a slab (slice and split
 * backward): bit-for-bit row memcpy, tiled transpose or strided rows, split
 * across OpenMP threads. */
#include <string.h>

#include "cpu.h"

#ifdef _OPENMP
#include <omp.h>
#endif

/* ---- the strided same-dtype copy kernel ------------------------------------------------
 * rm_copy_same_dtype is the kernel behind contiguous copies of views
 * (reshape of a transposed tensor, remat_contiguous), gradient scatters
 * (slice / split backward) and cat. Copying is bit-for-bit (elements move as
 * unsigned integers of their size), so it can never change a value.
 *
 * The iteration space is dst's shape with src broadcast to it. Size-1 dims
 * are dropped and neighbouring dims that are contiguous with each other in
 * both operands are merged, then one of three loops runs:
 *   - rows: the innermost dim has stride 1 in both → one memcpy per row
 *     ((B, H, T, D) → (B, T, H, D) copies rows of D elements);
 *   - transpose: dst's innermost dim has stride 1 and src's stride-1 dim is
 *     another one → 32 x 16 tiles, so that both sides touch whole cache
 *     lines (a (B, H, D, T) view of (B, H, T, D) memory made contiguous);
 *   - strided: anything else, one strided inner loop per row.
 * Threads split the flat element range (rows, strided) or the tile rows
 * (transpose) evenly; each seeks once and then walks its part. */

typedef struct cp_plan {
    int nd;
    size_t es;
    int64_t shape[REMAT_MAX_DIMS];
    int64_t ds[REMAT_MAX_DIMS], ss[REMAT_MAX_DIMS]; /* element strides of dst, src */
    char *d;
    const char *s;
} cp_plan;

/* Drops size-1 dims and merges dims contiguous with their inner neighbour in
 * both operands; at least one dim remains. */
static void cp_coalesce(cp_plan *p) {
    int nd = 0;
    for (int k = 0; k < p->nd; k++) {
        if (p->shape[k] == 1) continue;
        if (nd > 0 && p->ds[nd - 1] == p->ds[k] * p->shape[k] &&
            p->ss[nd - 1] == p->ss[k] * p->shape[k]) {
            p->shape[nd - 1] *= p->shape[k];
            p->ds[nd - 1] = p->ds[k];
            p->ss[nd - 1] = p->ss[k];
            continue;
        }
        p->shape[nd] = p->shape[k];
        p->ds[nd] = p->ds[k];
        p->ss[nd] = p->ss[k];
        nd++;
    }
    if (nd == 0) {
        p->shape[0] = 1;
        p->ds[0] = p->ss[0] = 0;
        nd = 1;
    }
    p->nd = nd;
}

static void cp_omp_ids(int *nt, int *id) {
#ifdef _OPENMP
    *nt = omp_get_num_threads();
    *id = omp_get_thread_num();
#else
    *nt = 1;
    *id = 0;
#endif
}

/* Offsets (elements) of outer row `row` (row-major over the first nd dims of
 * shape) in dst and src. */
static void cp_seek(int nd, const int64_t *shape, const int64_t *ds, const int64_t *ss, int64_t row,
                    int64_t *od, int64_t *os) {
    int64_t a = 0, b = 0;
    for (int k = nd - 1; k >= 0; k--) {
        int64_t i = row % shape[k];
        row /= shape[k];
        a += i * ds[k];
        b += i * ss[k];
    }
    *od = a;
    *os = b;
}

/* Row and strided loops: the last dim is the row; threads take equal slices
 * of the flat range [0, n). */
#define CP_ROWS(T)                                                                                 \
    do {                                                                                           \
        T *pd = (T *)(void *)p->d;                                                                 \
        const T *ps = (const T *)(const void *)p->s;                                               \
        _Pragma("omp parallel if (n > 32768)") {                                                   \
            int nt, id;                                                                            \
            cp_omp_ids(&nt, &id);                                                                  \
            int64_t lo = n * id / nt, hi = n * (id + 1) / nt;                                      \
            if (lo < hi) {                                                                         \
                rm_iter it;                                                                        \
                rm_iter_init(&it, L, p->shape, 2);                                                 \
                memcpy(it.strides[0], p->ds, sizeof(int64_t) * (size_t)L);                         \
                memcpy(it.strides[1], p->ss, sizeof(int64_t) * (size_t)L);                         \
                rm_iter_seek(&it, lo / inner);                                                     \
                int64_t col = lo % inner, pos = lo;                                                \
                while (pos < hi) {                                                                 \
                    int64_t len = inner - col < hi - pos ? inner - col : hi - pos;                 \
                    T *dd = pd + it.off[0] + col * sd;                                             \
                    const T *sp = ps + it.off[1] + col * sl;                                       \
                    if (unit) memcpy(dd, sp, (size_t)len * sizeof(T));                             \
                    else                                                                           \
                        for (int64_t i = 0; i < len; i++) dd[i * sd] = sp[i * sl];                 \
                    pos += len;                                                                    \
                    col = 0;                                                                       \
                    rm_iter_next(&it);                                                             \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    } while (0)

/* Tile of CP_TILE_R rows (src-contiguous dim) x CP_TILE_C columns
 * (dst-contiguous dim): a tile reads CP_TILE_C source lines at once; more
 * than 16 thrash L1 when the source stride is a power of two (a 2048 x 1024
 * transpose ran 2x slower with 32 x 32 tiles, the GPT shapes no faster). */
/* COPY(T) with T the unsigned integer of the element size `es` (bytes are
 * copied as they are, whatever the dtype). */
#define CP_BY_ELEMENT_SIZE(es, COPY)                                                               \
    switch (es) {                                                                                  \
    case 4: COPY(uint32_t); break;                                                                 \
    case 8: COPY(uint64_t); break;                                                                 \
    case 2: COPY(uint16_t); break;                                                                 \
    default: COPY(uint8_t); break;                                                                 \
    }

#define CP_TILE_R 32
#define CP_TILE_C 16

/* dst (outer..., R, C) with dst stride 1 along C; src stride 1 along R and
 * sc along C. Work item = (outer index, block of CP_TILE_R rows of R). */
#define CP_TRANSPOSE(T)                                                                            \
    do {                                                                                           \
        T *pd = (T *)(void *)p->d;                                                                 \
        const T *ps = (const T *)(const void *)p->s;                                               \
        _Pragma("omp parallel for schedule(static) if (n > 32768)") for (int64_t w = 0;            \
                                                                         w < n_work; w++) {        \
            int64_t od, os;                                                                        \
            cp_seek(no, p->shape, p->ds, p->ss, w / n_rb, &od, &os);                               \
            int64_t r0 = (w % n_rb) * CP_TILE_R;                                                   \
            int64_t r1 = r0 + CP_TILE_R < R ? r0 + CP_TILE_R : R;                                  \
            for (int64_t c0 = 0; c0 < C; c0 += CP_TILE_C) {                                        \
                int64_t c1 = c0 + CP_TILE_C < C ? c0 + CP_TILE_C : C;                              \
                for (int64_t r = r0; r < r1; r++) {                                                \
                    T *dd = pd + od + r * dr;                                                      \
                    const T *sp = ps + os + r;                                                     \
                    for (int64_t c = c0; c < c1; c++) dd[c] = sp[c * sc];                          \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    } while (0)

/* Tries the tiled transpose; false when the layout is not a transpose. */
static bool cp_transpose(cp_plan *p, int64_t n) {
    int L = p->nd - 1, k = -1;
    if (L < 1 || p->ds[L] != 1 || p->ss[L] == 1 || p->ss[L] == 0) return false;
    for (int j = 0; j < L; j++)
        if (p->ss[j] == 1) k = j;
    if (k < 0) return false;
    for (int j = 0; j <= L; j++)
        if (p->ds[j] == 0) return false; /* dst writes overlap: keep row-major order */
    /* tiles only pay when both extents span several cache lines */
    if (p->shape[k] < 8 || p->shape[L] < 8) return false;
    /* move dim k next to the last one; the outer dims keep their order */
    int64_t R = p->shape[k], dr = p->ds[k], C = p->shape[L], sc = p->ss[L];
    for (int j = k; j < L - 1; j++) {
        p->shape[j] = p->shape[j + 1];
        p->ds[j] = p->ds[j + 1];
        p->ss[j] = p->ss[j + 1];
    }
    int no = L - 1; /* outer dims */
    int64_t n_outer = rm_shape_numel(no, p->shape);
    int64_t n_rb = (R + CP_TILE_R - 1) / CP_TILE_R, n_work = n_outer * n_rb;
    CP_BY_ELEMENT_SIZE(p->es, CP_TRANSPOSE);
    return true;
}

bool rm_copy_same_dtype(remat_tensor *dst, const remat_tensor *src) {
    if (dst->dtype != src->dtype) return false;
    if (!dst->storage->data || !src->storage->data) return true; /* meta: nothing to copy */
    int64_t n = rm_shape_numel(dst->ndim, dst->shape);
    if (n == 0) return true;
    cp_plan pl, *p = &pl;
    p->es = remat_dtype_size(dst->dtype);
    if (remat_is_contiguous(dst) && remat_is_contiguous(src) &&
        rm_shape_numel(src->ndim, src->shape) == n) {
        /* both contiguous with the same numel: one flat block, whatever the
         * shapes (rm_copy_into's "same numel view") */
        p->nd = 1;
        p->shape[0] = n;
        p->ds[0] = p->ss[0] = 1;
    } else {
        p->nd = dst->ndim;
        memcpy(p->shape, dst->shape, sizeof(int64_t) * (size_t)dst->ndim);
        memcpy(p->ds, dst->strides, sizeof(int64_t) * (size_t)dst->ndim);
        rm_broadcast_strides(src, dst->ndim, dst->shape, p->ss);
    }
    p->d = (char *)dst->storage->data + (size_t)dst->offset * p->es;
    p->s = (const char *)src->storage->data + (size_t)src->offset * p->es;
    cp_coalesce(p);
    if (cp_transpose(p, n)) return true;
    int L = p->nd - 1;
    int64_t inner = p->shape[L], sd = p->ds[L], sl = p->ss[L];
    bool unit = sd == 1 && sl == 1;
    CP_BY_ELEMENT_SIZE(p->es, CP_ROWS);
    return true;
}

/* t contiguous: zeroes t[..., lo:hi, ...] along dim d, one memset per outer
 * index (the complement of a slice or a missing piece in a scatter). */
void rm_zero_dim_range(remat_tensor *t, int d, int64_t lo, int64_t hi) {
    char *base = rm_ptr(t);
    if (!base || lo >= hi) return;
    int64_t O, S, I;
    rm_outer_reduce_inner(t->ndim, t->shape, d, &O, &S, &I);
    size_t es = remat_dtype_size(t->dtype), row = (size_t)((hi - lo) * I) * es;
#pragma omp parallel for schedule(static) if (O * (hi - lo) * I > RM_OMP_MIN)
    for (int64_t o = 0; o < O; o++) memset(base + (size_t)((o * S + lo) * I) * es, 0, row);
}

/* The COPY kernel: x into contiguous y of the same numel, through a view of
 * y's storage with x's shape (row-major order is the same). */
remat_status rm_cpu_copy(const rm_kargs *k) {
    const remat_tensor *x = k->in[0];
    remat_tensor *y = k->out[0];
    int64_t st[REMAT_MAX_DIMS];
    rm_contiguous_strides(x->ndim, x->shape, st);
    remat_tensor *v = rm_tensor_alloc(y->storage, y->offset, x->ndim, x->shape, st, y->dtype);
    if (!v) return rm_err(REMAT_ENOMEM, "out of memory creating a view");
    rm_copy_same_dtype(v, x);
    rm_release(v);
    return REMAT_OK;
}

/* Zeroes a strided i64 view (the float case goes through the elementwise
 * engine). */
static void zero_strided_i64(remat_tensor *a) {
    int64_t *p = rm_ptr(a), n = remat_numel(a);
    rm_iter it;
    rm_iter_init(&it, a->ndim, a->shape, 1);
    memcpy(it.strides[0], a->strides, sizeof(int64_t) * (size_t)a->ndim);
    for (int64_t i = 0; i < n; i++) {
        p[it.off[0]] = 0;
        rm_iter_next(&it);
    }
}

/* The ZERO kernel: y := 0 through y's strides; one memset when contiguous. */
remat_status rm_cpu_zero(const rm_kargs *k) {
    remat_tensor *y = k->out[0];
    if (remat_is_contiguous(y)) {
        memset(rm_ptr(y), 0, (size_t)remat_numel(y) * remat_dtype_size(y->dtype));
        return REMAT_OK;
    }
    if (y->dtype == REMAT_I64) {
        zero_strided_i64(y);
        return REMAT_OK;
    }
    const rm_ew_params fill = {RM_EW_FILL, 0};
    rm_kargs ek = {.out = {y}, .params = &fill};
    return rm_cpu_elementwise(&ek);
}

/* The COPY_INTO kernel: y := x (in[1]) converted to y's dtype, broadcast,
 * through both tensors' strides. */
remat_status rm_cpu_copy_into(const rm_kargs *k) { return rm_copy_into(k->out[0], k->in[1]); }
