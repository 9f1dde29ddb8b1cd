/* src/dist/group.c — the process group: MPI set-up and tear-down, ranks,
 * seeds and shards, bounded waits and the status exchange. */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dist_internal.h"

/* Whether remat_dist_init called MPI_Init (then the last finalize ends MPI),
 * and how many groups are alive. Groups are made and freed on the thread
 * that initialised MPI (FUNNELED), so plain ints do. */
static bool g_we_initialised;
static int g_live;

bool remat_dist_available(void) { return true; }

double rmd_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

remat_status rmd_check_group(const char *call, const remat_dist *pg) {
    if (!pg) return rm_err(REMAT_EINVAL, "%s: process group is NULL", call);
    if (pg->broken)
        return rm_err(REMAT_ESTATE,
                      "%s: the process group is broken by an earlier failure (a rank "
                      "failed or stopped answering); end the job (remat_dist_abort)",
                      call);
    return REMAT_OK;
}

remat_status rmd_mpi_err(remat_dist *pg, const char *call, const char *what, int mpi_rc) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(mpi_rc, text, &len) != MPI_SUCCESS)
        snprintf(text, sizeof text, "code %d", mpi_rc);
    if (pg) pg->broken = true;
    return rm_err(REMAT_EIO, "%s: MPI failed while %s: %s", call, what, text);
}

MPI_Datatype rmd_mpi_type(remat_dtype dtype) {
    switch (dtype) {
    case REMAT_F32: return MPI_FLOAT;
    case REMAT_F64: return MPI_DOUBLE;
    case REMAT_I64: return MPI_INT64_T;
    default: return MPI_DATATYPE_NULL;
    }
}

remat_status rmd_wait(remat_dist *pg, const char *call, const char *what, int n, MPI_Request *reqs,
                      const int *peer) {
    double start = rmd_now(), deadline = start + pg->timeout_s;
    long sleep_ns = 1000;
    for (;;) {
        int flag = 0;
        int rc = MPI_Testall(n, reqs, &flag, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) return rmd_mpi_err(pg, call, what, rc);
        if (flag) return REMAT_OK;
        double now = rmd_now();
        if (now > deadline) break;
        if (now - start < 0.05) {
            /* a collective usually ends within milliseconds: poll, but let
             * a rank sharing this core run meanwhile */
            sched_yield();
            continue;
        }
        /* then back off to 1 ms: a long wait leaves the cores to the others */
        struct timespec ts = {0, sleep_ns};
        nanosleep(&ts, NULL);
        if (sleep_ns < 1000000) sleep_ns *= 2;
    }
    pg->broken = true;
    char ranks[256] = "";
    size_t k = 0;
    int named = 0;
    for (int i = 0; peer && i < n; i++) {
        if (peer[i] < 0 || reqs[i] == MPI_REQUEST_NULL) continue;
        int flag = 0;
        MPI_Test(&reqs[i], &flag, MPI_STATUS_IGNORE);
        if (flag || k + 16 >= sizeof ranks) continue;
        k += (size_t)snprintf(ranks + k, sizeof ranks - k, "%s%d", named ? ", " : "", peer[i]);
        named++;
    }
    if (named)
        return rm_err(REMAT_EIO,
                      "%s: no answer from rank%s %s within %g s while %s: %s failed or "
                      "is stuck; the group is unusable now, end the job (remat_dist_abort)",
                      call, named > 1 ? "s" : "", ranks, pg->timeout_s, what,
                      named > 1 ? "they" : "it");
    return rm_err(REMAT_EIO,
                  "%s: timed out after %g s while %s: a rank failed or is stuck; the "
                  "group is unusable now, end the job (remat_dist_abort)",
                  call, pg->timeout_s, what);
}

remat_status rmd_exchange_status(remat_dist *pg, const char *call, remat_status status,
                                 const char *msg, const void *extra, size_t n_extra,
                                 void *all_extra, int n_pend, MPI_Request *pend) {
    const int W = pg->size;
    const size_t rec = sizeof(int32_t) + RMD_MSG + n_extra;
    unsigned char *mine = calloc(1, rec), *all = calloc((size_t)W, rec);
    size_t n_req = 2 * (size_t)W + (size_t)n_pend;
    MPI_Request *reqs = calloc(n_req, sizeof *reqs);
    int *peer = calloc(n_req, sizeof *peer);
    if (!mine || !all || !reqs || !peer) {
        free(mine);
        free(all);
        free(reqs);
        free(peer);
        return rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    }
    int32_t st = status;
    memcpy(mine, &st, sizeof st);
    if (status && msg) snprintf((char *)mine + sizeof st, RMD_MSG, "%s", msg);
    if (n_extra) memcpy(mine + sizeof st + RMD_MSG, extra, n_extra);
    memcpy(all + (size_t)pg->rank * rec, mine, rec);
    int n = 0, rc = REMAT_OK;
    const int tag = 7101;
    for (int r = 0; r < W && rc == REMAT_OK; r++) {
        if (r == pg->rank) continue;
        int m = MPI_Irecv(all + (size_t)r * rec, (int)rec, MPI_BYTE, r, tag, pg->comm, &reqs[n]);
        if (m != MPI_SUCCESS) rc = rmd_mpi_err(pg, call, "exchanging status", m);
        peer[n++] = r;
    }
    for (int r = 0; r < W && rc == REMAT_OK; r++) {
        if (r == pg->rank) continue;
        int m = MPI_Isend(mine, (int)rec, MPI_BYTE, r, tag, pg->comm, &reqs[n]);
        if (m != MPI_SUCCESS) rc = rmd_mpi_err(pg, call, "exchanging status", m);
        peer[n++] = -1;
    }
    for (int i = 0; i < n_pend; i++) {
        reqs[n] = pend[i];
        peer[n++] = -1;
    }
    if (rc == REMAT_OK)
        rc = rmd_wait(pg, call, "exchanging status with the other ranks", n, reqs, peer);
    for (int i = 0; i < n_pend; i++) pend[i] = reqs[n - n_pend + i];
    if (rc == REMAT_OK) {
        if (all_extra && n_extra)
            for (int r = 0; r < W; r++)
                memcpy((unsigned char *)all_extra + (size_t)r * n_extra,
                       all + (size_t)r * rec + sizeof st + RMD_MSG, n_extra);
        if (status) {
            rc = status; /* this rank's own error message stays as it is */
        } else {
            char text[1024];
            size_t k = 0;
            int first = 0;
            for (int r = 0; r < W; r++) {
                int32_t s;
                memcpy(&s, all + (size_t)r * rec, sizeof s);
                if (!s) continue;
                if (!first) first = s;
                char m[RMD_MSG];
                memcpy(m, all + (size_t)r * rec + sizeof s, RMD_MSG);
                m[RMD_MSG - 1] = '\0';
                if (k < sizeof text - 1)
                    k += (size_t)snprintf(text + k, sizeof text - k, "%srank %d failed (%s): %s",
                                          k ? "; " : "", r, remat_err_name(s), m);
            }
            if (first) rc = rm_err(REMAT_EIO, "%s: %s", call, text);
        }
    }
    free(mine);
    free(all);
    free(reqs);
    free(peer);
    return rc;
}

