/* bench/dist/mpi_progress.c — does Open MPI move a non-blocking all-reduce
 * forward while a rank computes without calling MPI? (The question behind
 * remat's polling: DDP polls MPI_Test at every gradient accumulation, and a
 * recomputation makes none.)
 *
 *   mpicc -O2 -o /tmp/mpi_progress bench/dist/mpi_progress.c
 *   OMPI_MCA_btl=self,vader mpirun -np 2 /tmp/mpi_progress FLOATS SPIN_MS POLL_US
 *
 * Both ranks start MPI_Iallreduce of FLOATS floats after a barrier. Rank 1
 * waits for it at once (MPI_Wait); rank 0 computes for SPIN_MS of wall time,
 * calling MPI_Test every POLL_US (0: never) until the reduction is done, and
 * then waits. Five repetitions; each prints when each rank saw the
 * reduction done (ms after it started; -1: only in the final wait). If
 * rank 1 sees it done only after about SPIN_MS, rank 0's computation stalled
 * the reduction. Not built by CMake (it measures Open MPI, not remat). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (argc < 4) {
        if (rank == 0) fprintf(stderr, "usage: mpi_progress FLOATS SPIN_MS POLL_US\n");
        MPI_Finalize();
        return 2;
    }
    long n = atol(argv[1]);
    double spin = atof(argv[2]) / 1e3, poll = atof(argv[3]) / 1e6;
    float *buf = calloc((size_t)n, sizeof *buf);
    for (int rep = 0; rep < 5; rep++) {
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Request rq;
        MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &rq);
        double t0 = MPI_Wtime(), done_at = -1;
        if (rank == 0) {
            double last = t0;
            volatile double x = 0;
            while (MPI_Wtime() - t0 < spin) {
                for (int i = 0; i < 1000; i++) x += i * 1e-9;
                if (poll > 0 && done_at < 0 && MPI_Wtime() - last > poll) {
                    int f = 0;
                    MPI_Test(&rq, &f, MPI_STATUS_IGNORE);
                    if (f) done_at = MPI_Wtime() - t0;
                    last = MPI_Wtime();
                }
            }
            if (done_at < 0) MPI_Wait(&rq, MPI_STATUS_IGNORE);
        } else {
            MPI_Wait(&rq, MPI_STATUS_IGNORE);
            done_at = MPI_Wtime() - t0;
        }
        double all[2];
        MPI_Gather(&done_at, 1, MPI_DOUBLE, all, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        if (rank == 0)
            printf("%ld floats, rank 0 computes %.0f ms polling every %.0f us: done on rank 0 at "
                   "%.1f ms, on rank 1 at %.1f ms\n",
                   n, spin * 1e3, poll * 1e6, all[0] < 0 ? -1 : 1e3 * all[0], 1e3 * all[1]);
    }
    free(buf);
    MPI_Finalize();
    return 0;
}
