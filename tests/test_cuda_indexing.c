/* tests/test_cuda_indexing.c — the host-side index logic of the CUDA
 * kernels (src/backends/cuda/kplan.h), checked on the cpu: it needs no GPU
 * and no CUDA toolkit (kplan.h is plain C), so it runs in every build.
 *
 * What the kernels compute from these plans is the offset of every element
 * in every operand, and the (O, R, I) passes of a reduction; the tests walk
 * every flat index of random shapes, strides and broadcasts and compare with
 * the naive row-major offsets of the uncoalesced shape. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/kplan.h"

/* Offsets of flat index i of (nd, shape) with per-operand strides, naively. */
static void naive_offsets(int nd, const int64_t *shape, int nops, const int64_t (*st)[RMK_MAX_DIMS],
                          int64_t i, int64_t *off) {
    for (int k = 0; k < nops; k++) off[k] = 0;
    for (int d = nd - 1; d >= 0; d--) {
        int64_t j = i % shape[d];
        i /= shape[d];
        for (int k = 0; k < nops; k++) off[k] += j * st[k][d];
    }
}

static int64_t numel(int nd, const int64_t *shape) {
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= shape[d];
    return n;
}

/* Checks the plan of (nd, shape, st) against the naive offsets at every index. */
static void check_plan(int nd, const int64_t *shape, int nops, const int64_t (*st)[RMK_MAX_DIMS],
                       const char *what) {
    rmk_plan p;
    rmk_plan_build(&p, nd, shape, nops, st);
    cr_assert(p.nd >= 1 && p.nd <= (nd > 0 ? nd : 1), "%s: plan has %d dims", what, p.nd);
    cr_assert_eq(numel(p.nd, p.shape), numel(nd, shape), "%s: plan numel", what);
    int64_t n = numel(nd, shape);
    for (int64_t i = 0; i < n; i++) {
        int64_t want[RMK_MAX_OPS], got[RMK_MAX_OPS];
        naive_offsets(nd, shape, nops, st, i, want);
        rmk_plan_offsets(&p, i, got);
        for (int k = 0; k < nops; k++)
            cr_assert_eq(got[k], want[k], "%s: index %lld operand %d: offset %lld, expected %lld",
                         what, (long long)i, k, (long long)got[k], (long long)want[k]);
        for (int k = nops; k < RMK_MAX_OPS; k++)
            cr_assert_eq(got[k], 0, "%s: unused operand %d has offset %lld", what, k,
                         (long long)got[k]);
    }
}

Test(cuda_indexing, contiguous_operands_coalesce_to_one_dim) {
    int64_t shape[4] = {3, 4, 5, 6}, st[RMK_MAX_OPS][RMK_MAX_DIMS];
    for (int k = 0; k < 3; k++) rmk_contig_strides(4, shape, st[k]);
    rmk_plan p;
    rmk_plan_build(&p, 4, shape, 3, (const int64_t(*)[RMK_MAX_DIMS])st);
    cr_assert_eq(p.nd, 1);
    cr_assert_eq(p.shape[0], 360);
    for (int k = 0; k < 3; k++) cr_assert_eq(p.st[k][0], 1);
    check_plan(4, shape, 3, (const int64_t(*)[RMK_MAX_DIMS])st, "contiguous");
}

Test(cuda_indexing, bias_add_keeps_two_dims_with_a_zero_stride) {
    /* y (N, C) = a (N, C) + b (C): b broadcast along N */
    int64_t shape[2] = {7, 5}, bshape[1] = {5}, bst[1] = {1}, st[RMK_MAX_OPS][RMK_MAX_DIMS];
    rmk_contig_strides(2, shape, st[0]);
    rmk_contig_strides(2, shape, st[1]);
    rmk_bcast_strides(1, bshape, bst, 2, st[2]);
    cr_assert_eq(st[2][0], 0);
    cr_assert_eq(st[2][1], 1);
    rmk_plan p;
    rmk_plan_build(&p, 2, shape, 3, (const int64_t(*)[RMK_MAX_DIMS])st);
    cr_assert_eq(p.nd, 2);
    check_plan(2, shape, 3, (const int64_t(*)[RMK_MAX_DIMS])st, "bias add");
}

