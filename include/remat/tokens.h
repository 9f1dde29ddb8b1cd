/*
 * remat/tokens.h — token data for training: llm.c's .bin shards,
 * memory-mapped, read in windows of T+1 tokens, in order or shuffled, each
 * rank of a data-parallel job taking its own share.
 *
 * The file format (llm.c's, so its data scripts and shards work as they are):
 * a header of 256 little-endian int32 — [0] magic 20240520, [1] version
 * (1: tokens are uint16; 2: uint32), [2] the number of tokens, the rest 0 —
 * then the tokens, little-endian. `remat tokenize` writes them.
 *
 *   const char *shards[] = {"train_000.bin", "train_001.bin"};
 *   remat_token_data *d;
 *   remat_token_data_open(shards, 2, &d);              // checks every header
 *   remat_token_loader_options o;
 *   remat_token_loader_options_init(&o, 1024);          // windows of T+1 = 1025 tokens
 *   o.rank = rank; o.world = world;                     // this rank's share
 *   o.shuffle = true; o.seed = 1234;                    // a new order every epoch
 *   remat_token_loader *l;
 *   remat_token_loader_create(d, &o, &l);
 *   int64_t x[8 * 1024], y[8 * 1024];
 *   remat_token_loader_batch(l, 8, x, y);               // 8 windows: inputs and targets
 *   ...
 *   remat_token_loader_free(l); remat_token_data_free(d);
 *
 * Windows: a shard of N tokens holds the windows [kT, kT + T + 1) for
 * k = 0, 1, ... while they fit (consecutive windows share one token, the
 * last target of one being the first input of the next; a window never
 * spans two shards). All shards' windows in order make one epoch's list.
 * Rank r of `world` takes the list's entries r, r + world, r + 2 world, ...
 * and every rank the same number of them (the last list entries that do
 * not make a full round are left out), so ranks stay in step. Shuffled,
 * the list is permuted anew every epoch by a pseudo-random permutation of
 * the seed and the epoch (no memory per window); every rank computes the
 * same permutation, so the ranks' shares stay disjoint. At the end of an
 * epoch the loader starts the next one.
 *
 * Errors name the file: a file shorter than its header, a wrong magic or
 * version, a token count that does not match the file's size are
 * REMAT_EFORMAT; an unreadable file REMAT_EIO. Objects are not
 * thread-safe; separate loaders over one remat_token_data are.
 */
#ifndef REMAT_TOKENS_H
#define REMAT_TOKENS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "remat/error.h"

#include "remat/export.h"

#ifdef __cplusplus
extern "C" {
#endif
REMAT_BEGIN_PUBLIC

#define REMAT_TOKENS_MAGIC 20240520
#define REMAT_TOKENS_HEADER_INTS 256

/* Writes n tokens to path as a .bin shard: version 1 (uint16) when every
 * token is below 65536, else version 2 (uint32). The file appears whole or
 * not at all (written beside it, then renamed). REMAT_EIO on failure. */
remat_status remat_token_shard_write(const char *path, const uint32_t *tokens, size_t n);

/* A set of shards, mapped read-only. */
typedef struct remat_token_data remat_token_data;

/* Opens and checks the n_paths shards (their headers, and that each file's
 * size matches its token count). On failure *out is NULL and nothing stays
 * open. OUT: *out, free with remat_token_data_free. */
remat_status remat_token_data_open(const char *const *paths, size_t n_paths,
                                   remat_token_data **out);

/* Unmaps and frees; NULL is a no-op. */
void remat_token_data_free(remat_token_data *d);

/* Tokens in all shards. */
uint64_t remat_token_data_count(const remat_token_data *d);

/* Number of shards, and shard i's token count (0 when i is out of range). */
size_t remat_token_data_shards(const remat_token_data *d);
uint64_t remat_token_data_shard_count(const remat_token_data *d, size_t i);

/* Copies tokens [start, start + n) of the shards taken end to end into out.
 * REMAT_EINVAL when the range goes past the end. */
remat_status remat_token_data_read(const remat_token_data *d, uint64_t start, size_t n,
                                   uint32_t *out);

typedef struct remat_token_loader_options {
    size_t T; /* a window holds T + 1 tokens (T inputs, T targets) */
    int rank; /* this process's share: rank of world (default 0 of 1) */
    int world;
    bool shuffle;  /* a pseudo-random order each epoch (default: in order) */
    uint64_t seed; /* the order's seed (the same on every rank) */
} remat_token_loader_options;

/* Defaults: windows of T + 1, rank 0 of 1, in order, seed 0. */
void remat_token_loader_options_init(remat_token_loader_options *o, size_t T);

typedef struct remat_token_loader remat_token_loader;

/* A loader over d (which must outlive it). REMAT_EINVAL when T is 0,
 * rank is not in [0, world) or this rank's share is empty (no shard holds
 * T + 1 tokens, or fewer windows than ranks); the message gives the
 * numbers. OUT: *out, free with remat_token_loader_free. */
remat_status remat_token_loader_create(const remat_token_data *d,
                                       const remat_token_loader_options *o,
                                       remat_token_loader **out);

void remat_token_loader_free(remat_token_loader *l);

/* Windows this rank reads per epoch. */
uint64_t remat_token_loader_windows(const remat_token_loader *l);

/* This rank's next window: T + 1 tokens into window. */
remat_status remat_token_loader_next(remat_token_loader *l, uint32_t *window);

/* The next b windows as a batch: x[i*T + t] = window_i[t] (inputs) and
 * y[i*T + t] = window_i[t + 1] (targets), for embedding and cross_entropy. */
remat_status remat_token_loader_batch(remat_token_loader *l, size_t b, int64_t *x, int64_t *y);

/* Position: windows read so far by this rank (all epochs). Seeking to a
 * position read before reproduces the same windows (for resuming). */
uint64_t remat_token_loader_tell(const remat_token_loader *l);
void remat_token_loader_seek(remat_token_loader *l, uint64_t position);

/* Where window `position` of this rank starts: shard index and token
 * offset in it (for tests and logs). */
void remat_token_loader_locate(const remat_token_loader *l, uint64_t position, size_t *shard,
                               uint64_t *offset);

REMAT_END_PUBLIC
#ifdef __cplusplus
}
#endif
#endif /* REMAT_TOKENS_H */
