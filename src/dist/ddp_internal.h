/* src/dist/ddp_internal.h — remat_ddp's insides, shared with ZeRO-1
 * (zero.c), which reuses its buckets, ready events and status exchange and
 * swaps the all-reduce for a reduce-scatter. */
#ifndef REMAT_DDP_INTERNAL_H
#define REMAT_DDP_INTERNAL_H

#include "dist_internal.h"

#define DDP_DEFAULT_BUCKET ((size_t)25 << 20)
enum { FLAG_USED = 1, FLAG_LATE = 2 };

/* An entry of the parameter table: key first (src/core/ptrtab.h), NULL when free. */
typedef struct ddp_slot {
    const remat_tensor *key;
    int index;
} ddp_slot;

typedef struct dparam {
    remat_tensor *t; /* retained */
    int bucket;
    int64_t offset; /* elements into the bucket's buffer */
    int64_t numel;
    int count;    /* accumulations in this backward */
    int expected; /* from the graph, else learned from the previous backward */
    bool ready;
    bool late;
    /* a copy in flight between .grad (device) and the bucket slot (the device type's
     * transfer ops): its event, the ops that made it, and the .grad it reads (held, so that
     * its device memory is not reused before the copy has read it; NULL for a copy back) */
    void *event;
    const rm_transfer_ops *xops;
    remat_tensor *held;
} dparam;

typedef struct dbucket {
    remat_tensor *buf; /* flat buffer (through remat's allocator: counted); NULL when pinned */
    /* a bucket of device parameters whose device type has transfer ops: the flat buffer is
     * the ops' pinned host memory instead (counted as host memory), which the device copies
     * into and out of asynchronously; bucket_data() is whichever the bucket has */
    void *pinned;
    const rm_transfer_ops *pinned_ops;
    int first, last; /* its parameters: indices first..last (registration order reversed) */
    int n_copying;   /* its slots' D2H copies still in flight */
    int newest;      /* the parameter whose copy was queued last (of those in flight) */
    remat_dtype dtype;
    int64_t numel;
    int64_t padded; /* ZeRO: numel rounded up to a multiple of the world size */
    int64_t slice;  /* ZeRO: padded / world, this rank's part of the bucket */
    int n_params, n_ready;
    bool launched, done;
    MPI_Request req;
    double t_launch, t_done;
} dbucket;

struct remat_ddp {
    remat_dist *pg;
    int n;
    dparam *p;
    int nb;
    dbucket *b;
    int next_launch;
    bool sync;
    bool learned;     /* a synchronised backward completed: its counts are known */
    bool have_counts; /* this backward knows the expected counts (graph or learned) */
    int mpi_failed;   /* MPI error code while launching (reported at the end) */
    /* the first failed gradient copy of this backward (reported at its end): status,
     * parameter, and the message of the failure */
    int copy_failed;
    int copy_failed_param;
    int newest_back; /* the parameter whose copy back to its device was queued last, or -1 */
    char copy_failed_msg[RMD_MSG];
    remat_ddp_options o;
    /* ZeRO-1: each bucket is reduce-scattered in place (this rank gets the
     * sums of its slice of the bucket in the bucket's first elements) and
     * .grad is left alone */
    bool zero;
    bool prescale;           /* gradients scaled by 1/world into the buckets (DDP, world a
                             * power of two: exact); else sums, divided after the wait */
    int64_t n_collectives;   /* bucket reductions started since creation */
    unsigned char *used_any; /* per parameter, after a backward: some rank had a gradient */
    /* leaf → index: open addressing over 2^k slots */
    ddp_slot *ht; /* parameter -> index in p[] (src/core/ptrtab.h), load <= 1/2 */
    size_t hcap;
    remat_ddp_stats st;
};

/* remat_ddp_create with ZeRO's layout (zero true): buckets padded to a
 * multiple of the world size, one shard buffer. */
remat_status rmd_ddp_create(remat_ddp **out, remat_dist *pg, int n, remat_tensor *const *params,
                            const remat_ddp_options *opts, bool zero, const char *call);

#endif
