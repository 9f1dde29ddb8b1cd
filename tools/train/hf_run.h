/*
 * tools/train/hf_run.h — the commands that run a Hugging Face model directory
 * (tools/io/hf_dir.h) on the library's model object:
 *
 *   remat eval --init-from DIR --data FILE [--context T] [--json]
 *       the mean next-token cross-entropy over the windows of T + 1 tokens at
 *       0, T, 2T, ... while one fits (inputs the first T, targets the last T)
 *   remat sample --init-from DIR --prompt TEXT --tokens N [--temperature 0] [--json]
 *       generation through a KV cache, stopping early at an end-of-sequence
 *       token; tokens/s on stderr and in the JSON
 *
 * `remat train --init-from` runs in the training loop (tools/train/train.c) with
 * the directory's model as its model (tools/train/models.h, MODEL_HF).
 */
#ifndef REMAT_TOOLS_HF_RUN_H
#define REMAT_TOOLS_HF_RUN_H

#include "cli/args.h"

int cmd_eval(config *c);
int cmd_sample_hf(config *c);

struct hf_dir;
/* train and bench: d's model shape into c (layers, width, heads, untied;
 * c->hf = d); --context beyond the model's positions is an error when
 * given (or resumed), else shortened to them. */
int hf_apply_config(config *c, const struct hf_dir *d);
/* Once the model m exists: its tags into c, and the flag checks that need
 * them (args_check_model: selective names, sequential=N, bench's list). */
int hf_check_flags(config *c, const remat_model *m, bool bench);

#endif
