/* src/sac/offload.h — the entries of src/sac/offload.c: a device tensor moved to host memory
 * (pinned, copied on the device's side stream when its type has transfer ops: cuda) and
 * brought back, prefetched in the order backward wants them. remat_offload_saved_hooks is
 * made of them (saved tensors), and selective checkpointing's MUST/PREFER_CPU_OFFLOAD
 * policies use them for the outputs and saves a region caches (selective.c). */
#ifndef REMAT_SAC_OFFLOAD_H
#define REMAT_SAC_OFFLOAD_H

#include "core/core.h"

typedef struct rm_offload_entry rm_offload_entry;

/* Starts copying t's storage to host memory; *out (OUT) the entry, which holds t until the
 * copy is done (then t's device memory can go), or holds t itself when t is a cpu tensor
 * or has no data. group: NULL for a saved tensor (backward unpacks those in the reverse
 * order of packing); entries packed with the same non-NULL group (a selective region) are
 * unpacked in pack order, groups in the reverse order. On failure (REMAT_ENOMEM for host
 * memory, a copy's error) *out is NULL and nothing is held. */
remat_status rm_offload_pack(remat_tensor *t, const void *group, rm_offload_entry **out);
/* *out (OUT, a new reference): the tensor back on its device — the prefetched copy (the
 * compute stream waits for it) or one fetched now; then the next entries backward will
 * unpack start coming back. The entry keeps its host copy (it can be unpacked again). */
remat_status rm_offload_unpack(rm_offload_entry *e, remat_tensor **out);
/* Frees the entry: waits for a copy in flight, frees the host copy. NULL: no-op. */
void rm_offload_free(rm_offload_entry *e);
/* Waits for every copy to host memory in flight and gives their device tensors' memory back
 * now. Without it that happens at the first pack or unpack after each copy is done: an
 * asynchronous device (cuda) still holds the memory of the last tensors packed when a
 * forward returns. For exact device-memory figures at a point (tests, measurements). */
void rm_offload_settle(void);

#endif /* REMAT_SAC_OFFLOAD_H */
