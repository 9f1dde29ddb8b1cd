/* src/sac/sac.h — private declarations shared by the selective-checkpointing
 * sources: a region installs itself as the thread's op interceptor
 * (src/core/intercept.c) while its context is entered (selective.c);
 * policies live in policy.c. */
#ifndef REMAT_SAC_H
#define REMAT_SAC_H

#include "ops/op.h"
#include "remat/selective.h"

typedef struct sac_region sac_region;

/* policy values */
static inline bool sac_is_save(int p) {
    return p == REMAT_MUST_SAVE || p == REMAT_PREFER_SAVE || p == REMAT_MUST_CPU_OFFLOAD ||
           p == REMAT_PREFER_CPU_OFFLOAD || p == REMAT_MUST_SAVE_BF16 ||
           p == REMAT_PREFER_SAVE_BF16;
}
static inline bool sac_is_bf16(int p) {
    return p == REMAT_MUST_SAVE_BF16 || p == REMAT_PREFER_SAVE_BF16;
}
static inline bool sac_is_offload(int p) {
    return p == REMAT_MUST_CPU_OFFLOAD || p == REMAT_PREFER_CPU_OFFLOAD;
}
static inline bool sac_valid_policy(int p) {
    return p >= REMAT_MUST_SAVE && p <= REMAT_PREFER_SAVE_BF16;
}

/* compress.c: t (f32, or bf16 when !to_bf16; any strides, host-addressable, with data)
 * into a new contiguous bf16 (f32) tensor, whatever the skip mode. */
remat_status sac_bf16_convert(remat_tensor **out, remat_tensor *t, bool to_bf16);
/* The same, its errors naming call (a literal). */
remat_status sac_bf16_convert_for(remat_tensor **out, remat_tensor *t, bool to_bf16,
                                  const char *call);
/* The bf16 saved-tensor hooks' handle (compress.c), for hooks that choose per save:
 * sac_bf16_pack stores t as a bf16 copy (to_bf16; t f32 with data) or as it is, NULL on
 * failure (error set, naming call, a literal the handle keeps for its unpack's errors);
 * sac_bf16_unpack and sac_bf16_free are the hooks' unpack and free_handle. */
void *sac_bf16_pack(remat_tensor *t, bool to_bf16, const char *call);
remat_status sac_bf16_unpack(void *ud, void *handle, remat_tensor **out);
void sac_bf16_free(void *ud, void *handle);

#endif
