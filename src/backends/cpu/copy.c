/* src/backends/cpu/copy.c — the cpu same-dtype copy kernel behind
 * rm_copy_into (src/core/tensor.c) and the zeroing of a slab (slice and split
 * backward): bit-for-bit row memcpy, tiled transpose or strided rows, split
 * across OpenMP threads. */
#include <string.h>

#include "cpu.h"
#include "tmpl.h"

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

/* Tile of CP_TILE_R rows (src-contiguous dim) x CP_TILE_C columns
 * (dst-contiguous dim): a tile reads CP_TILE_C source lines at once; more
 * than 16 thrash L1 when the source stride is a power of two (a 2048 x 1024
 * transpose ran 2x slower with 32 x 32 tiles, the GPT shapes no faster). */
#define CP_TILE_R 32
#define CP_TILE_C 16

/* A transpose's tiles (cp_transpose): outer dims no, n_rb blocks of rows, n_work items; R
 * rows of dst stride dr, C columns of src stride sc. */
typedef struct cp_tiles {
    int no;
    int64_t n_rb, n_work, R, dr, C, sc;
} cp_tiles;

/* ---- the loops, once per element size: copy_body.h ------------------------------------ */
typedef uint8_t u8;
typedef uint16_t u16;
typedef uint32_t u32;
typedef uint64_t u64;
#define T u8
#include "copy_body.h"
#define T u16
#include "copy_body.h"
#define T u32
#include "copy_body.h"
#define T u64
#include "copy_body.h"

/* The loops by element size (bytes): 2, 4, 8, and 1 (or any other) */
static int cp_size_index(size_t es) { return es == 2 ? 1 : es == 4 ? 2 : es == 8 ? 3 : 0; }
static void (*const cp_rows_by_size[4])(const cp_plan *, int64_t) = {cp_rows_u8, cp_rows_u16,
                                                                     cp_rows_u32, cp_rows_u64};
static void (*const cp_tiles_by_size[4])(const cp_plan *, int64_t, const cp_tiles *) = {
    cp_transpose_tiles_u8, cp_transpose_tiles_u16, cp_transpose_tiles_u32, cp_transpose_tiles_u64};

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
    int64_t n_rb = (R + CP_TILE_R - 1) / CP_TILE_R;
    cp_tiles t = {
        .no = no, .n_rb = n_rb, .n_work = n_outer * n_rb, .R = R, .dr = dr, .C = C, .sc = sc};
    cp_tiles_by_size[cp_size_index(p->es)](p, n, &t);
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
    cp_rows_by_size[cp_size_index(p->es)](p, n);
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
