/* tests/test_dist.c — remat/dist.h without a running MPI job: argument
 * checks, shards and seeds with no group, and (in a build without MPI)
 * REMAT_EUNSUPPORTED naming the packages from every call. The collective
 * behaviour is tested under mpirun by tests/dist/dist_check.c. */
#include <string.h>

#include "remat/dist.h"
#include "support/rt.h"

Test(dist, no_group_means_one_process) {
    cr_assert_eq(remat_dist_rank(NULL), 0);
    cr_assert_eq(remat_dist_world_size(NULL), 1);
    int64_t b = -1, e = -1;
    remat_dist_shard(NULL, 10, &b, &e);
    cr_assert(b == 0 && e == 10);
    cr_assert_eq(remat_dist_rank_seed(NULL, 42), 42u);
}

Test(dist, null_arguments_are_errors_not_crashes) {
    remat_tensor *t = NULL;
    int64_t n = 3;
    RT_OK(remat_zeros(&t, 1, &n, REMAT_F32, REMAT_DEVICE_CPU));
    int want = remat_dist_available() ? REMAT_EINVAL : REMAT_EUNSUPPORTED;
    cr_assert_eq(remat_dist_broadcast(NULL, t, 0), want);
    cr_assert_eq(remat_dist_all_reduce(NULL, t, REMAT_REDUCE_SUM), want);
    cr_assert_eq(remat_dist_barrier(NULL), want);
    cr_assert_eq(remat_dist_init(NULL, NULL), want);
    remat_ddp *d = (remat_ddp *)&n;
    cr_assert_eq(remat_ddp_create(&d, NULL, 1, &t, NULL), want);
    cr_assert_null(d);
    cr_assert_eq(remat_ddp_backward(NULL, t), want);
    remat_ddp_free(NULL);
    cr_assert_eq(remat_dist_finalize(NULL), REMAT_OK);
    remat_release(t);
}

Test(dist, without_mpi_every_call_names_the_packages) {
    if (remat_dist_available()) cr_skip_test("built with MPI (dist_np2/dist_np3 test it)");
    remat_dist *pg = NULL;
    cr_assert_eq(remat_dist_init(&pg, NULL), REMAT_EUNSUPPORTED);
    cr_assert_null(pg);
    cr_assert(strstr(remat_last_error(), "libopenmpi-dev openmpi-bin"), "%s", remat_last_error());
}
