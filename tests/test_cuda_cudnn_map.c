/* tests/test_cuda_cudnn_map.c — which attention calls go to cuDNN's SDPA and with what
 * 4-D dims and strides (src/backends/cuda/att_cudnn_map.h), checked on the cpu: plain C, no
 * GPU, no CUDA, no cuDNN, so it runs in every build. What cuDNN then computes is checked on
 * a GPU (the attention suites with REMAT_CUDA_ATTENTION=cudnn: bench/cuda/gpu_window.sh).
 *
 * Pointers are addresses only (never dereferenced): their alignment is part of the
 * decision. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "backends/cuda/att_cudnn_map.h"

#define BASE ((uintptr_t)1 << 20) /* a 16-byte aligned address */
#define AT(bytes) ((void *)(BASE + (uintptr_t)(bytes)))

static rm_attention_dims dims(int64_t nb, int64_t Tq, int64_t Tk, int64_t D, bool causal,
                              int64_t off) {
    rm_attention_dims d = {nb, Tq, Tk, D, D, 1, causal, off, 0.125};
    return d;
}

/* A contiguous (..., T, D) operand over lead. */
static rmk_att_operand packed(const rmk_att_lead *l, int64_t T, int64_t D) {
    rmk_att_operand o = {{0}, D, 1, 1};
    int64_t s = T * D;
    for (int d = l->nlead - 1; d >= 0; d--) {
        o.bst[d] = s;
        s *= l->shape[d];
    }
    return o;
}

/* GPT's attention: q, k, v per-head views of one packed (B, T, 3C) projection, y (B, H, T, D)
 * contiguous, as remat's transformer passes them. */
typedef struct gpt {
    rmk_att_lead lead;
    rmk_att_operand ops[RMK_CA_NOPS];
    const void *ptrs[RMK_CA_NOPS];
} gpt;

static gpt gpt_call(int64_t B, int64_t H, int64_t T, int64_t D) {
    const int64_t C = H * D;
    gpt g;
    memset(&g, 0, sizeof g);
    g.lead.nlead = 2;
    g.lead.shape[0] = B;
    g.lead.shape[1] = H;
    for (int k = 0; k < 3; k++) { /* q, k, v, and dq, dk, dv of the packed gradient */
        rmk_att_operand o = {{T * 3 * C, D}, 3 * C, 1, 1};
        g.ops[k] = g.ops[RMK_CA_DQ + k] = o;
        g.ptrs[k] = AT(2 * k * C);
        g.ptrs[RMK_CA_DQ + k] = AT((1 << 24) + 2 * k * C);
    }
    g.ops[RMK_CA_O] = g.ops[RMK_CA_DO] = packed(&g.lead, T, D);
    g.ptrs[RMK_CA_O] = AT(1 << 26);
    g.ptrs[RMK_CA_DO] = AT(1 << 27);
    return g;
}

static const char *map(rmk_cudnn_att *a, bool bwd, int dt, const rm_attention_dims *d,
                       const gpt *g) {
    return rmk_cudnn_att_map(a, 0, bwd, dt, d, &g->lead, g->ops, g->ptrs, AT(1 << 28));
}

Test(cuda_cudnn_map, gpt_packed_qkv) {
    const int64_t B = 8, H = 12, T = 1024, D = 64, C = H * D;
    gpt g = gpt_call(B, H, T, D);
    rm_attention_dims d = dims(B * H, T, T, D, true, 0);
    rmk_cudnn_att a;
    cr_assert_null(map(&a, false, 4, &d, &g));
    cr_assert_eq(a.B, B);
    cr_assert_eq(a.H, H);
    cr_assert_eq(a.mask, RMK_CA_MASK_TOP_LEFT);
    for (int k = 0; k < 3; k++) {
        cr_assert_eq(a.st[k][0], T * 3 * C, "op %d", k);
        cr_assert_eq(a.st[k][1], D);
        cr_assert_eq(a.st[k][2], 3 * C);
        cr_assert_eq(a.st[k][3], 1);
    }
    cr_assert_eq(a.st[RMK_CA_O][0], H * T * D);
    cr_assert_eq(a.st[RMK_CA_O][1], T * D);
    cr_assert_eq(a.st[RMK_CA_O][2], D);
    /* the forward leaves the backward's operands out of the key */
    for (int k = RMK_CA_DO; k < RMK_CA_NOPS; k++)
        for (int j = 0; j < 4; j++) cr_assert_eq(a.st[k][j], 0);
    cr_assert_null(map(&a, true, 4, &d, &g));
    cr_assert_eq(a.st[RMK_CA_DK][2], 3 * C);
    cr_assert_eq(a.st[RMK_CA_DO][1], T * D);
}

