/* src/ops/registry.c — the op registry (registry.h): one list of every
 * public op's descriptor. */
#include <stdio.h>
#include <string.h>

#include "registry.h"

/* Descriptors (defined in the op files). */
extern const rm_op_desc rm_op_neg, rm_op_exp, rm_op_log, rm_op_sqrt, rm_op_tanh, rm_op_sigmoid,
    rm_op_relu, rm_op_gelu, rm_op_bias_gelu, rm_op_silu, rm_op_pow_scalar, rm_op_add_scalar,
    rm_op_sub_scalar, rm_op_mul_scalar, rm_op_div_scalar, rm_op_rsub_scalar;
extern const rm_op_desc rm_op_add, rm_op_sub, rm_op_mul, rm_op_div, rm_op_pow;
extern const rm_op_desc rm_op_matmul, rm_op_linear, rm_op_attention;
extern const rm_op_desc rm_op_sum, rm_op_sum_all, rm_op_mean, rm_op_max, rm_op_mse_loss,
    rm_op_cross_entropy, rm_op_embedding;
extern const rm_op_desc rm_op_softmax, rm_op_log_softmax, rm_op_layer_norm, rm_op_rms_norm,
    rm_op_rope, rm_op_dropout;
extern const rm_op_desc rm_op_reshape, rm_op_view, rm_op_transpose, rm_op_permute, rm_op_slice,
    rm_op_expand, rm_op_unsqueeze, rm_op_squeeze, rm_op_contiguous;
extern const rm_op_desc rm_op_add_, rm_op_mul_, rm_op_mul_scalar_, rm_op_relu_, rm_op_zero_,
    rm_op_copy_;
extern const rm_op_desc rm_op_masked_fill, rm_op_where, rm_op_clone, rm_op_to_device,
    rm_op_to_dtype, rm_op_tag, rm_op_cat, rm_op_split;

#define D(sym) &rm_op_##sym
static const rm_op_desc *const k_ops[] = {
    /* unary.c */
    D(neg),
    D(exp),
    D(log),
    D(sqrt),
    D(tanh),
    D(sigmoid),
    D(relu),
    D(gelu),
    D(bias_gelu), /* bias_gelu.c */
    D(silu),
    D(pow_scalar),
    D(add_scalar),
    D(sub_scalar),
    D(mul_scalar),
    D(div_scalar),
    D(rsub_scalar),
    /* binary.c */
    D(add),
    D(sub),
    D(mul),
    D(div),
    D(pow),
    /* inplace.c */
    D(add_),
    D(mul_),
    D(mul_scalar_),
    D(relu_),
    D(zero_),
    D(copy_),
    /* reduce.c, loss.c */
    D(sum),
    D(sum_all),
    D(mean),
    D(max),
    D(mse_loss),
    D(cross_entropy),
    /* nn.c, loss.c */
    D(softmax),
    D(log_softmax),
    D(layer_norm),
    D(rms_norm),
    D(rope),
    D(dropout),
    D(embedding),
    /* matmul.c, attention.c */
    D(matmul),
    D(linear),
    D(attention),
    /* shape.c */
    D(reshape),
    D(view),
    D(transpose),
    D(permute),
    D(slice),
    D(expand),
    D(unsqueeze),
    D(squeeze),
    D(contiguous),
    /* select.c, concat.c, copy.c */
    D(masked_fill),
    D(where),
    D(cat),
    D(split),
    D(clone),
    D(to_device),
    D(to_dtype),
    /* tag.c */
    D(tag),
};
#undef D
#define N_OPS ((int)(sizeof k_ops / sizeof k_ops[0]))

int rm_op_count(void) { return N_OPS; }

const char *rm_op_name(int i) {
    if (i < 0 || i >= N_OPS) return NULL;
    return k_ops[i]->name;
}

const rm_op_desc *rm_op_desc_at(int i) { return i < 0 || i >= N_OPS ? NULL : k_ops[i]; }

int rm_op_find(const char *name) {
    for (int i = 0; i < N_OPS; i++)
        if (strcmp(rm_op_name(i), name) == 0) return i;
    return -1;
}

/* Levenshtein distance, capped: names are short. */
static int distance(const char *a, const char *b) {
    enum { CAP = 64 };
    size_t la = strnlen(a, CAP - 1), lb = strnlen(b, CAP - 1);
    int row[CAP];
    for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j];
            int best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

void rm_op_closest(const char *name, int k, char *buf, size_t n) {
    bool taken[N_OPS] = {false};
    size_t used = 0;
    buf[0] = '\0';
    for (int round = 0; round < k && round < N_OPS; round++) {
        int best = -1, best_d = 0;
        for (int i = 0; i < N_OPS; i++) {
            if (taken[i]) continue;
            int d = distance(name, rm_op_name(i));
            if (best < 0 || d < best_d) best = i, best_d = d;
        }
        taken[best] = true;
        int w = snprintf(buf + used, n - used, "%s%s", round ? ", " : "", rm_op_name(best));
        if (w < 0 || (size_t)w >= n - used) break;
        used += (size_t)w;
    }
}
