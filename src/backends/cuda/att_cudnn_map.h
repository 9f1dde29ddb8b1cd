/* src/backends/cuda/att_cudnn_map.h — whether an attention call can go to cuDNN's fused
 * SDPA (attention_cudnn.cu) and, when it can, its description in cuDNN's terms: 4-D
 * (batch, heads, rows, columns) dims and element strides of every operand. Plain C (no
 * CUDA, no cuDNN), like kplan.h, so that tests/test_cuda_cudnn_map.c checks the decision
 * and the strides on any machine; the description is also the key of the cache of built
 * cuDNN graphs (compared with memcmp: every byte is set).
 *
 * remat hands attention its operands as (..., T, C) views over q's leading dims
 * (rmk_att_lead, rmk_att_operand: any strides; the GPT's q, k and v are per-head views of
 * one packed (B, T, 3C) projection). cuDNN takes exactly two leading dims, so the leading
 * dims are collapsed as a copy plan would be: size-1 dims dropped, a dim merged into its
 * outer neighbour where every operand's strides allow it; more than two left: not mapped.
 * The lse is remat's own (nb, Tq) contiguous f32 tensor, in cuDNN's convention for its
 * Stats (the natural log of the row's sum of exp(scale · q·k), the max folded in), so it
 * maps to (B, H, Tq, 1) with strides (H·Tq, Tq, 1, 1) and either library's forward serves
 * the other's backward. */
#ifndef REMAT_CUDA_ATT_CUDNN_MAP_H
#define REMAT_CUDA_ATT_CUDNN_MAP_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "core/kernels/matmul.h"
#include "kplan.h"

/* The operands in remat's order (rmk_attention_bwd's): the forward has the first four. */
enum {
    RMK_CA_Q,
    RMK_CA_K,
    RMK_CA_V,
    RMK_CA_O,
    RMK_CA_DO,
    RMK_CA_DQ,
    RMK_CA_DK,
    RMK_CA_DV,
    RMK_CA_NOPS
};
/* cuDNN's mask: none, causal aligned top-left (row i sees keys j <= i), bottom-right
 * (j <= i + Tk - Tq). */
enum { RMK_CA_MASK_NONE, RMK_CA_MASK_TOP_LEFT, RMK_CA_MASK_BOTTOM_RIGHT };
/* The largest head size mapped: cuDNN's flash kernels take up to 128 forward and backward on
 * sm_80 and sm_90 (larger ones only on some GPUs and versions: left to remat's kernels). */
#define RMK_CA_MAX_HEAD 128

typedef struct rmk_cudnn_att {
    int32_t dev;  /* the CUDA device (graphs are built for one GPU) */
    int32_t bwd;  /* 0: forward (q, k, v, o), 1: backward (all 8 operands) */
    int32_t mask; /* RMK_CA_MASK_* */
    int32_t pad_; /* 0: the key is compared byte by byte */
    int64_t B, H, Tq, Tk, D, Dv;
    int64_t st[RMK_CA_NOPS][4]; /* element strides (B, H, T, column); 0 past the used ops */
    double scale;
} rmk_cudnn_att;

/* ---- the leading dims as (B, H) ------------------------------------------------------------ */
/* Collapses lead's dims for the n operands ops (their bst): B and H and each operand's two
 * strides in sb, sh. false when more than two dims are left. A dim of size 1 gets the stride
 * a packed tensor would have (rows · row stride, heads · head stride): cuDNN sees the usual
 * strides, and the key does not depend on a stride nothing multiplies. */
static inline bool rmk_ca_lead(const rmk_att_lead *l, const rmk_att_operand *ops, int n,
                               int64_t rows, int64_t *B, int64_t *H, int64_t *sb, int64_t *sh) {
    int64_t ext[RMK_MAX_DIMS], st[RMK_CA_NOPS][RMK_MAX_DIMS];
    int m = 0;
    for (int d = 0; d < l->nlead; d++) {
        if (l->shape[d] == 1) continue;
        bool merge = m > 0;
        for (int k = 0; k < n && merge; k++) merge = st[k][m - 1] == ops[k].bst[d] * l->shape[d];
        if (merge) { /* the outer dim d' = m - 1 steps over whole runs of dim d */
            ext[m - 1] *= l->shape[d];
            for (int k = 0; k < n; k++) st[k][m - 1] = ops[k].bst[d];
            continue;
        }
        ext[m] = l->shape[d];
        for (int k = 0; k < n; k++) st[k][m] = ops[k].bst[d];
        m++;
    }
    if (m > 2) return false;
    *B = m == 2 ? ext[0] : 1;
    *H = m >= 1 ? ext[m - 1] : 1;
    for (int k = 0; k < n; k++) {
        sh[k] = m >= 1 ? st[k][m - 1] : rows * ops[k].rs;
        sb[k] = m == 2 ? st[k][0] : *H * sh[k];
    }
    return true;
}

/* ---- the decision -------------------------------------------------------------------------- */
/* Operand k's rows (Tq or Tk) and columns (D or Dv). */
static inline int64_t rmk_ca_rows(const rmk_cudnn_att *a, int k) {
    return k == RMK_CA_K || k == RMK_CA_V || k == RMK_CA_DK || k == RMK_CA_DV ? a->Tk : a->Tq;
}
static inline int64_t rmk_ca_cols(const rmk_cudnn_att *a, int k) {
    return k == RMK_CA_V || k == RMK_CA_O || k == RMK_CA_DO || k == RMK_CA_DV ? a->Dv : a->D;
}