Test(cuda_cudnn_map, only_what_cudnn_takes) {
    gpt g = gpt_call(2, 3, 16, 8);
    rmk_cudnn_att a;
    rm_attention_dims d = dims(6, 16, 16, 8, true, 0);
    cr_assert_not_null(map(&a, false, 0, &d, &g), "f32 stays on remat's kernels");
    cr_assert_not_null(map(&a, false, 1, &d, &g), "f64 too");
    d.group = 3;
    cr_assert_not_null(map(&a, false, 4, &d, &g), "grouped-query heads");
    d = dims(6, 16, 16, 8, true, 3);
    cr_assert_not_null(map(&a, false, 4, &d, &g), "a causal offset that is neither corner");
    d = dims(6, 16, 16, 12, false, 0);
    cr_assert_not_null(map(&a, false, 4, &d, &g), "head size 12");
    d = dims(6, 16, 16, 256, false, 0);
    cr_assert_not_null(map(&a, false, 4, &d, &g), "head size 256");
    d = dims(6, 16, 16, 8, false, 0);
    cr_assert_null(map(&a, false, 4, &d, &g));
    cr_assert_eq(a.mask, RMK_CA_MASK_NONE);
    gpt bad = g;
    bad.ptrs[RMK_CA_K] = AT(2); /* one bf16 element off */
    cr_assert_not_null(map(&a, false, 4, &d, &bad), "an unaligned k");
    bad = g;
    bad.ops[RMK_CA_V].rs = 12; /* rows 24 bytes apart */
    cr_assert_not_null(map(&a, false, 4, &d, &bad), "an unaligned row stride");
    bad = g;
    bad.ops[RMK_CA_Q].cs = 16; /* a transposed q */
    bad.ops[RMK_CA_Q].rs = 1;
    cr_assert_not_null(map(&a, false, 4, &d, &bad), "columns not contiguous");
    bad = g;
    bad.ptrs[RMK_CA_K] = NULL;
    cr_assert_not_null(map(&a, false, 4, &d, &bad), "a missing input");
    cr_assert_not_null(rmk_cudnn_att_map(&a, 0, false, 4, &d, &g.lead, g.ops, g.ptrs, AT(4)),
                       "an unaligned lse");
}

Test(cuda_cudnn_map, causal_corners) {
    rmk_att_lead l = {1, {4}};
    rmk_att_operand ops[RMK_CA_NOPS];
    const void *ptrs[RMK_CA_NOPS] = {AT(0), AT(1 << 16), AT(1 << 17), AT(1 << 18)};
    ops[RMK_CA_Q] = ops[RMK_CA_O] = packed(&l, 4, 16);
    ops[RMK_CA_K] = ops[RMK_CA_V] = packed(&l, 32, 16);
    rmk_cudnn_att a;
    rm_attention_dims d = dims(4, 4, 32, 16, true, 28); /* a KV cache's last 4 queries */
    cr_assert_null(rmk_cudnn_att_map(&a, 0, false, 4, &d, &l, ops, ptrs, AT(1 << 19)));
    cr_assert_eq(a.mask, RMK_CA_MASK_BOTTOM_RIGHT);
    cr_assert_eq(a.B, 1);
    cr_assert_eq(a.H, 4);
    cr_assert_eq(a.st[RMK_CA_K][1], 32 * 16);
    cr_assert_eq(a.st[RMK_CA_Q][1], 4 * 16);
    d = dims(4, 4, 32, 16, true, 0);
    cr_assert_null(rmk_cudnn_att_map(&a, 0, false, 4, &d, &l, ops, ptrs, AT(1 << 19)));
    cr_assert_eq(a.mask, RMK_CA_MASK_TOP_LEFT);
}