Test(cuda_indexing, scalar_and_zero_dim_plans) {
    int64_t st[RMK_MAX_OPS][RMK_MAX_DIMS] = {{0}};
    rmk_plan p;
    rmk_plan_build(&p, 0, NULL, 2, (const int64_t(*)[RMK_MAX_DIMS])st);
    cr_assert_eq(p.nd, 1);
    cr_assert_eq(p.shape[0], 1);
    int64_t off[RMK_MAX_OPS];
    rmk_plan_offsets(&p, 0, off);
    cr_assert_eq(off[0], 0);
    cr_assert_eq(off[1], 0);
    /* all size-1 dims with odd strides: one element at offset 0 */
    int64_t ones[3] = {1, 1, 1};
    int64_t st2[RMK_MAX_OPS][RMK_MAX_DIMS] = {{9, 7, 5}, {3, 2, 1}};
    rmk_plan_build(&p, 3, ones, 2, (const int64_t(*)[RMK_MAX_DIMS])st2);
    cr_assert_eq(p.nd, 1);
    rmk_plan_offsets(&p, 0, off);
    cr_assert_eq(off[0] + off[1], 0);
}

Test(cuda_indexing, flat_plan_is_one_unit_stride_dim) {
    rmk_plan p;
    int64_t st[RMK_MAX_OPS][RMK_MAX_DIMS] = {{1}};
    int64_t n = 1000;
    rmk_plan_build(&p, 1, &n, 1, (const int64_t(*)[RMK_MAX_DIMS])st);
    cr_assert_eq(p.nd, 1);
    cr_assert_eq(p.shape[0], 1000);
    cr_assert_eq(p.st[0][0], 1);
}

/* Random views: each operand is a permuted, sliced or broadcast layout of
 * y's shape; the plan must give the same offsets as the naive walk. */
Test(cuda_indexing, random_strided_and_broadcast_views) {
    srand(1234);
    for (int trial = 0; trial < 400; trial++) {
        int nd = 1 + rand() % 5;
        int64_t shape[RMK_MAX_DIMS];
        for (int d = 0; d < nd; d++) shape[d] = 1 + rand() % 4;
        int nops = 1 + rand() % RMK_MAX_OPS;
        int64_t st[RMK_MAX_OPS][RMK_MAX_DIMS];
        for (int k = 0; k < nops; k++) {
            /* a buffer with a random dim order and a padded innermost stride */
            int perm[RMK_MAX_DIMS];
            for (int d = 0; d < nd; d++) perm[d] = d;
            for (int d = nd - 1; d > 0; d--) {
                int j = rand() % (d + 1), t = perm[d];
                perm[d] = perm[j];
                perm[j] = t;
            }
            int64_t s = 1 + rand() % 2;
            for (int m = nd - 1; m >= 0; m--) {
                st[k][perm[m]] = s;
                s *= shape[perm[m]] + rand() % 2;
            }
            for (int d = 0; d < nd; d++)
                if (rand() % 4 == 0) st[k][d] = 0; /* broadcast along d */
        }
        char what[64];
        snprintf(what, sizeof what, "trial %d", trial);
        check_plan(nd, shape, nops, (const int64_t(*)[RMK_MAX_DIMS])st, what);
    }
}

Test(cuda_indexing, broadcast_strides_align_right) {
    int64_t tshape[2] = {1, 4}, tst[2] = {4, 1}, out[3];
    rmk_bcast_strides(2, tshape, tst, 3, out);
    cr_assert_eq(out[0], 0); /* missing dim */
    cr_assert_eq(out[1], 0); /* size 1 */
    cr_assert_eq(out[2], 1);
}

/* A masked sum through the (O, R, I) passes the cuda wrapper runs, each pass
 * as the kernels compute it, against the direct sum. */
