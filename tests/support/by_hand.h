/* tests/support/by_hand.h — a user's reentrant-style custom function, shared by
 * the accumulate-observer tests and the data-parallel check: y = x * s, where s
 * is the user_data. Forward saves x and multiplies; backward recomputes x * s
 * with grad on from a detached x and runs a backward pass of its own, which
 * accumulates into s. Nothing a graph walk can see: the case a gradient-ready
 * count must learn from a pass rather than derive. */
#ifndef REMAT_TEST_BY_HAND_H
#define REMAT_TEST_BY_HAND_H

#include "remat/remat.h"

/* Apply with remat_function_apply(&rt_by_hand_mul, s, 1, &x, 1, &y). */
extern const remat_function_def rt_by_hand_mul;

#endif