Test(cuda_cudnn_map, leading_dims_collapse) {
    /* (2, 3, 4) contiguous leading dims: one run of 24 entries */
    rmk_att_lead l = {3, {2, 3, 4}};
    rmk_att_operand ops[RMK_CA_NOPS];
    const void *ptrs[RMK_CA_NOPS] = {AT(0), AT(1 << 16), AT(1 << 17), AT(1 << 18)};
    for (int k = 0; k < 4; k++) ops[k] = packed(&l, 8, 16);
    rm_attention_dims d = dims(24, 8, 8, 16, true, 0);
    rmk_cudnn_att a, b;
    cr_assert_null(rmk_cudnn_att_map(&a, 0, false, 4, &d, &l, ops, ptrs, AT(1 << 19)));
    cr_assert_eq(a.B * a.H, 24);
    cr_assert_eq(a.st[RMK_CA_Q][1], 8 * 16);
    cr_assert_eq(a.st[RMK_CA_Q][0], a.H * 8 * 16);
    /* the same data seen as (1, 24): the same key, byte for byte (a size-1 dim's stride is
     * not part of it) */
    rmk_att_lead l2 = {2, {1, 24}};
    rmk_att_operand ops2[RMK_CA_NOPS];
    for (int k = 0; k < 4; k++) {
        ops2[k] = packed(&l2, 8, 16);
        ops2[k].bst[0] = 12345 * 8; /* whatever a size-1 dim's stride is */
    }
    cr_assert_null(rmk_cudnn_att_map(&b, 0, false, 4, &d, &l2, ops2, ptrs, AT(1 << 19)));
    cr_assert_eq(memcmp(&a, &b, sizeof a), 0);
    /* k with its two outer dims swapped: three dims that no merge joins */
    ops[RMK_CA_K].bst[0] = 4 * 8 * 16;
    ops[RMK_CA_K].bst[1] = 2 * 4 * 8 * 16;
    cr_assert_not_null(rmk_cudnn_att_map(&a, 0, false, 4, &d, &l, ops, ptrs, AT(1 << 19)));
    /* (B, H) with heads outermost in memory, as a (T-major) transposed view: two dims, mapped */
    rmk_att_lead l3 = {2, {2, 3}};
    rmk_att_operand t = {{8 * 16, 2 * 8 * 16}, 16, 1, 1};
    for (int k = 0; k < 4; k++) ops[k] = t;
    d = dims(6, 8, 8, 16, false, 0);
    cr_assert_null(rmk_cudnn_att_map(&a, 0, false, 4, &d, &l3, ops, ptrs, AT(1 << 19)));
    cr_assert_eq(a.B, 2);
    cr_assert_eq(a.H, 3);
    cr_assert_eq(a.st[RMK_CA_V][0], 8 * 16);
    cr_assert_eq(a.st[RMK_CA_V][1], 2 * 8 * 16);
}

Test(cuda_cudnn_map, missing_gradients_get_packed_scratch) {
    const int64_t B = 2, H = 3, T = 16, D = 8;
    gpt g = gpt_call(B, H, T, D);
    g.ptrs[RMK_CA_DQ] = NULL; /* dq not wanted */
    rm_attention_dims d = dims(B * H, T, T, D, true, 0);
    rmk_cudnn_att a;
    cr_assert_null(map(&a, true, 4, &d, &g));
    cr_assert_eq(a.st[RMK_CA_DQ][0], H * T * D);
    cr_assert_eq(a.st[RMK_CA_DQ][1], T * D);
    cr_assert_eq(a.st[RMK_CA_DQ][2], D);
    cr_assert_eq(a.st[RMK_CA_DQ][3], 1);
    cr_assert_eq(a.st[RMK_CA_DK][2], 3 * H * D, "dk keeps its own strides");
    cr_assert_eq(rmk_cudnn_att_grad_bytes(&a, RMK_CA_DQ), (size_t)(B * H * T * D * 2));
}

Test(cuda_cudnn_map, key_tells_calls_apart) {
    gpt g = gpt_call(2, 3, 16, 8);
    rm_attention_dims d = dims(6, 16, 16, 8, true, 0);
    rmk_cudnn_att a, b;
    cr_assert_null(map(&a, false, 4, &d, &g));
    cr_assert_null(map(&b, false, 4, &d, &g));
    cr_assert_eq(memcmp(&a, &b, sizeof a), 0, "the same call, the same key");
    d.scale = 0.25;
    cr_assert_null(map(&b, false, 4, &d, &g));
    cr_assert_neq(memcmp(&a, &b, sizeof a), 0, "the scale is in the key");
    d.scale = 0.125;
    cr_assert_null(rmk_cudnn_att_map(&b, 1, false, 4, &d, &g.lead, g.ops, g.ptrs, AT(1 << 28)));
    cr_assert_neq(memcmp(&a, &b, sizeof a), 0, "the device is in the key");
    cr_assert_null(map(&b, true, 4, &d, &g));
    cr_assert_neq(memcmp(&a, &b, sizeof a), 0, "forward and backward differ");
}
