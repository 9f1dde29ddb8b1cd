/*
 * tools/io/hf_dir.h — a Hugging Face model directory as the remat program uses
 * it (`remat eval`, `remat sample --init-from`, `remat train --init-from ...
 * --export`): its config.json, tokenizer.json and weights into the library's
 * model object (remat/hf.h, remat/models.h, remat/tokenizer.h), the token data
 * the commands read, and the directory a fine-tuned model is exported to.
 *
 * Every error names the flag, the directory and (through the library) the
 * file and the key or tensor at fault.
 */
#ifndef REMAT_TOOLS_IO_HF_DIR_H
#define REMAT_TOOLS_IO_HF_DIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "remat/remat.h"

typedef struct hf_dir {
    char *path; /* the directory (NULL: the config came from a --resume file) */
    remat_model_config cfg;
    remat_hf_extra extra;
    char *config_text; /* config.json as read (a --save file keeps it) */
    size_t config_len;
    remat_tokenizer *tok; /* tokenizer.json; NULL when the directory has none */
} hf_dir;

/* Reads DIR/config.json (and DIR/tokenizer.json when there is one). flag
 * ("--init-from") starts the messages. On failure *d is empty. */
int hf_dir_open(hf_dir *d, const char *dir, const char *flag);
/* The same from config.json text kept elsewhere (a --resume file's); dir, may
 * be NULL, supplies the tokenizer. */
int hf_dir_from_config(hf_dir *d, const char *text, size_t n, const char *name, const char *dir,
                       const char *flag);
void hf_dir_free(hf_dir *d);

/* "GPT-2" or "Llama". */
const char *hf_family_name(remat_model_family f);

/* OUT: *m = the directory's model on device, in training mode, its
 * parameters from the directory's weights when load (else as the library
 * initialises them; the caller seeds). Weights go in by transformers' names;
 * a GPT-2 file written without the "transformer." prefix (the original
 * OpenAI checkpoints) and a tied model's file that also holds
 * "lm_head.weight" load too. */
int hf_model_create(remat_model **m, const hf_dir *d, remat_device device, bool load);

/* The tokens of FILE: an llm.c .bin token shard (remat tokenize) as it is,
 * anything else as text encoded with the directory's tokenizer (as
 * tokenizers' encode(text): special tokens of the post-processor added).
 * OUT: *ids (malloc'd) and *n. flag ("--data") starts the messages. */
int hf_read_tokens(const hf_dir *d, const char *file, const char *flag, uint32_t **ids, size_t *n);

/* Writes m as a Hugging Face directory at out (config.json,
 * model.safetensors; transformers' from_pretrained loads it) and copies the
 * tokenizer files of d's directory (tokenizer.json, tokenizer_config.json,
 * special_tokens_map.json, generation_config.json) beside them. */
int hf_export(const char *out, const hf_dir *d, const remat_model *m);

#endif
