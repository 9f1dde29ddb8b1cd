/* src/backends/cuda/attention_cudnn.h — bf16 attention through cuDNN's fused SDPA
 * (attention_cudnn.cu), the C side: attention_kernels.c asks rmk_cudnn_att_wanted, maps the
 * call (att_cudnn_map.h), prepares, and runs it, and takes remat's kernels (nn.h) whenever
 * one of them says no. Apart from nn.h so that the kernels' files do not depend on it. */
#ifndef REMAT_CUDA_ATTENTION_CUDNN_H
#define REMAT_CUDA_ATTENTION_CUDNN_H

#include "att_cudnn_map.h"
#include "launch.h"

RM_CUDA_BEGIN_DECLS

/* Whether REMAT_CUDA_ATTENTION=cudnn asks for cuDNN and it is there: built in (the frontend's
 * headers at configure time), libcudnn loaded (on the first call), no execution failed
 * before. The first call that finds it missing says what is missing on stderr, once. */
bool rmk_cudnn_att_wanted(void);
/* REMAT_CUDNN_VERBOSE=1: says once per reason why a call was not mapped
 * (rmk_cudnn_att_map's answer). */
void rmk_cudnn_att_skip(const char *why, const rm_attention_dims *d);
/* Finds or builds a's graph on the current device (a->dev): 0 with its workspace bytes in
 * *ws, -1 when cuDNN refuses it (a warning with cuDNN's message and a's shapes, once per
 * key): remat's kernels then take the call. */
int rmk_cudnn_att_prepare(const rmk_cudnn_att *a, size_t *ws);
/* Runs a's prepared graph on s: ptrs in rmk_cudnn_att's operand order (packed scratch where
 * a gradient was NULL), lse (nb, Tq) f32 written forward, read backward; ws of the size
 * prepare gave. 0, or -1 after a warning (cuDNN is then off for the process; the caller
 * reruns the call with remat's kernels, which write every output). */
int rmk_cudnn_att_run(const rmk_cudnn_att *a, void *const *ptrs, void *lse, void *ws,
                      cudaStream_t s);

RM_CUDA_END_DECLS

#endif /* REMAT_CUDA_ATTENTION_CUDNN_H */
