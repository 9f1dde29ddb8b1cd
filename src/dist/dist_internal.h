/* src/dist/dist_internal.h — what the MPI sources of remat/dist.h share:
 * the process group, bounded waits, the status exchange that names failed
 * or silent ranks. Only compiled when CMake found MPI. */
#ifndef REMAT_DIST_INTERNAL_H
#define REMAT_DIST_INTERNAL_H

#include <mpi.h>
#include <stdio.h>

#include "ops/op.h"
#include "remat/dist.h"

#define RMD_PACKAGES "libopenmpi-dev openmpi-bin"
#define RMD_MSG 240 /* bytes of a failed rank's message carried to the others */

struct remat_dist {
    MPI_Comm comm; /* our duplicate: remat's traffic never mixes with the user's */
    int rank, size;
    double timeout_s;
    bool broken; /* a wait timed out or MPI failed: collectives refuse */
};

/* Seconds on a monotonic clock. */
double rmd_now(void);

/* Fails with REMAT_ESTATE (naming `call`) if pg is NULL or broken. */
remat_status rmd_check_group(const char *call, const remat_dist *pg);

/* Sets the error for a failed MPI call (its text) and marks pg broken. */
remat_status rmd_mpi_err(remat_dist *pg, const char *call, const char *what, int mpi_rc);

/* Waits for n requests, polling (MPI progresses non-blocking collectives
 * only inside MPI calls) and sleeping briefly between polls, for at most the
 * group's timeout. peer[i] (may be NULL) is the rank request i waits for,
 * -1 for a collective: on a timeout the message names the ranks whose
 * requests are still open ("no answer from rank 2"), else says that some
 * rank did not take part. On a timeout pg is marked broken (REMAT_EIO). */
remat_status rmd_wait(remat_dist *pg, const char *call, const char *what, int n, MPI_Request *reqs,
                      const int *peer);

/* Host bytes MPI can use for t's data (contiguous): t's own memory when the host can
 * address it, else a malloc'd copy, filled from the device when `read` (*out is then
 * the caller's until rmd_host_view_end). Errors name `call`. */
remat_status rmd_host_view(const char *call, const remat_tensor *t, bool read, void **out);
/* Ends rmd_host_view: a copy is written back into t's device memory when `write` (the
 * version is not bumped), then freed. Nothing to do for t's own memory. */
remat_status rmd_host_view_end(const char *call, remat_tensor *t, void *h, bool write);

/* MPI datatype of a remat dtype (MPI_DATATYPE_NULL for u8/bf16). */
MPI_Datatype rmd_mpi_type(remat_dtype dtype);

/* Every rank tells every other one its status and message, point to point
 * (so a silent rank can be named). `extra` (n_extra bytes, may be 0) rides
 * along; all_extra receives world_size * n_extra bytes (rank-major) if not
 * NULL. On return REMAT_OK means every rank reported REMAT_OK; otherwise
 * the error names the failed ranks and their messages (this rank's own
 * failure keeps its status and message). Requests in pend[0..n_pend) (the
 * caller's outstanding collectives) are waited for in the same bounded
 * poll. */
remat_status rmd_exchange_status(remat_dist *pg, const char *call, remat_status status,
                                 const char *msg, const void *extra, size_t n_extra,
                                 void *all_extra, int n_pend, MPI_Request *pend);

#endif