/* The call's dtype, sizes and mask into a: NULL, or why cuDNN cannot take them. */
static inline const char *rmk_ca_dims(rmk_cudnn_att *a, int dt, const rm_attention_dims *d) {
    if (dt != 4) return "not bf16";
    if (d->group != 1) return "grouped-query heads";
    if (d->nb < 1 || d->Tq < 1 || d->Tk < 1) return "an empty operand";
    if (d->D % 8 || d->Dv % 8 || d->D > RMK_CA_MAX_HEAD || d->Dv > RMK_CA_MAX_HEAD)
        return "head size not a multiple of 8 up to 128";
    if (!d->causal) a->mask = RMK_CA_MASK_NONE;
    else if (d->off == 0) a->mask = RMK_CA_MASK_TOP_LEFT;
    else if (d->off == d->Tk - d->Tq && d->Tk > d->Tq) a->mask = RMK_CA_MASK_BOTTOM_RIGHT;
    else return "causal mask offset";
    a->Tq = d->Tq;
    a->Tk = d->Tk;
    a->D = d->D;
    a->Dv = d->Dv;
    a->scale = d->scale;
    return NULL;
}

/* Operand k's strides into a->st[k] from its (B, H) strides sb, sh and its row and column
 * strides: NULL, or why cuDNN cannot take them. */
static inline const char *rmk_ca_strides(rmk_cudnn_att *a, int k, const rmk_att_operand *o,
                                         int64_t sb, int64_t sh) {
    /* a single row's stride multiplies nothing: the packed one */
    const int64_t s[4] = {sb, sh, rmk_ca_rows(a, k) > 1 ? o->rs : rmk_ca_cols(a, k), 1};
    if (o->cs != 1) return "a column stride other than 1";
    for (int j = 0; j < 3; j++)
        if (s[j] % 8 || s[j] <= 0) return "a stride not a positive multiple of 8 elements";
    memcpy(a->st[k], s, sizeof s);
    return NULL;
}

/* Fills a for an attention call of dtype dt (remat's code: 4 bf16) on device dev: the
 * forward (bwd false: ops and ptrs q, k, v, o) or the backward (q, k, v, o, dO, dq, dk, dv;
 * a NULL gradient pointer is written by cuDNN into packed (B, H, T, D) scratch, so its
 * strides are those). lse: the (nb, Tq) f32 log-sum-exp. NULL when cuDNN can take the call,
 * else why not (for the diagnostics: REMAT_CUDNN_VERBOSE). cuDNN wants the column stride 1,
 * every other stride and every pointer 16-byte aligned. */
static inline const char *rmk_cudnn_att_map(rmk_cudnn_att *a, int dev, bool bwd, int dt,
                                            const rm_attention_dims *d, const rmk_att_lead *lead,
                                            const rmk_att_operand *ops, const void *const *ptrs,
                                            const void *lse) {
    memset(a, 0, sizeof *a);
    const char *why = rmk_ca_dims(a, dt, d);
    if (why) return why;
    const int n = bwd ? RMK_CA_NOPS : RMK_CA_DO;
    /* the operands that exist (a NULL gradient gets packed scratch) */
    rmk_att_operand live[RMK_CA_NOPS];
    int idx[RMK_CA_NOPS], nl = 0;
    for (int k = 0; k < n; k++) {
        if (!ptrs[k]) {
            if (k < RMK_CA_DQ) return "a missing input";
            continue;
        }
        if (ops[k].hdiv != 1) return "grouped-query heads";
        if ((uintptr_t)ptrs[k] % 16) return "an operand not 16-byte aligned";
        live[nl] = ops[k];
        idx[nl++] = k;
    }
    if ((uintptr_t)lse % 16) return "the lse not 16-byte aligned";
    int64_t sb[RMK_CA_NOPS], sh[RMK_CA_NOPS];
    if (!rmk_ca_lead(lead, live, nl, d->Tq > d->Tk ? d->Tq : d->Tk, &a->B, &a->H, sb, sh))
        return "leading dims that do not collapse to (batch, heads)";
    a->dev = dev;
    a->bwd = bwd;
    for (int i = 0; i < nl; i++)
        if ((why = rmk_ca_strides(a, idx[i], &live[i], sb[i], sh[i]))) return why;
    for (int k = RMK_CA_DQ; k < n; k++) /* scratch gradients: packed */
        if (!ptrs[k]) {
            const int64_t rows = rmk_ca_rows(a, k), cols = rmk_ca_cols(a, k);
            const int64_t s[4] = {a->H * rows * cols, rows * cols, cols, 1};
            memcpy(a->st[k], s, sizeof s);
        }
    return NULL;
}

/* Bytes of packed scratch for gradient k (RMK_CA_DQ..DV) of a. */
static inline size_t rmk_cudnn_att_grad_bytes(const rmk_cudnn_att *a, int k) {
    return (size_t)(a->B * a->H * rmk_ca_rows(a, k) * rmk_ca_cols(a, k)) * 2; /* bf16 */
}

#endif /* REMAT_CUDA_ATT_CUDNN_MAP_H */
