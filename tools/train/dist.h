/*
 * tools/train/dist.h — `mpirun -np N remat train|bench ...`: data parallelism in
 * the program (remat/dist.h underneath).
 *
 * Launched by mpirun (Open MPI's OMPI_COMM_WORLD_SIZE or PMIx's PMIX_RANK
 * in the environment) the program joins a process group; otherwise it runs
 * alone exactly as before. Under mpirun: --batch is per rank and rank r
 * takes rows [r*batch, (r+1)*batch) of the step's global batch (every row
 * is a pure function of seed, step and row, so N ranks x batch B train on
 * the batches 1 rank x N*B would); rank 0's initial parameters are copied
 * to every rank; gradients are averaged by DDP during backward; only rank 0
 * prints and writes files; the reported loss is the mean over ranks, peak
 * memory the max over ranks, throughput the global one.
 */
#ifndef REMAT_TOOLS_DIST_H
#define REMAT_TOOLS_DIST_H

#include <stdbool.h>

#include "cli/args.h"
#include "models.h"
#include "remat/dist.h"

typedef struct prog_dist {
    remat_dist *pg;   /* NULL: not under mpirun */
    remat_ddp *ddp;   /* after prog_dist_attach */
    remat_zero *zero; /* after prog_dist_attach_zero (--zero) */
    int rank, world;
    bool saving;      /* --save was given (rank 0 writes; under --zero all take part) */
    int accum, micro; /* --accum: micro-batches per step, and this one's index */
    int64_t counted;  /* synchronised backwards added by prog_dist_after_step */
    /* sums over the synchronised steps that did not learn (see remat_ddp) */
    double comm_s, exposed_s, backward_s;
    double done_in_backward; /* sum of the fractions of buckets reduced before backward ended */
    int n_steps;
    /* the last error is every rank's (prog_dist_agree): rank 0 reports it and
     * the job ends without MPI_Abort */
    bool shared_error;
} prog_dist;

/* True when the environment says mpirun started this process. */
bool prog_dist_launched(void);
/* Joins the process group if launched by mpirun (timeout: c->dist_timeout);
 * ranks > 0 turn c->quiet on and drop --json, --trace, --timeline, --save
 * output (rank 0 writes). */
int prog_dist_init(prog_dist *d, config *c);
/* Under mpirun, before anything else is collective: every rank's configuration
 * (model, strategy, optimizer and hyperparameters, batch, accumulation,
 * autocast, seed, steps, save schedule, --data and --resume files by content,
 * ZeRO, bucket size, ...) against rank 0's. A difference fails on every rank
 * alike with one message naming the option and both values (d->shared_error);
 * ranks that went on apart would run mismatched collectives or train apart.
 * Call after --resume's file is merged into c. bench: `remat bench`'s
 * settings (its strategy list, repetitions, sweep) instead of train's. No-op
 * alone. */
int prog_dist_agree(prog_dist *d, const config *c, bool bench);
/* How to start `remat CMD` under mpirun, for messages: "start it with
 * `mpirun -np 2 remat CMD ...`", with --allow-run-as-root for root (Open MPI
 * refuses root otherwise) and what to install where mpirun or remat's MPI is
 * missing. Into buf (n bytes); returns buf. */
const char *prog_dist_how_to_launch(const char *cmd, char *buf, size_t n);
/* Registers the model's parameters (copies rank 0's values everywhere) and
 * routes step_run's backward through DDP; with accum > 1 micro-batches per
 * step only the last one's backward communicates (no_sync before it). No-op
 * when not distributed. */
int prog_dist_attach(prog_dist *d, model *m, double bucket_mib, int accum);
/* --zero: the same with AdamW sharded across the ranks (remat_zero, which
 * handles o->accum_steps itself); the caller then calls
 * remat_zero_step(d->zero, NULL) after each micro-batch's backward instead
 * of an optimizer. Matrices decay (o->weight_decay), the rest do not. */
int prog_dist_attach_zero(prog_dist *d, model *m, double bucket_mib, const remat_optim_options *o);
/* After a step: adds the last backward's communication figures. */
void prog_dist_after_step(prog_dist *d);
/* Mean over ranks of *v (no-op alone). */
int prog_dist_mean(prog_dist *d, double *v);
/* Max over ranks of n values (no-op alone). */
int prog_dist_max(prog_dist *d, double *v, int n);
/* Fraction of the communication time hidden behind backward (0..1), or -1
 * if no step was measured. */
double prog_dist_hidden_fraction(const prog_dist *d);
/* Ends the group. With rc != 0 under mpirun every rank is stopped
 * (remat_dist_abort): a failed rank must not leave the others waiting. */
int prog_dist_end(prog_dist *d, int rc);

#endif
