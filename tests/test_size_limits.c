/* tests/test_size_limits.c — issue 14 item 1: every element and byte
 * count is checked. Shapes whose size overflows (or exceeds
 * REMAT_MAX_TENSOR_BYTES) fail with REMAT_EINVAL and the shape in the
 * message instead of wrapping to a small allocation. */
#include <string.h>

#include "support/rt.h"

#define BIG (INT64_C(1) << 62)
#define G4 (INT64_C(1) << 32)

Test(size_limits, empty_and_zeros_refuse_wrapping_shapes) {
    remat_tensor *t = (remat_tensor *)0x1;
    int64_t s1[] = {BIG};
    RT_FAILS(remat_zeros(&t, 1, s1, REMAT_F32, REMAT_DEVICE_CPU), REMAT_EINVAL,
             "[4611686018427387904]");
    cr_assert_null(t);
    RT_FAILS(remat_empty(&t, 1, s1, REMAT_F32, REMAT_DEVICE_CPU), REMAT_EINVAL, "remat_empty");
    int64_t s2[] = {G4, G4};
    RT_FAILS(remat_empty(&t, 2, s2, REMAT_F32, REMAT_DEVICE_CPU), REMAT_EINVAL,
             "[4294967296, 4294967296]");
    int64_t s3[] = {G4, 0, 1024}; /* zero elements, strides that fit: fine */
    RT_OK(remat_empty(&t, 3, s3, REMAT_F32, REMAT_DEVICE_CPU));
    cr_assert_eq(remat_numel(t), 0);
    remat_release(t);
    int64_t s3b[] = {G4, G4, 0}; /* zero elements, but the strides would overflow */
    RT_FAILS(remat_empty(&t, 3, s3b, REMAT_F32, REMAT_DEVICE_CPU), REMAT_EINVAL, NULL);
    int64_t s4[] = {INT64_MAX};
    RT_FAILS(remat_full(&t, 1, s4, 1.0, REMAT_U8, REMAT_DEVICE_CPU), REMAT_EINVAL, "maximum");
    RT_FAILS(remat_rand_uniform(&t, 1, s4, 0, 1, REMAT_F64, REMAT_DEVICE_CPU), REMAT_EINVAL, NULL);
    RT_FAILS(remat_arange(&t, INT64_MAX), REMAT_EINVAL, NULL);
#ifndef REMAT_TEST_SANITIZE /* ASan reports a 4 PiB request instead of returning NULL */
    /* large but representable: an allocation failure, not a wrap */
    int64_t s5[] = {INT64_C(1) << 40, 1024};
    RT_FAILS(remat_empty(&t, 2, s5, REMAT_F32, REMAT_DEVICE_CPU), REMAT_ENOMEM, NULL);
#endif
}

Test(size_limits, expand_and_reshape_refuse_wrapping_views) {
    int64_t one[] = {1, 1};
    remat_tensor *a = NULL, *y = NULL;
    RT_OK(remat_zeros(&a, 2, one, REMAT_F32, REMAT_DEVICE_CPU));
    int64_t s2[] = {G4, G4};
    RT_FAILS(remat_expand(&y, a, 2, s2), REMAT_EINVAL, "[4294967296, 4294967296]");
    cr_assert_null(y);
    int64_t s3[] = {G4, G4, 4};
    RT_FAILS(remat_expand(&y, a, 3, s3), REMAT_EINVAL, NULL);
    remat_tensor *e = NULL;
    int64_t zero[] = {0};
    RT_OK(remat_zeros(&e, 1, zero, REMAT_F32, REMAT_DEVICE_CPU));
    int64_t r[] = {G4, G4, 4}; /* wraps to 0 elements: was accepted as a view of [0] */
    RT_FAILS(remat_reshape(&y, e, 3, r), REMAT_EINVAL, "[4294967296, 4294967296, 4]");
    RT_FAILS(remat_view(&y, e, 3, r), REMAT_EINVAL, NULL);
    int64_t r2[] = {G4, G4, -1};
    RT_FAILS(remat_reshape(&y, e, 3, r2), REMAT_EINVAL, NULL);
    remat_release(e);
    remat_release(a);
}

Test(size_limits, slice_with_huge_step) {
    int64_t sh[] = {10};
    remat_tensor *a = rt_rand(1, sh, REMAT_F32, -1, 1, 1), *y = NULL;
    RT_OK(remat_slice(&y, a, 0, 3, 10, INT64_MAX));
    cr_assert_eq(remat_size(y, 0), 1);
    double v, w;
    RT_OK(remat_item(y, &v));
    RT_OK(remat_item_at(a, 3, &w));
    cr_assert_eq(v, w);
    remat_release(y);
    RT_OK(remat_slice(&y, a, 0, 0, INT64_MAX, INT64_MAX - 1));
    cr_assert_eq(remat_size(y, 0), 1);
    remat_release(y);
    RT_OK(remat_slice(&y, a, 0, INT64_MIN, INT64_MAX, 3));
    cr_assert_eq(remat_size(y, 0), 4);
    remat_release(y);
    remat_release(a);
}
