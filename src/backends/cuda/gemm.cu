/* src/backends/cuda/gemm.cu — the matmul family's kernels besides cuBLAS:
 * linear's bias broadcast into the output rows, and its gradient's column
 * sums (deterministic: the order of the additions depends on the shape
 * only, never on the launch). */
#include "gemm.h"

#include "kcommon.cuh"

/* y (rows, n) = bias broadcast down the rows: blocks over (column chunk, row), so no thread
 * divides a flat index (a 64-bit % per element cost more than its store) */
template <typename T>
__global__ void fill_rows(T *__restrict__ y, const T *__restrict__ bias, int64_t rows, int64_t n) {
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y)
        for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < n;
             j += (int64_t)gridDim.x * blockDim.x)
            y[r * n + j] = bias[j];
}

/* part[c, j] = sum of g[r, j] over the rows r of chunk c, in double. */
template <typename T>
__global__ void colsum_chunks(const T *__restrict__ g, double *__restrict__ part, int64_t rows,
                              int64_t n, int64_t chunk) {
    int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t c = blockIdx.y;
    if (j >= n) return;
    int64_t r0 = c * chunk, r1 = r0 + chunk < rows ? r0 + chunk : rows;
    double acc = 0;
    for (int64_t r = r0; r < r1; r++) acc += (double)rmk_ld(g[r * n + j]);
    part[c * n + j] = acc;
}

template <typename T>
__global__ void colsum_final(const double *__restrict__ part, T *__restrict__ db, int64_t nch,
                             int64_t n) {
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < n;
         j += (int64_t)gridDim.x * blockDim.x) {
        double acc = 0;
        for (int64_t c = 0; c < nch; c++) acc += part[c * n + j];
        rmk_put(db + j, (typename rmk_compute<T>::type)acc); /* bf16: via f32, as the cpu */
    }
}

template <typename T, typename TD = T>
static cudaError_t colsum(const T *g, TD *db, int64_t rows, int64_t n, double *part,
                          cudaStream_t s) {
    if (n == 0) return cudaGetLastError();
    int64_t chunk = rm_cuda_colsum_chunk(rows), nch = rows ? (rows + chunk - 1) / chunk : 0;
    if (nch > 0) {
        dim3 grid(rm_cuda_blocks(n, 256), (unsigned)nch);
        colsum_chunks<T><<<grid, 256, 0, s>>>(g, part, rows, n, chunk);
    }
    colsum_final<TD><<<rm_cuda_blocks(n, 256), 256, 0, s>>>(part, db, nch, n);
    return cudaGetLastError();
}

extern "C" {
int64_t rm_cuda_colsum_chunk(int64_t rows) {
    int64_t chunk = 64;
    while ((rows + chunk - 1) / chunk > 65535) chunk *= 2; /* grid.y's limit */
    return chunk;
}

cudaError_t rm_cuda_fill_rows(void *y, const void *bias, int64_t rows, int64_t n, int es,
                              cudaStream_t s) {
    if (rows > 0 && n > 0) {
        const unsigned bx = rm_cuda_blocks(n, 256);
        const dim3 grid(bx < 65535 ? bx : 65535, (unsigned)(rows < 65535 ? rows : 65535));
        if (es == 2) /* bf16: the bits copied */
            fill_rows<unsigned short>
                <<<grid, 256, 0, s>>>((unsigned short *)y, (const unsigned short *)bias, rows, n);
        else if (es == 4)
            fill_rows<float><<<grid, 256, 0, s>>>((float *)y, (const float *)bias, rows, n);
        else fill_rows<double><<<grid, 256, 0, s>>>((double *)y, (const double *)bias, rows, n);
    }
    return cudaGetLastError();
}

cudaError_t rm_cuda_colsum_f32(const float *g, float *db, int64_t rows, int64_t n, double *part,
                               cudaStream_t s) {
    return colsum(g, db, rows, n, part, s);
}
cudaError_t rm_cuda_colsum_f64(const double *g, double *db, int64_t rows, int64_t n, double *part,
                               cudaStream_t s) {
    return colsum(g, db, rows, n, part, s);
}
cudaError_t rm_cuda_colsum_bf16(const void *g, void *db, int64_t rows, int64_t n, double *part,
                                cudaStream_t s) {
    return colsum((const rmk_bf16 *)g, (rmk_bf16 *)db, rows, n, part, s);
}
cudaError_t rm_cuda_colsum_bf16_f32(const void *g, float *db, int64_t rows, int64_t n, double *part,
                                    cudaStream_t s) {
    return colsum((const rmk_bf16 *)g, db, rows, n, part, s);
}
}
