/* bench/bench_safetensors.c — loading a large safetensors file into a
 * parameter collection (remat_safetensors_load): time and peak resident
 * memory (VmHWM) against the model's bytes.
 *
 *     bench_safetensors [MiB [rounds [DIR [--keep]]]]   (default 1024 MiB, 3 rounds, /tmp)
 *
 * Writes DIR/bench_safetensors.safetensors (MiB of f32 in 64 tensors of a
 * GPT-like mix of shapes) with remat_safetensors_save, then per round:
 * drops the file from the page cache where it can (posix_fadvise
 * DONTNEED: a cold read) or leaves it warm, loads it into f32 parameters
 * made beforehand, and prints the load time, the MB/s, and the growth of
 * VmHWM over the resident memory before the load (parameters included).
 * The bound: peak RSS while loading <= the model's bytes + 64 MiB.
 * The last line is JSON. A Python counterpart (safetensors.torch.load_file
 * and safe_open into preallocated tensors): bench/pytorch/safetensors_load.py. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "remat/params.h"
#include "remat/remat.h"
#include "remat/safetensors.h"

static long status_kib(const char *key) {
    FILE *fp = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    size_t k = strlen(key);
    while (fp && fgets(line, sizeof line, fp))
        if (strncmp(line, key, k) == 0) v = atol(line + k + 1);
    if (fp) fclose(fp);
    return v;
}

/* Resets VmHWM to the current RSS (Linux: writing 5 to clear_refs). */
static void reset_hwm(void) {
    FILE *fp = fopen("/proc/self/clear_refs", "w");
    if (fp) {
        fputs("5", fp);
        fclose(fp);
    }
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(int rc) {
    fprintf(stderr, "%s: %s\n", remat_status_name(rc), remat_last_error());
    exit(1);
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Parameters of a GPT-like mix summing to about `bytes` of f32. */
static remat_params *model(int64_t bytes, bool fill) {
    remat_params *p = NULL;
    int rc = remat_params_new(&p);
    if (rc) die(rc);
    int64_t d = 1024, per = bytes / 4 / 64; /* 64 tensors */
    for (int i = 0; i < 64 && !rc; i++) {
        int64_t shape[2] = {per / d, d};
        if (i % 4 == 3) shape[1] = d / 2, shape[0] = per / (d / 2);
        remat_tensor *t = NULL;
        rc = fill ? remat_rand_uniform(&t, 2, shape, -1, 1, REMAT_F32, REMAT_DEVICE_CPU)
                  : remat_empty(&t, 2, shape, REMAT_F32, REMAT_DEVICE_CPU);
        if (!rc && !fill) memset(remat_data(t), 0, (size_t)remat_numel(t) * 4); /* resident */
        char name[64];
        snprintf(name, sizeof name, "layers.%d.%s.%d.weight", i / 4, i % 4 == 3 ? "mlp" : "attn",
                 i % 4);
        if (!rc) rc = remat_params_add(p, name, t);
        remat_release(t);
    }
    if (rc) die(rc);
    return p;
}

int main(int argc, char **argv) {
    int64_t mib = argc > 1 ? atoll(argv[1]) : 1024;
    int rounds = argc > 2 ? atoi(argv[2]) : 3;
    const char *dir = argc > 3 ? argv[3] : "/tmp";
    char file[4096];
    snprintf(file, sizeof file, "%s/bench_safetensors.safetensors", dir);
    {
        remat_params *src = model(mib << 20, true);
        double t0 = now();
        int rc = remat_safetensors_save(file, src, 0, NULL);
        if (rc) die(rc);
        printf("wrote %s: %.0f MiB in %.2f s\n", file,
               (double)remat_params_numel(src) * 4.0 / 1048576, now() - t0);
        remat_params_free(src);
    }
    remat_params *p = model(mib << 20, false);
    double model_mib = (double)remat_params_numel(p) * 4.0 / 1048576;
    double *cold = calloc((size_t)rounds, sizeof *cold),
           *warm = calloc((size_t)rounds, sizeof *warm);
    long worst_growth = 0, rss0 = 0;
    for (int r = 0; r < 2 * rounds; r++) {
        bool is_cold = r % 2 == 0; /* interleaved */
        if (is_cold) {
            int fd = open(file, O_RDONLY);
            if (fd >= 0) {
                posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
                close(fd);
            }
        }
        reset_hwm();
        long before = status_kib("VmRSS:");
        double t0 = now();
        int rc = remat_safetensors_load(p, file, NULL);
        double dt = now() - t0;
        if (rc) die(rc);
        long hwm = status_kib("VmHWM:");
        long growth = hwm - before;
        if (growth > worst_growth) worst_growth = growth;
        rss0 = before;
        (is_cold ? cold : warm)[r / 2] = dt;
        printf("round %d %s: %.3f s (%.0f MB/s), RSS before %.0f MiB, peak %.0f MiB (+%.1f MiB)\n",
               r / 2, is_cold ? "cold" : "warm", dt, model_mib * 1.048576 / dt,
               (double)before / 1024.0, (double)hwm / 1024.0, (double)growth / 1024.0);
    }
    qsort(cold, (size_t)rounds, sizeof *cold, cmp);
    qsort(warm, (size_t)rounds, sizeof *warm, cmp);
    /* the bound: peak <= the model's bytes + 64 MiB over what the process held
     * besides the model (its RSS before the load less the parameters) */
    double overhead_mib = (double)worst_growth / 1024.0;
    printf("{\"model_mib\": %.1f, \"cold_s_median\": %.4f, \"cold_s_min\": %.4f, \"cold_s_max\": "
           "%.4f, \"warm_s_median\": %.4f, \"warm_s_min\": %.4f, \"warm_s_max\": %.4f, "
           "\"rss_before_mib\": %.1f, \"peak_growth_mib\": %.1f, \"within_64mib\": %s}\n",
           model_mib, cold[rounds / 2], cold[0], cold[rounds - 1], warm[rounds / 2], warm[0],
           warm[rounds - 1], (double)rss0 / 1024.0, overhead_mib,
           overhead_mib <= 64 ? "true" : "false");
    remat_params_free(p);
    if (!(argc > 4 && strcmp(argv[4], "--keep") == 0)) unlink(file);
    free(cold);
    free(warm);
    return 0;
}
