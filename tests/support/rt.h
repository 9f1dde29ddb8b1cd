/* tests/support/rt.h — shared helpers for the Criterion suite. */
#ifndef REMAT_TEST_RT_H
#define REMAT_TEST_RT_H

#include <criterion/criterion.h>
#include <stdbool.h>
#include <stddef.h>

#include "remat/remat.h"

/* Asserts that a remat call returned REMAT_OK, showing the error otherwise. */
#define RT_OK(expr)                                                                                \
    do {                                                                                           \
        int rt_rc_ = (expr);                                                                       \
        cr_assert_eq(rt_rc_, REMAT_OK, "%s failed: %s: %s", #expr, remat_err_name(rt_rc_),         \
                     remat_last_error());                                                          \
    } while (0)

/* Asserts that a remat call failed with `status` and that the message
 * contains `needle` (may be NULL). */
#define RT_FAILS(expr, status, needle)                                                             \
    do {                                                                                           \
        int rt_rc_ = (expr);                                                                       \
        cr_assert_eq(rt_rc_, (status), "%s returned %s, expected %s (msg: %s)", #expr,             \
                     remat_err_name(rt_rc_), remat_err_name(status), remat_last_error());          \
        const char *rt_needle_ = (needle);                                                         \
        if (rt_needle_)                                                                            \
            cr_assert(strstr(remat_last_error(), rt_needle_) != NULL,                              \
                      "message of %s lacks \"%s\": %s", #expr, rt_needle_, remat_last_error());    \
    } while (0)

/* ---- the test device -----------------------------------------------------------------
 * `REMAT_TEST_DEVICE=cuda[:N] make test` (or `make test-cuda`) runs the suites that opt in
 * (RT_ON_TEST_DEVICE below; the Makefile's DEVICE_SUITES lists them for make test-fenced and
 * make test-cuda) on that device:
 * the tensors the helpers make (rt_tensor, rt_rand and what is built on them: the models of
 * models.h, the fixtures' inputs) are put there, and the helpers that read values
 * (rt_values, rt_bitwise_equal, rt_max_abs_diff, rt_assert_close) read them back through
 * remat_copy_to_buffer. When the device cannot be used (a machine without a GPU), a test
 * that makes a tensor that way is reported skipped with the reason (cr_skip_test).
 * `REMAT_TEST_DEVICE=fenced` (make test-fenced) is a device whose memory the host cannot
 * touch outside kernels and copies (tests/support/fenced.h): the GPU-free check that
 * nothing reads or writes device data on the host. Other
 * suites, and every suite without the variable, make cpu tensors as always. */
extern bool rt_on_test_device_;
#define RT_ON_TEST_DEVICE                                                                          \
    __attribute__((constructor)) static void rt_on_test_device_init_(void) {                       \
        rt_on_test_device_ = true;                                                                 \
    }
/* The device REMAT_TEST_DEVICE names (cpu without it; an unknown name fails the test);
 * skips the test when it names a device that cannot be used. */
remat_device rt_test_device(void);
/* t itself when it is on d, else a copy of t on d (made without grad) with t's
 * requires_grad (t released): for tensors just made. Asserts success. */
remat_tensor *rt_to_device(remat_tensor *t, remat_device d);
/* rt_to_device(t, the test device) in suites that opt in, else t itself. */
remat_tensor *rt_to_test_device(remat_tensor *t);

/* cuda:0, for the suites that compare it with the cpu (test_cuda_*.c, test_optim_device.c):
 * skips the calling test, with remat_cuda_available's reason, in a build without the cuda
 * device or on a machine without a GPU. rt_need_cuda: that check alone. */
remat_device rt_cuda0(void);
void rt_need_cuda(void);
/* A leaf on d with t's values, bit for bit (a detached copy; requires_grad when grad). t stays
 * the caller's. Asserts success. */
remat_tensor *rt_leaf_on(remat_tensor *t, remat_device d, bool grad);

/* Where rt_tensor puts tensors: the test device in suites that opt in, else cpu. */
remat_device rt_tensor_device(void);
/* That device as text ("cpu:0", "fenced:0"), as remat's messages name it. */
const char *rt_tensor_device_str(void);
/* Allocator counters of rt_tensor_device() (asserts success): what a memory test measures,
 * since on a test device the tensors' bytes are counted there, not on cpu. */
remat_alloc_stats rt_device_stats(void);
size_t rt_device_current_bytes(void);
void rt_device_reset_peak(void);

/* ---- tensor values, on any device ------------------------------------------------------
 * A test never dereferences tensor memory itself: off host-addressable devices remat_data is
 * NULL, and on "fenced" (as on a GPU) a host access faults. It reads and writes values
 * through these, which copy through the device (and rt_values, rt_bitwise_equal, ... above). */
/* Whether t has data: false for a tensor made in skip mode (an early-stopped
 * recomputation), on every device (remat_data, NULL off the host, cannot tell). */
bool rt_has_data(const remat_tensor *t);
/* The element at flat row-major index i, as a double (asserts that i is in range). */
double rt_item_at(const remat_tensor *t, int64_t i);
/* Adds delta to the element at flat row-major index i of an f32 or f64 tensor, in place
 * through the device's copies (no version bump, no autograd: for finite differences). */
void rt_add_at(remat_tensor *t, int64_t i, double delta);

/* New tensor from a double array, converted to dtype (f32/f64/i64); on the test device
 * in suites that opt in. */
remat_tensor *rt_tensor(int ndim, const int64_t *shape, remat_dtype dtype, const double *values);
/* Uniform random tensor in [lo, hi) from a private deterministic stream
 * (does not touch remat's generators). */
remat_tensor *rt_rand(int ndim, const int64_t *shape, remat_dtype dtype, double lo, double hi,
                      unsigned seed);
/* Marks t as requiring grad (asserts success); returns t. */
remat_tensor *rt_leaf(remat_tensor *t);
/* t's values as a malloc'd array of doubles (row-major; caller frees). */
double *rt_values(const remat_tensor *t);
/* Max |a - b| over elements; shapes must match (asserts). */
double rt_max_abs_diff(const remat_tensor *a, const remat_tensor *b);
/* True if a and b have the same shape, dtype and bitwise identical values. */
bool rt_bitwise_equal(const remat_tensor *a, const remat_tensor *b);
/* Asserts elementwise |a-b| <= atol + rtol*|b|. */
void rt_assert_close(const remat_tensor *a, const remat_tensor *b, double atol, double rtol,
                     const char *what);

/* ---- bf16 GEMM results computed two ways ---------------------------------------------
 * A bf16 GEMM (oneDNN's, or the f32 fallback) multiplies the rounded operands exactly and
 * sums the products in f32, in an order that is the kernel's own: it depends on the ISA
 * (AMX, AVX512_BF16, AVX-512, AVX2), on the GEMM's M, N and K and on the threads. Two
 * code paths of the library that feed the same rounded operands to GEMMs cut differently
 * (panels, a whole copy) promise the same sum up to that order, not the same bits. */
/* Σ_k |a_ik|·|b_kj| in f64 over the bf16-rounded values of a (m, k) and b (k, n), both
 * read as values (any float dtype), each scaled by its factor: the scale of the f32
 * summation error of the GEMM a·b. A new f64 tensor (m, n) on the cpu. */
remat_tensor *rt_abs_product_bf16(const remat_tensor *a, double fa, const remat_tensor *b,
                                  double fb);
/* Asserts that got and want are the same bf16 GEMM result up to summation order:
 * |got - want| <= 16·2⁻²⁴·absprod elementwise (absprod from rt_abs_product_bf16; a few
 * times what any f32 order is off by, and some 2⁷ times below what one operand rounded
 * the wrong way moves it), plus, where the result was rounded to bf16 (out_bf16), one
 * bf16 ulp of the larger of the two, where the two f32 sums fell either side of a rounding
 * midpoint: rare (counted: at most 1% of the elements). */
void rt_assert_same_gemm(const remat_tensor *got, const remat_tensor *want,
                         const remat_tensor *absprod, bool out_bf16, const char *what);

/* ---- finite-difference gradient check (f64) ----------------------------------------
 * f computes one output tensor from the inputs (must not retain inputs in
 * globals). For every input that requires grad, compares remat_grad of
 * sum(out * w) (w a fixed random weight) against central differences with
 * step eps. Inputs may be non-contiguous views (perturbed through strides;
 * an element shared by several positions — expanded views — is skipped
 * after its first position). Returns true on success; on failure writes a
 * description into msg. */
typedef int (*rt_fn)(void *user_data, remat_tensor *const *inputs, int n_inputs,
                     remat_tensor **out);
bool rt_gradcheck(rt_fn f, void *user_data, int n_inputs, remat_tensor *const *inputs, double eps,
                  double atol, double rtol, char *msg, size_t msg_len);
/* Convenience assertion around rt_gradcheck with eps 1e-6, atol 1e-5, rtol 1e-4. */
#define RT_GRADCHECK(f, ud, n, inputs)                                                             \
    do {                                                                                           \
        char rt_msg_[2048];                                                                        \
        cr_assert(                                                                                 \
            rt_gradcheck((f), (ud), (n), (inputs), 1e-6, 1e-5, 1e-4, rt_msg_, sizeof rt_msg_),     \
            "gradcheck %s: %s", #f, rt_msg_);                                                      \
    } while (0)

/* ---- a second device type for multi-device tests -----------------------------------
 * "testdev": host memory (malloc), 2 devices, host-addressable, with its
 * own initialised flag (starts uninitialised; the first allocation
 * initialises it) and RNG hooks kept by remat's default generators.
 * Registers once per process; returns the type id. */
int rt_testdev_register(void);
/* Resets the initialised flag (to test "device initialised inside forward"). */
void rt_testdev_set_initialized(bool on);
/* Number of allocations made on testdev so far. */
long rt_testdev_allocs(void);

/* ---- crashes -------------------------------------------------------------------------------
 * From now on in this test process, a crash (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) or a
 * sanitizer's report prints "<what>" and a backtrace (addr2line -e the test binary turns its
 * addresses into lines) before the process dies of it as before: Criterion's "CRASH!" alone
 * names neither the case nor the place. `what` is copied (truncated to 255 bytes). */
void rt_report_crash(const char *what);

/* ---- warnings ------------------------------------------------------------------------------
 * Captures warnings into a buffer (installs a log callback). */
void rt_capture_warnings(void);
/* All captured warnings joined by '\n' since the last capture call. */
const char *rt_warnings(void);
int rt_warning_count(void);

/* ---- optimizers and kernel calls ---------------------------------------------------------- */
/* Two optimizers of options o with the same groups over a[0..n) and b[0..n): the even-indexed
 * tensors in the first group (o's weight decay), the odd ones in a second without decay —
 * so that two ways of running one update (two devices, two kernel tables) can be compared. */
void rt_optim_pair(const remat_optim_options *o, remat_tensor *const *a, remat_tensor *const *b,
                   int n, remat_optimizer **oa /* OUT */, remat_optimizer **ob /* OUT */);
/* Asserts that the two optimizers of rt_optim_pair over a[0..n) and b[0..n) agree bit for
 * bit after an update: the global norm, every parameter (its size, dtype and the largest
 * difference in the message), its state slots and its step count. `what` names the update. */
void rt_assert_optim_pair_same(const remat_optimizer *oa, const remat_optimizer *ob,
                               remat_tensor *const *a, remat_tensor *const *b, int n,
                               const char *what);
/* Calls of `kernel` (a kernel's name in the timing rows: "adamw update") recorded in t. */
int64_t rt_kernel_calls(const remat_timing *t, const char *kernel);

#endif