static void passes_sum(int nd, const int64_t *shape, const bool *mask, const double *x, double *y) {
    rm_groups g;
    rm_groups_make(nd, shape, mask, &g);
    int64_t n = numel(nd, shape);
    double *cur = malloc(sizeof(double) * (size_t)(n ? n : 1));
    memcpy(cur, x, sizeof(double) * (size_t)n);
    int64_t O, R, I;
    while (rm_groups_next_pass(&g, &O, &R, &I)) {
        double *nxt = calloc((size_t)(O * I > 0 ? O * I : 1), sizeof(double));
        for (int64_t o = 0; o < O; o++)
            for (int64_t i = 0; i < I; i++)
                for (int64_t r = 0; r < R; r++) nxt[o * I + i] += cur[(o * R + r) * I + i];
        free(cur);
        cur = nxt;
    }
    int64_t m = 1;
    for (int d = 0; d < nd; d++)
        if (!mask[d]) m *= shape[d];
    memcpy(y, cur, sizeof(double) * (size_t)m);
    free(cur);
}

Test(cuda_indexing, reduction_passes_equal_the_direct_sum) {
    srand(99);
    for (int trial = 0; trial < 300; trial++) {
        int nd = 1 + rand() % 5;
        int64_t shape[RMK_MAX_DIMS], st[RMK_MAX_DIMS];
        bool mask[RMK_MAX_DIMS];
        for (int d = 0; d < nd; d++) {
            shape[d] = 1 + rand() % 4;
            mask[d] = rand() % 2;
        }
        rmk_contig_strides(nd, shape, st);
        int64_t n = numel(nd, shape), m = 1, kst[RMK_MAX_DIMS], kshape[RMK_MAX_DIMS];
        for (int d = 0; d < nd; d++) {
            kshape[d] = mask[d] ? 1 : shape[d];
            if (!mask[d]) m *= shape[d];
        }
        rmk_contig_strides(nd, kshape, kst);
        double *x = malloc(sizeof(double) * (size_t)n), *want = calloc((size_t)m, sizeof(double)),
               *got = calloc((size_t)m, sizeof(double));
        for (int64_t i = 0; i < n; i++) x[i] = (double)(rand() % 1000);
        for (int64_t i = 0; i < n; i++) { /* direct: scatter into the keepdim index */
            int64_t rem = i, o = 0;
            for (int d = nd - 1; d >= 0; d--) {
                int64_t j = rem % shape[d];
                rem /= shape[d];
                if (!mask[d]) o += j * kst[d];
            }
            want[o] += x[i];
        }
        passes_sum(nd, shape, mask, x, got);
        for (int64_t i = 0; i < m; i++)
            cr_assert_eq(got[i], want[i], "trial %d: element %lld is %g, expected %g", trial,
                         (long long)i, got[i], want[i]);
        free(x);
        free(want);
        free(got);
    }
}

Test(cuda_indexing, reduction_groups_merge_neighbours) {
    /* dims 0 and 2 of (2, 3, 4) reduced: two passes, innermost first */
    int64_t shape[3] = {2, 3, 4}, O, R, I;
    bool mask[3] = {true, false, true};
    rm_groups g;
    rm_groups_make(3, shape, mask, &g);
    cr_assert_eq(g.n, 3);
    cr_assert_eq(rm_groups_nred(&g), 2);
    cr_assert(rm_groups_next_pass(&g, &O, &R, &I));
    cr_assert(O == 6 && R == 4 && I == 1, "first pass (%lld, %lld, %lld)", (long long)O,
              (long long)R, (long long)I);
    cr_assert(rm_groups_next_pass(&g, &O, &R, &I));
    cr_assert(O == 1 && R == 2 && I == 3, "second pass (%lld, %lld, %lld)", (long long)O,
              (long long)R, (long long)I);
    cr_assert_not(rm_groups_next_pass(&g, &O, &R, &I));
}

