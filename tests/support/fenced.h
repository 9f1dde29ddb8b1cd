/* tests/support/fenced.h — "fenced": a device type whose memory the host cannot touch,
 * the cuda device's stand-in on machines without a GPU.
 *
 * Its allocations are mmap'd pages kept PROT_NONE; they are opened (read/write) only while
 * one of its kernels runs on them or while its copy callback moves bytes in or out. Its
 * kernels are the cpu kernels behind a wrapper that opens the operands (registered through
 * rm_kernel_register, as the cuda backend registers its own). So any code that reads or
 * writes tensor data on the host, instead of going through the kernel table or
 * rm_device_copy, faults on it exactly where it would fault on a GPU — the test crashes
 * (Criterion reports the signal) rather than passing by accident. Not host-addressable.
 *
 * `REMAT_TEST_DEVICE=fenced make test` runs the device suites on it (tests/support/rt.h);
 * tests/test_fenced_device.c uses it directly. */
#ifndef REMAT_TEST_FENCED_H
#define REMAT_TEST_FENCED_H

/* The type id of "fenced", registered on first use (its kernels too); -1 on failure. */
int rt_fenced_type(void);
/* How many times the fenced kernel of `kernel_id` (an rm_kernel_id) has run in this
 * process: a test can show that a path went through the kernel table. */
long rt_fenced_kernel_runs(int kernel_id);
/* How many copies of a remat_copy_kind (host to device, device to host, device to device)
 * its copy callback has made in this process: each one a synchronous rm_device_copy, the
 * host waiting for the device, as each is on cuda (a stream synchronisation). */
long rt_fenced_copies(int kind);
/* Makes the nth copy of `kind` from now (1: the next) fail with REMAT_EDEVICE, copying
 * nothing, as a failed device copy; nth 0 disarms. One failure per call. */
void rt_fenced_fail_copy(int kind, long nth);

#endif /* REMAT_TEST_FENCED_H */
