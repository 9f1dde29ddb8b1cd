/*
 * tools/io/data.h — what the models learn.
 *
 *  - addition (GPT, built in): lines "a+b=c\n" with 0 <= a, b < 100 packed
 *    into each sequence. The loss is taken on the answer bytes only ("c\n";
 *    other targets are -100, ignored). One pair in ten is held out of
 *    training and used for evaluation.
 *  - text (GPT, --data FILE): byte-level next-byte prediction on windows of
 *    the file; the last 10% of the file is held out.
 *  - function (MLP): x ~ N(0, 1)^W, y_i = sin(2 x_i) * cos(x_{i+1 mod W}).
 *  - tokens (--init-from DIR --data FILE): next-token prediction on FILE
 *    tokenized with DIR's tokenizer (or an llm.c token file as it is). The
 *    last 10% of the tokens is held out (if that leaves a window on both
 *    sides); the rest is cut into windows of T + 1 tokens at 0, T, 2T, ...
 *    (as remat eval and remat/tokens.h cut them), taken in order: row r of
 *    step s's global batch of G rows is window (s*G + r) mod their count.
 *
 * Every batch is a pure function of (seed, step, row), so training can be
 * resumed without any data-RNG state.
 */
#ifndef REMAT_TOOLS_DATA_H
#define REMAT_TOOLS_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "train/models.h"

typedef enum task_kind { TASK_ADDITION, TASK_TEXT, TASK_FUNCTION, TASK_TOKENS } task_kind;

typedef struct task {
    task_kind kind;
    int batch, context, width;
    uint64_t seed;
    int64_t row0; /* training rows are rows row0.. of the step's global batch (rank * batch) */
    int world;    /* ranks: a global batch is world * batch rows */
    unsigned char *text;    /* TASK_TEXT: the file */
    size_t text_len, split; /* [0, split) trains, [split, len) is held out */
    uint32_t *tokens;       /* TASK_TOKENS: the tokens; split as for the text, in tokens */
    size_t n_tokens;
    int vocab; /* the model's (task_score's logits); set once the model exists */
} task;

/* Sets up the task of c (reads --data; with a Hugging Face model through its
 * directory c->hf). On error prints nothing, sets the remat error message and
 * returns a status. */
int task_init(task *t, const config *c);
void task_free(task *t);
const char *task_name(const task *t);

/* Training batch of `step`. */
int task_batch(const task *t, int64_t step, batch *b);
/* Held-out batch number i (fixed across the run). */
int task_eval_batch(const task *t, int i, batch *b);

/* Evaluation of outputs (model_outputs) on a held-out batch. */
typedef struct eval_result {
    double loss_sum; /* summed per-position loss (cross-entropy or squared error) */
    int64_t loss_n;
    int64_t tokens, tokens_ok;     /* answer (or all) positions, argmax-correct ones */
    int64_t problems, problems_ok; /* addition: complete problems, all answer bytes right */
} eval_result;
/* Accumulates into r the loss and accuracy of outputs (model_outputs) on
 * held-out batch eval_index (b). */
int task_score(const task *t, int eval_index, const batch *b, remat_tensor *outputs,
               eval_result *r);

#endif /* REMAT_TOOLS_DATA_H */
