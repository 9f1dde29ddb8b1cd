/* tools/train/sample.h — `remat sample`: text from a GPT saved by `remat train --save`. */
#ifndef REMAT_TOOLS_SAMPLE_H
#define REMAT_TOOLS_SAMPLE_H

#include "cli/args.h"

/* Loads c->resume, generates c->tokens bytes after c->prompt and prints
 * them; returns the process exit status (0, or 1 with a message). */
int cmd_sample(config *c);

/* The next byte from the logits of the last position (v <= 256 values,
 * f32), by the library's remat_sample_logits: temperature 0 takes the
 * likeliest (the lowest index on ties); otherwise one draw u ~ U[0, 1) from
 * remat's cpu generator picks among the top_k likeliest (0: all v) by their
 * softmax(logits / temperature). */
int sample_pick(const float *logits, int v, double temperature, int top_k, int *out);

#endif /* REMAT_TOOLS_SAMPLE_H */
