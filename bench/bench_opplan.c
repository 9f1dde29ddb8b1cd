/* bench/bench_opplan.c — the op-level planner's solve time and its predicted
 * curve beside the block-level planner's, on a chain of GPT blocks.
 *
 * One block of the shared GPT block (models/gpt_block.h: composed attention,
 * tanh GELU, dropout 0, tags on) is profiled (remat_profile_stages and
 * remat_profile_ops) on a (B, T, D) input; the profile is repeated L times
 * (every block of a GPT is the same: the op profile marks repeats same_as
 * stage 0, as remat_profile_ops does for a real chain). Then, for N budgets
 * from the smallest feasible to store-all, both planners run:
 *   op     remat_plan_create_ops   (per-op keep/recompute + rotor)
 *   block  remat_plan_create       (rotor over whole blocks)
 * and it prints per budget the predicted peak and step time of each, the
 * solve time of each (median and max over the budgets), and whether the op
 * planner's predicted time is non-increasing in the budget. Budgets bound the
 * chain's share (remat_plan_create's memory model): the same for both.
 *
 *   bench_opplan [--layers L] [--dim D] [--heads H] [--seq T] [--batch B]
 *                [--budgets N] [--profile-runs P] [--print-plan] [--lossy]
 * --lossy: one more column, the op planner allowed to keep ops as bf16
 * (remat_plan_options.lossy; the conversion rate the op profile measured) on the same
 * profile: its predicted peak and time, and the bf16 MiB it stores.
 * Defaults: the GPT (L 48, D 384, H 6, T 256, B 8), 16 budgets, 3 runs.
 * Solve times are CPU time of the process (run it with OMP_NUM_THREADS=1: one
 * thread, so preemption by other jobs does not count). Step times are the
 * model's predictions, not measurements.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "gpt_block.h"
#include "remat/remat.h"

#define MIB(b) ((double)(b) / (1024.0 * 1024.0))

typedef struct block {
    gpt_block_weights w;
    gpt_block_config cfg;
    remat_tensor *mask;
} block;

static int block_fn(void *ud, remat_tensor *const *in, int n_in, remat_tensor **out, int n_out) {
    block *b = ud;
    (void)n_in, (void)n_out;
    return gpt_block_forward(&b->w, &b->cfg, in[0], &out[0]);
}

static void block_init(block *b, int64_t D, int64_t H, int64_t T) {
    gpt_weight_spec sp[GPT_BLOCK_N_WEIGHTS];
    gpt_block_weight_specs(D, sp);
    for (int i = 0; i < GPT_BLOCK_N_WEIGHTS; i++) {
        remat_tensor *t = NULL;
        if (sp[i].kind == GPT_W_GAIN || sp[i].kind == GPT_W_SHIFT)
            CHECK(remat_full(&t, sp[i].ndim, sp[i].shape, sp[i].kind == GPT_W_GAIN ? 1.0 : 0.0,
                             REMAT_F32, REMAT_DEVICE_CPU));
        else
            CHECK(remat_rand_uniform(&t, sp[i].ndim, sp[i].shape, -1.0 / sqrt((double)sp[i].fan_in),
                                     1.0 / sqrt((double)sp[i].fan_in), REMAT_F32,
                                     REMAT_DEVICE_CPU));
        CHECK(remat_set_requires_grad(t, true));
        *gpt_block_weight_slot(&b->w, i) = t;
    }
    CHECK(gpt_causal_mask(&b->mask, T, REMAT_DEVICE_CPU));
    b->cfg = (gpt_block_config){
        .heads = (int)H, .mask = b->mask, .p_drop = 0, .gelu = REMAT_GELU_TANH, .tags = true};
}

static long arg_long(int argc, char **argv, const char *name, long dflt) {
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], name)) return strtol(argv[i + 1], NULL, 10);
    return dflt;
}

static bool arg_flag(int argc, char **argv, const char *name) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], name)) return true;
    return false;
}

int main(int argc, char **argv) {
    int L = (int)arg_long(argc, argv, "--layers", 48);
    int64_t D = arg_long(argc, argv, "--dim", 384), H = arg_long(argc, argv, "--heads", 6);
    int64_t T = arg_long(argc, argv, "--seq", 256), B = arg_long(argc, argv, "--batch", 8);
    int N = (int)arg_long(argc, argv, "--budgets", 16);
    int runs = (int)arg_long(argc, argv, "--profile-runs", 3);
    bool print_plan = arg_flag(argc, argv, "--print-plan");
    const bool lossy = arg_flag(argc, argv, "--lossy");
    const remat_plan_options popt = {.lossy = true};
    if (L < 1 || N < 2 || D < 1 || H < 1 || D % H || T < 1 || B < 1 || runs < 1) {
        fprintf(stderr, "usage: bench_opplan [--layers L] [--dim D] [--heads H] [--seq T] "
                        "[--batch B] [--budgets N>=2] [--profile-runs P] [--print-plan] "
                        "[--lossy]\n");
        return 2;
    }
    remat_manual_seed(1);
    block blk;
    memset(&blk, 0, sizeof blk);
    block_init(&blk, D, H, T);
    remat_tensor *x = NULL;
    CHECK(remat_rand_uniform(&x, 3, (int64_t[]){B, T, D}, -1, 1, REMAT_F32, REMAT_DEVICE_CPU));
    CHECK(remat_set_requires_grad(x, true));
    remat_stage st = {block_fn, &blk};
    remat_profile_options po = {.runs = runs};
    remat_profile *p1 = NULL;
    remat_op_profile *o1 = NULL;
    double t0 = now();
    CHECK(remat_profile_stages(&p1, 1, &st, x, &po));
    CHECK(remat_profile_ops(&o1, 1, &st, x, &po));
    double t_prof = now() - t0;

    /* L copies of the block */
    remat_profile *prof = NULL;
    CHECK(remat_profile_create(&prof, L));
    prof->runs = p1->runs;
    remat_op_profile ops = {
        .n_stages = L, .runs = o1->runs, .cast_bytes_per_s = o1->cast_bytes_per_s};
    ops.stages = calloc((size_t)L, sizeof *ops.stages);
    if (!ops.stages) return 1;
    for (int k = 0; k < L; k++) {
        prof->stages[k] = p1->stages[0];
        ops.stages[k] = o1->stages[0]; /* shares the op array (freed once, below) */
        ops.stages[k].same_as = 0;
    }
    /* the block-level column charges a recomputation what early stop runs, as the op level */
    CHECK(remat_profile_apply_ops(prof, &ops));
    printf("bench_opplan: GPT block D=%lld H=%lld T=%lld B=%lld (f32), %d blocks; one block: "
           "%d ops, fwd %.2f ms, bwd %.2f ms, out %.2f MiB, saved %.2f MiB (profiled in %.1f s)\n",
           (long long)D, (long long)H, (long long)T, (long long)B, L, o1->stages[0].n_ops,
           p1->stages[0].fwd_time * 1e3, p1->stages[0].bwd_time * 1e3,
           MIB(p1->stages[0].output_bytes), MIB(p1->stages[0].saved_bytes), t_prof);

    size_t lo, hi;
    {
        remat_plan *sa = NULL;
        CHECK(remat_plan_create_ops(&sa, prof, &ops, NULL, SIZE_MAX, NULL));
        lo = sa->min_budget_bytes;
        hi = sa->peak_store_all;
        remat_plan_free(sa);
    }
    double *ts_op = malloc(sizeof(double) * (size_t)N), *ts_bl = malloc(sizeof(double) * (size_t)N);
    if (!ts_op || !ts_bl) return 1;
    printf("budgets from %.2f MiB (the minimum) to %.2f MiB (store-all); predicted step time "
           "relative to store-all\n",
           MIB(lo), MIB(hi));
    printf("%10s | %10s %8s %6s %9s | %10s %8s %9s", "budget MiB", "op: peak", "time", "kind",
           "solve ms", "block: peak", "time", "solve ms");
    if (lossy) printf(" | %10s %8s %9s %9s", "lossy: peak", "time", "bf16 MiB", "solve ms");
    putchar('\n');
    double prev = INFINITY;
    bool monotone = true;
    for (int i = 0; i < N; i++) {
        size_t budget = lo + (size_t)((double)(hi - lo) * i / (N - 1));
        remat_plan *po_ = NULL, *pb = NULL;
        /* CPU time of this one thread: what the solve costs, whatever else runs */
        double a = cpu_now();
        CHECK(remat_plan_create_ops(&po_, prof, &ops, NULL, budget, NULL));
        double b = cpu_now();
        CHECK(remat_plan_create(&pb, prof, budget));
        double c = cpu_now();
        ts_op[i] = (b - a) * 1e3;
        ts_bl[i] = (c - b) * 1e3;
        if (po_->time > prev) monotone = false;
        prev = po_->time;
        printf("%10.2f | %10.2f %7.3fx %6s %9.1f | %10.2f %7.3fx %9.1f", MIB(budget),
               MIB(po_->peak_bytes), po_->time / po_->time_store_all,
               po_->kind == REMAT_PLAN_OPS ? "ops" : "rotor", ts_op[i], MIB(pb->peak_bytes),
               pb->time / pb->time_store_all, ts_bl[i]);
        if (lossy) {
            remat_plan *pz = NULL;
            double d = cpu_now();
            CHECK(remat_plan_create_ops(&pz, prof, &ops, NULL, budget, &popt));
            double e = cpu_now();
            size_t z = 0;
            for (int k = 0; k < pz->n_stages; k++) z += pz->stages[k].bf16_bytes;
            printf(" | %10.2f %7.3fx %9.2f %9.1f", MIB(pz->peak_bytes),
                   pz->time / pz->time_store_all, MIB(z), (e - d) * 1e3);
            if (print_plan) remat_plan_explain(pz, &ops, 0, 0, stdout);
            remat_plan_free(pz);
        }
        putchar('\n');
        if (print_plan) remat_plan_explain(po_, &ops, 0, 0, stdout);
        remat_plan_free(po_);
        remat_plan_free(pb);
    }
    qsort(ts_op, (size_t)N, sizeof *ts_op, cmp_d);
    qsort(ts_bl, (size_t)N, sizeof *ts_bl, cmp_d);
    printf("solve CPU time, %d budgets: op-level median %.1f ms, max %.1f ms; block-level median "
           "%.1f ms, max %.1f ms\n",
           N, ts_op[N / 2], ts_op[N - 1], ts_bl[N / 2], ts_bl[N - 1]);
    printf("op-level predicted time non-increasing in the budget: %s\n", monotone ? "yes" : "NO");
    free(ts_op);
    free(ts_bl);
    free(ops.stages);
    remat_op_profile_free(o1);
    remat_profile_free(p1);
    remat_profile_free(prof);
    remat_release(x);
    gpt_block_weights_release(&blk.w);
    remat_release(blk.mask);
    return monotone ? 0 : 1;
}