/* ---- set-up ------------------------------------------------------------------ */
remat_status remat_dist_init(remat_dist **out, const remat_dist_options *opts) {
    static const char *call = "remat_dist_init";
    if (!out) return rm_err(REMAT_EINVAL, "%s: out is NULL", call);
    *out = NULL;
    double timeout = opts && opts->timeout_s > 0 ? opts->timeout_s : 60.0;
    if (opts && (opts->timeout_s < 0 || opts->timeout_s != opts->timeout_s))
        return rm_err(REMAT_EINVAL, "%s: timeout_s must be >= 0 (0: 60 s), got %g", call,
                      opts->timeout_s);
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (finalized)
        return rm_err(REMAT_ESTATE, "%s: MPI was already finalised in this process", call);
    if (opts && opts->comm && !inited)
        return rm_err(REMAT_EINVAL, "%s: a communicator was given but MPI is not initialised",
                      call);
    if (!inited) {
        int provided = 0;
        int m = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
        if (m != MPI_SUCCESS) return rmd_mpi_err(NULL, call, "initialising MPI", m);
        g_we_initialised = true;
    }
    remat_dist *pg = calloc(1, sizeof *pg);
    if (!pg) return rm_err(REMAT_ENOMEM, "%s: out of memory", call);
    MPI_Comm base = opts && opts->comm ? *(const MPI_Comm *)opts->comm : MPI_COMM_WORLD;
    int m = MPI_Comm_dup(base, &pg->comm);
    if (m != MPI_SUCCESS) {
        free(pg);
        return rmd_mpi_err(NULL, call, "duplicating the communicator", m);
    }
    /* errors come back as codes: the library never aborts */
    MPI_Comm_set_errhandler(pg->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(pg->comm, &pg->rank);
    MPI_Comm_size(pg->comm, &pg->size);
    pg->timeout_s = timeout;
    g_live++;
    *out = pg;
    return REMAT_OK;
}

remat_status remat_dist_finalize(remat_dist *pg) {
    if (!pg) return REMAT_OK;
    /* A broken group may have collectives a dead rank left open: freeing
     * its communicator or finalising could wait forever, so leave both. */
    bool broken = pg->broken;
    if (!broken) MPI_Comm_free(&pg->comm);
    free(pg);
    g_live--;
    if (broken)
        return rm_err(REMAT_ESTATE, "remat_dist_finalize: the group was broken by a failed rank; "
                                    "MPI was left running (end the job with remat_dist_abort)");
    if (g_live == 0 && g_we_initialised) {
        g_we_initialised = false;
        int m = MPI_Finalize();
        if (m != MPI_SUCCESS) return rmd_mpi_err(NULL, "remat_dist_finalize", "finalising MPI", m);
    }
    return REMAT_OK;
}

void remat_dist_abort(remat_dist *pg, int code) {
    int inited = 0;
    MPI_Initialized(&inited);
    if (inited) MPI_Abort(pg ? pg->comm : MPI_COMM_WORLD, code ? code : 1);
    _Exit(code ? code : 1); /* MPI_Abort returned, or no MPI: end this process at least */
}

int remat_dist_rank(const remat_dist *pg) { return pg ? pg->rank : 0; }
int remat_dist_world_size(const remat_dist *pg) { return pg ? pg->size : 1; }
double remat_dist_timeout(const remat_dist *pg) { return pg ? pg->timeout_s : 0; }

static uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

uint64_t remat_dist_rank_seed(const remat_dist *pg, uint64_t seed) {
    int r = remat_dist_rank(pg);
    return r == 0 ? seed : seed ^ splitmix64((uint64_t)r);
}

void remat_dist_shard(const remat_dist *pg, int64_t n, int64_t *begin, int64_t *end) {
    int64_t W = remat_dist_world_size(pg), r = remat_dist_rank(pg);
    if (n < 0) n = 0;
    int64_t base = n / W, rem = n % W;
    int64_t b = r * base + (r < rem ? r : rem);
    if (begin) *begin = b;
    if (end) *end = b + base + (r < rem ? 1 : 0);
}
