/* src/backends/cuda/register_families.c — the kernel families of the cuda
 * backend that have no CUDA kernels yet (owner: w17k, issue 17). Each
 * function registers its family's kernels for the cuda device type; while
 * one registers nothing, the ops of that family fail on cuda with
 * REMAT_EUNSUPPORTED naming the kernel, the device and the dtype. When a
 * family gets its own file (src/backends/cuda/<family>_kernels.c with its
 * <family>.cu), its function moves there (cuda_backend.h: the convention). */
#include "cuda_backend.h"

void rm_cuda_register_elementwise(int device_type) { RM_UNUSED(device_type); }
void rm_cuda_register_reduce(int device_type) { RM_UNUSED(device_type); }
void rm_cuda_register_nn(int device_type) { RM_UNUSED(device_type); }
void rm_cuda_register_loss(int device_type) { RM_UNUSED(device_type); }
void rm_cuda_register_attention(int device_type) { RM_UNUSED(device_type); }
void rm_cuda_register_shape(int device_type) { RM_UNUSED(device_type); }
