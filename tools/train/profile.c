/* tools/train/profile.c — `remat bench --profile` (see profile.h). */
#include "profile.h"

#include <string.h>

#include "cli/util.h"

/* ---- floors ------------------------------------------------------------------------- */
/* The rate the timer sees for `reps` calls of fn after one untimed call: the recording's
 * bytes (per_flop false) or FLOPs per ms. */
typedef int (*bench_fn)(void *ud);
static int timed_rate(bench_fn fn, void *ud, int reps, bool per_flop, double *rate) {
    int rc = fn(ud);
    remat_timing *t = NULL;
    if (!rc) rc = remat_timing_begin();
    if (rc) return rc;
    for (int i = 0; i < reps && !rc; i++) rc = fn(ud);
    int rc2 = remat_timing_end(&t);
    if (!rc) rc = rc2;
    double ms = 0, bytes = 0, flops = 0;
    remat_timing_totals(t, -1, NULL, &ms, &bytes, &flops);
    remat_timing_free(t);
    *rate = ms > 0 ? (per_flop ? flops : bytes) / ms : 0;
    return rc;
}

typedef struct two {
    remat_tensor *a, *b;
} two;
static int copy_once(void *ud) {
    two *p = ud;
    return remat_copy_(p->b, p->a);
}
static int gemm_once(void *ud) {
    two *p = ud;
    remat_tensor *c = NULL;
    int rc = remat_matmul(&c, p->a, p->b);
    remat_release(c);
    return rc;
}

static int gemm_rate(remat_device dev, remat_dtype dt, int64_t n, double *tflops) {
    const int64_t sh[2] = {n, n};
    two p = {NULL, NULL};
    remat_tensor *a = NULL, *b = NULL;
    int rc = remat_rand_uniform(&a, 2, sh, -1, 1, REMAT_F32, dev);
    if (!rc) rc = remat_rand_uniform(&b, 2, sh, -1, 1, REMAT_F32, dev);
    if (!rc && dt != REMAT_F32) rc = remat_to_dtype(&p.a, a, dt);
    if (!rc && dt != REMAT_F32) rc = remat_to_dtype(&p.b, b, dt);
    if (!rc && dt == REMAT_F32) {
        p.a = remat_retain(a);
        p.b = remat_retain(b);
    }
    double r = 0;
    if (!rc) rc = timed_rate(gemm_once, &p, 3, true, &r);
    *tflops = r / 1e9; /* FLOPs per ms -> TFLOP/s */
    remat_release(a);
    remat_release(b);
    remat_release(p.a);
    remat_release(p.b);
    return rc;
}

int prof_measure_floors(remat_device dev, bool bf16, prof_floors *f) {
    memset(f, 0, sizeof *f);
    const bool host = remat_device_host_addressable(dev.type);
    /* large enough to leave the caches: 64 MiB (cpu) or 256 MiB (a GPU) a tensor */
    const int64_t n = host ? (int64_t)16 << 20 : (int64_t)64 << 20;
    two p = {NULL, NULL};
    int rc = remat_zeros(&p.a, 1, &n, REMAT_F32, dev);
    if (!rc) rc = remat_zeros(&p.b, 1, &n, REMAT_F32, dev);
    double r = 0;
    if (!rc) rc = timed_rate(copy_once, &p, 5, false, &r);
    f->copy_gbs = r / 1e6; /* bytes per ms -> GB/s */
    remat_release(p.a);
    remat_release(p.b);
    if (rc) return rc;
    f->gemm_n = host ? 1024 : 4096;
    f->gemm_dtype = "f32";
    if (bf16 && gemm_rate(dev, REMAT_BF16, f->gemm_n, &f->gemm_tflops) == REMAT_OK) {
        f->gemm_dtype = "bf16";
        return REMAT_OK;
    }
    return gemm_rate(dev, REMAT_F32, f->gemm_n, &f->gemm_tflops);
}

/* ---- the steps ------------------------------------------------------------------------ */
int prof_run(model *m, const strategy *s, const batch *b, int steps, prof_result *out) {
    memset(out, 0, sizeof *out);
    double loss, wall = 0;
    int rc = remat_timing_begin();
    for (int i = 0; i < steps && !rc; i++) {
        model_zero_grad(m);
        double t0 = util_now();
        rc = step_run(m, s, b, NULL, NULL, NULL, &loss);
        wall += util_now() - t0;
    }
    int rc2 = remat_timing_end(&out->t);
    model_zero_grad(m);
    out->steps = steps;
    out->wall_ms = steps > 0 ? 1e3 * wall / steps : 0;
    return rc ? rc : rc2;
}

void prof_result_free(prof_result *p) {
    if (!p) return;
    remat_timing_free(p->t);
    p->t = NULL;
}

/* ---- output --------------------------------------------------------------------------- */
/* The row's floor in ms: its bytes at the copy rate or its FLOPs at the GEMM rate. */
static double floor_ms(const prof_floors *fl, double bytes, double flops) {
    double a = fl->copy_gbs > 0 ? bytes / (fl->copy_gbs * 1e6) : 0;
    double b = fl->gemm_tflops > 0 ? flops / (fl->gemm_tflops * 1e9) : 0;
    return a > b ? a : b;
}

