/* src/checkpoint/recompute.h — what the checkpoint layer tells the
 * selective regions about the running recomputation. Not installed. */
#ifndef REMAT_CHECKPOINT_RECOMPUTE_H
#define REMAT_CHECKPOINT_RECOMPUTE_H

/* ---- the running recomputation (src/checkpoint/frame.c) ------------------------
 * How many more tensors the innermost non-reentrant recomputation on this
 * thread must see saved, directly under its own hooks, before it stops
 * early; -1 when none is running, early stop is off, it has stopped, or
 * other hooks (a nested checkpoint's) are in force. Selective regions use
 * it to leave the policy out of an op whose saved inputs end the
 * recomputation (PyTorch saves an op's inputs before its policy sees the op). */
int rm_recompute_remaining(void);

#endif /* REMAT_CHECKPOINT_RECOMPUTE_H */
