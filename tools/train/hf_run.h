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

#endif
