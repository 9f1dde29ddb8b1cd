/* src/core/philox.h — Philox4x32-10 and dropout's keep bits as inline
 * host-and-device functions, the one copy of the generator: the public
 * remat_philox4x32_10 (device.c), the cpu dropout kernel (inlined there so
 * its mask loop vectorises across blocks) and the GPU kernels
 * (backends/cuda/rng.cu) all run this code, so their bits agree by
 * construction (tests/test_cuda_rng.c checks it). C and CUDA C; no library
 * headers. */
#ifndef REMAT_PHILOX_H
#define REMAT_PHILOX_H

#include <stdint.h>

#ifdef __CUDACC__
#define RM_PHILOX_FN __host__ __device__ __forceinline__
#else
#define RM_PHILOX_FN static inline
#endif

/* Philox4x32-10 of counter (c0, c1, c2, c3) under key (k0, k1). */
RM_PHILOX_FN void rm_philox4x32_hd(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0,
                                   uint32_t k1, uint32_t out[4]) {
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0;
        uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n1 = (uint32_t)p1;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1, n3 = (uint32_t)p0;
        c0 = n0;
        c1 = n1;
        c2 = n2;
        c3 = n3;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* Block `ctr` of the Philox4x32-10 stream with key (k0, k1): counter words
 * (ctr low, ctr high, 0, 0), as rm_philox_block (src/core/device.c). */
RM_PHILOX_FN void rm_philox_hd(uint32_t k0, uint32_t k1, uint64_t ctr, uint32_t out[4]) {
    rm_philox4x32_hd((uint32_t)ctr, (uint32_t)(ctr >> 32), 0, 0, k0, k1, out);
}

/* Dropout's keep bits for elements 8·t .. 8·t + 7 of n (bit k: element
 * 8·t + k kept; bits past n are 0), as the cpu kernel draws them: element i
 * is kept iff (word i % 4 of block counter + i / 4) >> 8 >= thr, thr =
 * ceil(p · 2^24) (src/backends/cpu/nn.c). */
RM_PHILOX_FN unsigned rm_dropout_keep_byte(int64_t t, int64_t n, uint32_t thr, uint32_t k0,
                                           uint32_t k1, uint64_t counter) {
    unsigned byte = 0;
    for (int h = 0; h < 2; h++) {
        int64_t j = 2 * t + h;
        if (4 * j >= n) break;
        uint32_t r[4];
        rm_philox_hd(k0, k1, counter + (uint64_t)j, r);
        for (int k = 0; k < 4 && 4 * j + k < n; k++)
            byte |= (unsigned)((r[k] >> 8) >= thr) << (4 * h + k);
    }
    return byte;
}

#endif /* REMAT_PHILOX_H */