Test(cuda_indexing, sum_split_covers_every_row_once) {
    const int64_t cases[][3] = {{1, 10000000, 1}, {4, 65537, 1},  {1000, 100, 1}, {1, 5000, 3},
                                {2, 100000, 768}, {8192, 768, 1}, {1, 1, 1},      {3, 0, 5}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int64_t O = cases[c][0], R = cases[c][1], I = cases[c][2], chunk, nch;
        rmk_sum_split(O, R, I, &chunk, &nch);
        cr_assert(chunk >= 1 && nch >= 1, "case %zu: chunk %lld nch %lld", c, (long long)chunk,
                  (long long)nch);
        cr_assert(chunk * nch >= R && chunk * (nch - 1) < (R > 0 ? R : 1),
                  "case %zu: %lld chunks of %lld do not tile R = %lld", c, (long long)nch,
                  (long long)chunk, (long long)R);
    }
    int64_t chunk, nch;
    rmk_sum_split(1, 10000000, 1, &chunk, &nch); /* sum_all of 10M: split into row chunks */
    cr_assert_gt(nch, 1);
    rmk_sum_split(100000, 32, 1, &chunk, &nch); /* many short rows: no split */
    cr_assert_eq(nch, 1);
}

Test(cuda_indexing, attention_batch_offsets_follow_the_leading_strides) {
    /* q viewed as (B=2, H=3, T, D) inside a packed (B, T, 3 * H * D) buffer: strides
     * (T * 3HD, D, 3HD, 1) with T = 5, D = 4 */
    const int64_t T = 5, D = 4, H = 3, B = 2, row = 3 * H * D;
    rmk_att_lead l = {2, {B, H}};
    rmk_att_operand o = {{T * row, D}, row, 1, 1};
    for (int64_t b = 0; b < B * H; b++) {
        int64_t bb = b / H, h = b % H;
        cr_assert_eq(rmk_att_boff(&l, &o, b), bb * T * row + h * D, "batch entry %lld",
                     (long long)b);
    }
    rmk_att_lead none = {0, {0}};
    cr_assert_eq(rmk_att_boff(&none, &o, 0), 0);
    /* grouped-query k (B, Hkv = 1, T, D) contiguous under q's (B, H = 3) leading shape: query
     * head h reads kv head h / 3 */
    rmk_att_operand kv = {{1 * T * D, T * D}, D, 1, H};
    for (int64_t b = 0; b < B * H; b++)
        cr_assert_eq(rmk_att_boff(&l, &kv, b), (b / H) * T * D, "kv entry of query entry %lld",
                     (long long)b);
    /* (B, Hkv = 2, T, D) under (B, H = 4): heads 0, 1 -> kv 0; 2, 3 -> kv 1 */
    rmk_att_lead l4 = {2, {B, 4}};
    rmk_att_operand kv2 = {{2 * T * D, T * D}, D, 1, 2};
    for (int64_t b = 0; b < B * 4; b++)
        cr_assert_eq(rmk_att_boff(&l4, &kv2, b), (b / 4) * 2 * T * D + (b % 4 / 2) * T * D,
                     "kv entry of query entry %lld", (long long)b);
}

Test(cuda_indexing, attention_head_classes) {
    cr_assert_eq(rmk_att_head_class(1, 1), 32);
    cr_assert_eq(rmk_att_head_class(32, 16), 32);
    cr_assert_eq(rmk_att_head_class(33, 16), 64);
    cr_assert_eq(rmk_att_head_class(64, 64), 64);
    cr_assert_eq(rmk_att_head_class(64, 100), 128);
    cr_assert_eq(rmk_att_head_class(256, 200), 256);
    cr_assert_eq(rmk_att_head_class(257, 1), 0);
}

Test(cuda_indexing, grid_sizes) {
    cr_assert_eq(rmk_blocks(0, 256), 0);
    cr_assert_eq(rmk_blocks(1, 256), 1);
    cr_assert_eq(rmk_blocks(256, 256), 1);
    cr_assert_eq(rmk_blocks(257, 256), 2);
    cr_assert_eq(rmk_blocks((int64_t)1 << 40, 256), RMK_MAX_BLOCKS);
}

