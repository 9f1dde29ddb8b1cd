/* tools/train/train_run.h — what the phases of `remat train` share (tools/train/train.c:
 * setup, plan, loop, finish; tools/report/train_report.c: the reports). Private to
 * those two files. */
#ifndef REMAT_TOOLS_TRAIN_RUN_H
#define REMAT_TOOLS_TRAIN_RUN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "cli/args.h"
#include "dist.h"
#include "io/data.h"
#include "io/hf_dir.h"
#include "io/outputs.h"
#include "io/training_save.h"
#include "models.h"
#include "report/alloc_trace.h"
#include "step.h"

typedef struct eval_summary {
    double loss, accuracy, exact;
    bool has_accuracy, has_exact;
} eval_summary;

/* What the phases of a run share. Setup fills the model, task, optimizer
 * and process group; the loop the per-step figures; the report reads them.
 * train_free releases everything (each pointer NULL or owned). */
typedef struct train_run {
    config *c;
    task tk;
    model m;
    remat_optimizer *o; /* NULL under --zero (pd.zero holds the state) */
    prog_dist pd;
    saved_state saved; /* --resume's file, until its state is restored */
    hf_dir hf;         /* --init-from's directory (or a --resume file's Hugging Face model) */
    int threads;
    int64_t start;      /* the first step of this invocation (--resume) */
    int64_t n_steps;    /* steps this invocation runs */
    bool tty;           /* the progress bar, else plain lines */
    FILE *logf;         /* --log */
    output_claim claim; /* --save's path, held for the run (tools/io/outputs.h) */
    /* the loop's results */
    double *losses, *times; /* [n_steps] */
    double train_time;      /* seconds inside steps */
    int64_t tokens;         /* tokens (or samples) over all ranks */
    int64_t done_steps;     /* the step count reached */
    int stopped;            /* the signal that ended the run early, else 0 */
    size_t run_peak;        /* the allocator's peak over the run (steps, evaluations) */
    size_t step_peak;       /* the largest step's peak (forward, backward, optimizer) */
    eval_summary ev;        /* the last evaluation */
    bool have_eval;
    char evbuf[160], evshort[64];
    trace tr; /* --trace/--timeline: the last step */
    bool traced;
    step_report rep;     /* --report: the first step's */
    remat_sac_stats sac; /* selective: the first step's counters */
    bool have_sac;
    remat_op_profile *ops; /* budget=: the blocks' op profile (--explain names the ops) */
} train_run;

/* --report's residual reports, then the JSON object (--json) or the
 * summary table on stdout (rank 0). */
int train_report(train_run *tr);
/* A run a signal stopped: where it stands and how to resume (stderr). */
void train_report_stopped(const train_run *tr);

#endif /* REMAT_TOOLS_TRAIN_RUN_H */
