/* src/backends/cpu/rope.c — cpu kernel of rope (src/ops/rope.c): rotary
 * position embedding in the Hugging Face Llama convention (rotate_half:
 * the pairs are (i, i + D/2), not interleaved).
 *
 *   inv_freq[i] = theta^(-2i/D),  a = pos[t] · inv_freq[i],  h = D/2,  i < h
 *   y[t, i]     = x[t, i] · cos a − x[t, i + h] · sin a
 *   y[t, i + h] = x[t, i + h] · cos a + x[t, i] · sin a
 *
 * The backward is the rotation by −a (inverse: sin a negated), the same
 * kernel. The angles, cosines and sines are computed in double once per
 * call for the (T, h) table and rounded to the data's type (f32 for the
 * bf16 path, which runs this kernel on widened values), then every row of
 * x (its leading dims) reuses the table: the values do not depend on the
 * thread count, and the forward and the backward use the same cos and sin. */
#include <math.h>
#include <stdlib.h>

#include "clones.h"
#include "cpu.h"
#include "tmpl.h"

/* ---- the kernels, once per dtype: rope_body.h ------------------------------------------ */
#define T f32
#include "rope_body.h"

#define T f64
#include "rope_body.h"