/* The plans of fewer than 2^31 elements divide by multiplying (kplan.h's
 * rmk_fastdiv_magic): every divisor class (small, powers of two and their
 * neighbours, large, random) at the indices where rounding would show. */
static void check_fastdiv(uint32_t d, uint32_t i) {
    uint32_t mul, shr;
    rmk_fastdiv_magic(d, &mul, &shr);
    uint32_t q = rmk_umulhi(i, mul) >> shr;
    cr_assert_eq(q, i / d, "%u / %u: %u by multiplying, %u by dividing", i, d, q, i / d);
}

Test(cuda_indexing, division_by_multiplying_is_exact_below_2_to_31) {
    const uint32_t top = 0x7fffffffu;
    srand(99);
    for (uint32_t d = 2; d < 5000; d++) {
        uint32_t k = top / d;
        check_fastdiv(d, 0);
        check_fastdiv(d, d - 1);
        check_fastdiv(d, d);
        check_fastdiv(d, top);
        check_fastdiv(d, k * d);
        check_fastdiv(d, k * d - 1);
    }
    for (int l = 1; l < 31; l++)
        for (int e = -1; e <= 1; e++) {
            uint32_t d = (1u << l) + (uint32_t)e;
            if (d < 2) continue;
            for (uint32_t i = 0; i < 300; i++) check_fastdiv(d, i);
            check_fastdiv(d, top);
            check_fastdiv(d, (top / d) * d - 1);
        }
    for (int t = 0; t < 200000; t++) {
        uint32_t d = ((uint32_t)rand() ^ ((uint32_t)rand() << 16)) & top;
        uint32_t i = ((uint32_t)rand() ^ ((uint32_t)rand() << 16)) & top;
        if (d < 2) continue;
        check_fastdiv(d, i);
        check_fastdiv(d, (i / d) * d);
        if (i >= d) check_fastdiv(d, (i / d) * d - 1);
    }
}

/* Plans at the 2^31 boundary: below it the 32-bit divisions, at and above it the 64-bit
 * ones; the offsets of sampled indices (the first, the last, around every dim's wrap)
 * against the naive walk. */
Test(cuda_indexing, plans_on_both_sides_of_2_to_31_elements) {
    const int64_t shapes[3][3] = {{1024, 2047, 1023}, {1024, 2048, 1024}, {3, 65537, 16411}};
    for (int c = 0; c < 3; c++) {
        const int64_t *shape = shapes[c];
        int64_t st[RMK_MAX_OPS][RMK_MAX_DIMS];
        st[0][0] = 1, st[0][1] = shape[0], st[0][2] = shape[0] * shape[1]; /* transposed */
        rmk_contig_strides(3, shape, st[1]);
        rmk_plan p;
        rmk_plan_build(&p, 3, shape, 2, (const int64_t(*)[RMK_MAX_DIMS])st);
        int64_t n = numel(3, shape);
        cr_assert_eq(p.small, n < ((int64_t)1 << 31), "case %d: small flag", c);
        int64_t probe[] = {0,
                           1,
                           shape[2] - 1,
                           shape[2],
                           shape[1] * shape[2] - 1,
                           shape[1] * shape[2],
                           n / 2,
                           n - shape[2],
                           n - 2,
                           n - 1};
        srand(5 + c);
        for (int t = 0; t < 2000 + 10; t++) {
            int64_t i = t < 10 ? probe[t] : (((int64_t)rand() << 31) ^ rand()) % n;
            int64_t want[RMK_MAX_OPS], got[RMK_MAX_OPS];
            naive_offsets(3, shape, 2, (const int64_t(*)[RMK_MAX_DIMS])st, i, want);
            rmk_plan_offsets(&p, i, got);
            cr_assert(got[0] == want[0] && got[1] == want[1],
                      "case %d index %lld: offsets %lld %lld, expected %lld %lld", c, (long long)i,
                      (long long)got[0], (long long)got[1], (long long)want[0], (long long)want[1]);
        }
    }
}
