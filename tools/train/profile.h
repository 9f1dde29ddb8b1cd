/* tools/train/profile.h — `remat bench --profile`: where a step's time goes, kernel by
 * kernel (remat/timing.h), each row set against its floor: its bytes at the device's
 * measured copy bandwidth, its FLOPs at its measured GEMM rate. */
#ifndef REMAT_TOOLS_PROFILE_H
#define REMAT_TOOLS_PROFILE_H

#include <stdio.h>

#include "io/json.h"
#include "step.h"

/* The device's rates, measured by the same timer as the rows. */
typedef struct prof_floors {
    double copy_gbs;    /* bytes read + written per ns by a large copy */
    double gemm_tflops; /* f32 (bf16 under autocast, where it runs) square GEMM */
    const char *gemm_dtype;
    int gemm_n;
} prof_floors;

/* One strategy's profile: `steps` steps recorded. */
typedef struct prof_result {
    remat_timing *t;
    int steps;
    double wall_ms; /* per step, with the timer on */
} prof_result;

/* Measures the floors on `dev` (bf16: the GEMM in bf16, falling back to f32). */
int prof_measure_floors(remat_device dev, bool bf16, prof_floors *f);
/* Runs `steps` steps of m under s on b (gradients zeroed before each) with the timer on. */
int prof_run(model *m, const strategy *s, const batch *b, int steps, prof_result *out);
/* The table: rows longest first (at most max_rows, the rest summed in one line), per step,
 * the % column of the step with the timer on; step_ms is the strategy's measured step
 * (timer off), shown beside it. */
void prof_print(FILE *f, const char *name, const prof_result *p, double step_ms,
                const prof_floors *fl, int max_rows);
/* The same as a JSON object under `key` (every row). */
void prof_json(json *j, const char *key, const prof_result *p, double step_ms,
               const prof_floors *fl);
void prof_json_floors(json *j, const char *key, const prof_floors *fl);
void prof_result_free(prof_result *p);

#endif /* REMAT_TOOLS_PROFILE_H */
