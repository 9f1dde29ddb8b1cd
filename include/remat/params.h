/*
 * remat/params.h — a named collection of parameters (P: a module's
 * named_parameters() / state_dict()).
 *
 * A remat_params maps names ("h.0.attn.c_attn.weight") to tensors and keeps
 * them in the order they were added: iteration, saving (remat/safetensors.h)
 * and error messages follow that order. Lookups by name are O(1).
 *
 * Ownership: the collection holds one reference to every tensor added to it
 * (remat_params_add retains; remat_params_free releases) and its own copy of
 * every name. Tensors handed back by remat_params_tensor / remat_params_get
 * are borrowed: valid while the collection lives, not to be released by the
 * caller (remat_retain them to keep them longer). Loading weights writes
 * into these tensors in place: the collection refers to the model's own
 * parameters, it does not copy them.
 *
 * The same tensor may be added under several names (tied weights). A
 * collection is not synchronised: use it from one thread at a time.
 */
#ifndef REMAT_PARAMS_H
#define REMAT_PARAMS_H

#include <stdint.h>

#include "remat/error.h"
#include "remat/tensor.h"

#include "remat/export.h"

#ifdef __cplusplus
extern "C" {
#endif
REMAT_BEGIN_PUBLIC

typedef struct remat_params remat_params;

/* A new, empty collection in *out (the caller frees it with
 * remat_params_free). REMAT_EINVAL when out is NULL, REMAT_ENOMEM. */
remat_status remat_params_new(remat_params **out);

/* Releases every tensor reference the collection holds and frees it.
 * NULL → no-op. */
void remat_params_free(remat_params *p);

/* Adds `t` under `name` (copied; a NUL-terminated UTF-8 string of 1 to
 * REMAT_PARAMS_MAX_NAME bytes) at the end of the order and retains t.
 * REMAT_EINVAL, nothing added, when a name is already there (the message
 * names it), the name is empty, too long or not valid UTF-8, or an argument
 * is NULL; REMAT_ENOMEM when the collection cannot grow. */
#define REMAT_PARAMS_MAX_NAME 4096
remat_status remat_params_add(remat_params *p, const char *name, remat_tensor *t);

/* Number of entries (0 for NULL). */
int64_t remat_params_count(const remat_params *p);

/* The name / the tensor (borrowed) of entry i, in insertion order; NULL when
 * i is out of range or p is NULL. */
const char *remat_params_name(const remat_params *p, int64_t i);
remat_tensor *remat_params_tensor(const remat_params *p, int64_t i);

/* The index of `name`, or -1 when it is not in the collection. */
int64_t remat_params_find(const remat_params *p, const char *name);

/* The tensor (borrowed) named `name`, or NULL. */
remat_tensor *remat_params_get(const remat_params *p, const char *name);

/* Total elements of all entries (a tensor added under two names counts
 * twice). 0 for NULL. */
int64_t remat_params_numel(const remat_params *p);

REMAT_END_PUBLIC
#ifdef __cplusplus
}
#endif
#endif /* REMAT_PARAMS_H */