static void print_line(FILE *f, const char *op, const char *kernel, const char *phase, double calls,
                       double ms, double bytes, double flops, double wall_ms,
                       const prof_floors *fl) {
    double fm = floor_ms(fl, bytes, flops);
    char gbs[16] = "", tf[16] = "", xf[16] = "";
    if (ms > 0 && bytes > 0) snprintf(gbs, sizeof gbs, "%.1f", bytes / ms / 1e6);
    if (ms > 0 && flops > 0) snprintf(tf, sizeof tf, "%.2f", flops / ms / 1e9);
    if (fm > 0) snprintf(xf, sizeof xf, "%.2f", ms / fm);
    fprintf(f, "%-22.22s %-22.22s %-9s %5.0f %8.3f %5.1f%% %6s %7s %6s\n", op, kernel, phase, calls,
            ms, wall_ms > 0 ? 100 * ms / wall_ms : 0, gbs, tf, xf);
}

void prof_print(FILE *f, const char *name, const prof_result *p, double step_ms,
                const prof_floors *fl, int max_rows) {
    const double per = p->steps > 0 ? 1.0 / p->steps : 0;
    double k_ms = 0, ph[REMAT_N_PHASES] = {0};
    remat_timing_totals(p->t, -1, NULL, &k_ms, NULL, NULL);
    for (int i = 0; i < REMAT_N_PHASES; i++) remat_timing_totals(p->t, i, NULL, &ph[i], NULL, NULL);
    k_ms *= per;
    const double wall = p->wall_ms; /* the % column's denominator: the same steps */
    fprintf(f, "\nprofile of %s: %d step%s, %.3f ms a step with the timer on (%.3f ms off)\n", name,
            p->steps, p->steps == 1 ? "" : "s", wall, step_ms);
    fprintf(f,
            "kernels %.3f ms (%.1f%%; forward %.3f, backward %.3f, recompute %.3f); outside "
            "them %.3f\n",
            k_ms, wall > 0 ? 100 * k_ms / wall : 0, ph[0] * per, ph[1] * per, ph[2] * per,
            wall - k_ms);
    fprintf(f,
            "floors: copy %.1f GB/s, %s GEMM (n=%d) %.2f TFLOP/s (xfloor: ms / the larger of\n"
            "bytes / copy rate and FLOPs / GEMM rate)\n",
            fl->copy_gbs, fl->gemm_dtype ? fl->gemm_dtype : "f32", fl->gemm_n, fl->gemm_tflops);
    fprintf(f, "%-22s %-22s %-9s %5s %8s %6s %6s %7s %6s\n", "op", "kernel", "phase", "calls",
            "ms/step", "%step", "GB/s", "TFLOP/s", "xfloor");
    const int n = remat_timing_count(p->t);
    double rc = 0, rms = 0, rb = 0, rf = 0;
    for (int i = 0; i < n; i++) {
        const remat_timing_row *r = remat_timing_row_at(p->t, i);
        if (i < max_rows) {
            print_line(f, r->op, r->kernel, remat_phase_name(r->phase), (double)r->calls * per,
                       r->ms * per, r->bytes * per, r->flops * per, wall, fl);
            continue;
        }
        rc += (double)r->calls;
        rms += r->ms;
        rb += r->bytes;
        rf += r->flops;
    }
    if (n > max_rows) {
        char what[32];
        snprintf(what, sizeof what, "(%d more rows)", n - max_rows);
        print_line(f, what, "", "", rc * per, rms * per, rb * per, rf * per, wall, fl);
    }
}

void prof_json_floors(json *j, const char *key, const prof_floors *fl) {
    json_object(j, key);
    json_fixed(j, "copy_gb_per_s", fl->copy_gbs, 2);
    json_str(j, "gemm_dtype", fl->gemm_dtype ? fl->gemm_dtype : "f32");
    json_int(j, "gemm_n", fl->gemm_n);
    json_fixed(j, "gemm_tflop_per_s", fl->gemm_tflops, 4);
    json_end(j);
}

void prof_json(json *j, const char *key, const prof_result *p, double step_ms,
               const prof_floors *fl) {
    const double per = p->steps > 0 ? 1.0 / p->steps : 0;
    double k_ms = 0;
    remat_timing_totals(p->t, -1, NULL, &k_ms, NULL, NULL);
    json_object(j, key);
    json_int(j, "steps", p->steps);
    json_fixed(j, "step_ms", step_ms, 4);
    json_fixed(j, "step_ms_timer_on", p->wall_ms, 4);
    json_fixed(j, "kernel_ms", k_ms * per, 4);
    for (int ph = 0; ph < REMAT_N_PHASES; ph++) {
        char k[32];
        double ms = 0;
        remat_timing_totals(p->t, ph, NULL, &ms, NULL, NULL);
        snprintf(k, sizeof k, "%s_ms", remat_phase_name((remat_phase)ph));
        json_fixed(j, k, ms * per, 4);
    }
    json_array(j, "rows"); /* per step */
    for (int i = 0; i < remat_timing_count(p->t); i++) {
        const remat_timing_row *r = remat_timing_row_at(p->t, i);
        json_object(j, NULL);
        json_str(j, "op", r->op);
        json_str(j, "kernel", r->kernel);
        json_str(j, "phase", remat_phase_name(r->phase));
        json_str(j, "dtype", remat_dtype_name(r->dtype));
        json_num(j, "calls", (double)r->calls * per);
        json_fixed(j, "ms", r->ms * per, 4);
        json_num(j, "bytes", r->bytes * per);
        json_num(j, "flops", r->flops * per);
        json_fixed(j, "floor_ms", floor_ms(fl, r->bytes * per, r->flops * per), 4);
        json_end(j);
    }
    json_end(j);
    json_end(j);
}
