/* src/backends/cuda/gemm.c — the matmul family on cuBLAS (in progress). */
#include "cuda_backend.h"

void rm_cuda_register_matmul(int device_type) { RM_UNUSED(device_type); }
