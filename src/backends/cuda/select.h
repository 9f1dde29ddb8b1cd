/* src/backends/cuda/select.h — launchers of select.cu: the shape family's
 * selection (masked_fill, where), zeroing and converting copy. C and C++
 * clean; conventions as elementwise.h. Dtype codes are remat's
 * (0 f32, 1 f64, 2 i64, 3 u8, 4 bf16). */
#ifndef REMAT_CUDA_SELECT_H
#define REMAT_CUDA_SELECT_H

#include "kplan.h"
#include "launch.h"

RM_CUDA_BEGIN_DECLS

/* y = cond != 0 ? A : B over the plan (operands 0 y, 1 cond, 2 A, 3 B); A or
 * B NULL: the scalar va / vb. y f32 or f64, cond f32, f64, i64 or u8. */
cudaError_t rmk_select(int ydt, int cdt, const rmk_plan *plan, void *y, const void *cond,
                       const void *a, double va, const void *b, double vb, cudaStream_t s);
/* y := 0 (elements of es bytes) through plan operand 0. */
cudaError_t rmk_zero(size_t es, const rmk_plan *plan, void *y, cudaStream_t s);
/* y := x converted from dtype xdt to ydt (plan operands 0 y, 1 x). */
cudaError_t rmk_convert(int ydt, int xdt, const rmk_plan *plan, void *y, const void *x,
                        cudaStream_t s);

RM_CUDA_END_DECLS

#endif /* REMAT_CUDA_SELECT_H */
