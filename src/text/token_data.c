/* src/text/token_data.c — llm.c .bin token shards (remat/tokens.h):
 * writing one, mapping a set, and the loader's windows (in order, or in a
 * per-epoch pseudo-random permutation computed without memory: a Feistel
 * network over the window indexes, cycle-walked into range). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"
#include "remat/tokens.h"

#define HEADER_BYTES ((size_t)REMAT_TOKENS_HEADER_INTS * 4)

typedef struct shard {
    char *path;
    const unsigned char *map; /* the whole file */
    size_t map_len;
    const unsigned char *tokens;
    uint64_t count;
    int width; /* bytes per token: 2 or 4 */
} shard;

struct remat_token_data {
    shard *s;
    size_t n;
    uint64_t total;
};

struct remat_token_loader {
    const remat_token_data *d;
    remat_token_loader_options o;
    uint64_t *first; /* [n + 1]: index of each shard's first window in the epoch's list */
    uint64_t list;   /* windows in the list */
    uint64_t per_rank;
    uint64_t pos;
    unsigned half_bits; /* the permutation's domain: 2^(2 half_bits) >= list */
};

static void put_le32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)v, p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16), p[3] = (unsigned char)(v >> 24);
}
static uint32_t get_le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

remat_status remat_token_shard_write(const char *path, const uint32_t *tokens, size_t n) {
    if (!path || (!tokens && n))
        return rm_err(REMAT_EINVAL, "remat_token_shard_write: %s is NULL",
                      !path ? "path" : "tokens");
    if (n > INT32_MAX)
        return rm_err(
            REMAT_EINVAL,
            "remat_token_shard_write: %s: %zu tokens; the header's count holds 2^31 - 1 at most",
            path, n);
    int width = 2;
    for (size_t i = 0; i < n; i++)
        if (tokens[i] > 0xFFFF) {
            width = 4;
            break;
        }
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 16);
    if (!tmp) return rm_err(REMAT_ENOMEM, "remat_token_shard_write: out of memory");
    snprintf(tmp, plen + 16, "%s.tmp%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        remat_status st = rm_err(REMAT_EIO, "remat_token_shard_write: %s: cannot create: %s", tmp,
                                 strerror(errno));
        free(tmp);
        return st;
    }
    unsigned char header[HEADER_BYTES] = {0};
    put_le32(header, REMAT_TOKENS_MAGIC);
    put_le32(header + 4, width == 2 ? 1 : 2);
    put_le32(header + 8, (uint32_t)n);
    bool ok = fwrite(header, 1, sizeof header, f) == sizeof header;
    unsigned char buf[8192];
    for (size_t i = 0; ok && i < n;) {
        size_t k = 0;
        for (; i < n && k + 4 <= sizeof buf; i++) {
            uint32_t v = tokens[i];
            buf[k++] = (unsigned char)v, buf[k++] = (unsigned char)(v >> 8);
            if (width == 4)
                buf[k++] = (unsigned char)(v >> 16), buf[k++] = (unsigned char)(v >> 24);
        }
        ok = fwrite(buf, 1, k, f) == k;
    }
    ok = (fflush(f) == 0) & ok;
    ok = (fclose(f) == 0) & ok;
    if (!ok || rename(tmp, path) != 0) {
        remat_status st = rm_err(REMAT_EIO, "remat_token_shard_write: %s: %s", path,
                                 ok ? strerror(errno) : "write failed (disk full?)");
        unlink(tmp);
        free(tmp);
        return st;
    }
    free(tmp);
    return REMAT_OK;
}

static remat_status map_shard(shard *s, const char *path) {
    s->path = strdup(path);
    if (!s->path) return rm_err(REMAT_ENOMEM, "remat_token_data_open: out of memory");
    int fd = open(path, O_RDONLY);
    if (fd < 0) return rm_err(REMAT_EIO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return rm_err(REMAT_EIO, "%s: not a regular file", path);
    }
    size_t len = (size_t)sb.st_size;
    if (len < HEADER_BYTES) {
        close(fd);
        return rm_err(
            REMAT_EFORMAT,
            "%s: %zu bytes, shorter than the %zu-byte header of a token file (llm.c .bin)", path,
            len, HEADER_BYTES);
    }
    void *m = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) return rm_err(REMAT_EIO, "%s: cannot map: %s", path, strerror(errno));
    s->map = m;
    s->map_len = len;
    uint32_t magic = get_le32(s->map), version = get_le32(s->map + 4), count = get_le32(s->map + 8);
    if (magic != REMAT_TOKENS_MAGIC)
        return rm_err(REMAT_EFORMAT, "%s: magic %u, not %d: not a token file (llm.c .bin)", path,
                      magic, REMAT_TOKENS_MAGIC);
    if (version != 1 && version != 2)
        return rm_err(REMAT_EFORMAT,
                      "%s: version %u; token files are version 1 (uint16 tokens) or 2 (uint32)",
                      path, version);
    s->width = version == 1 ? 2 : 4;
    s->count = count;
    uint64_t want = (uint64_t)HEADER_BYTES + (uint64_t)count * (uint64_t)s->width;
    if (want != len)
        return rm_err(REMAT_EFORMAT,
                      "%s: the header says %u tokens of %d bytes (%llu bytes with the header) "
                      "but the file has %zu bytes",
                      path, count, s->width, (unsigned long long)want, len);
    s->tokens = s->map + HEADER_BYTES;
    return REMAT_OK;
}

void remat_token_data_free(remat_token_data *d) {
    if (!d) return;
    for (size_t i = 0; i < d->n; i++) {
        if (d->s[i].map) munmap((void *)d->s[i].map, d->s[i].map_len);
        free(d->s[i].path);
    }
    free(d->s);
    free(d);
}

remat_status remat_token_data_open(const char *const *paths, size_t n_paths,
                                   remat_token_data **out) {
    if (!out) return rm_err(REMAT_EINVAL, "remat_token_data_open: out is NULL");
    *out = NULL;
    if (!paths || !n_paths) return rm_err(REMAT_EINVAL, "remat_token_data_open: no files");
    remat_token_data *d = calloc(1, sizeof *d);
    if (d) d->s = calloc(n_paths, sizeof *d->s);
    if (!d || !d->s) {
        free(d);
        return rm_err(REMAT_ENOMEM, "remat_token_data_open: out of memory");
    }
    for (size_t i = 0; i < n_paths; i++) {
        if (!paths[i]) {
            remat_token_data_free(d);
            return rm_err(REMAT_EINVAL, "remat_token_data_open: paths[%zu] is NULL", i);
        }
        d->n++;
        remat_status st = map_shard(&d->s[i], paths[i]);
        if (st) {
            remat_token_data_free(d);
            return st;
        }
        d->total += d->s[i].count;
    }
    *out = d;
    return REMAT_OK;
}

uint64_t remat_token_data_count(const remat_token_data *d) { return d ? d->total : 0; }
size_t remat_token_data_shards(const remat_token_data *d) { return d ? d->n : 0; }
uint64_t remat_token_data_shard_count(const remat_token_data *d, size_t i) {
    return d && i < d->n ? d->s[i].count : 0;
}

static void copy_tokens(const shard *s, uint64_t at, size_t n, uint32_t *out) {
    const unsigned char *p = s->tokens + at * (uint64_t)s->width;
    if (s->width == 2)
        for (size_t i = 0; i < n; i++) out[i] = (uint32_t)p[2 * i] | (uint32_t)p[2 * i + 1] << 8;
    else
        for (size_t i = 0; i < n; i++) out[i] = get_le32(p + 4 * i);
}

remat_status remat_token_data_read(const remat_token_data *d, uint64_t start, size_t n,
                                   uint32_t *out) {
    if (!d || (!out && n))
        return rm_err(REMAT_EINVAL, "remat_token_data_read: %s is NULL", !d ? "d" : "out");
    if (start > d->total || n > d->total - start)
        return rm_err(
            REMAT_EINVAL, "remat_token_data_read: tokens [%llu, %llu) but the data holds %llu",
            (unsigned long long)start, (unsigned long long)start + n, (unsigned long long)d->total);
    for (size_t i = 0; i < d->n && n; i++) {
        const shard *s = &d->s[i];
        if (start >= s->count) {
            start -= s->count;
            continue;
        }
        size_t k = s->count - start < n ? (size_t)(s->count - start) : n;
        copy_tokens(s, start, k, out);
        out += k;
        n -= k;
        start = 0;
    }
    return REMAT_OK;
}

/* ---- the loader ------------------------------------------------------------------ */
void remat_token_loader_options_init(remat_token_loader_options *o, size_t T) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->T = T;
    o->world = 1;
}

static uint64_t splitmix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* entry i of epoch e's permutation of [0, list) */
static uint64_t permute(const remat_token_loader *l, uint64_t epoch, uint64_t i) {
    unsigned h = l->half_bits;
    if (!h) return i;
    uint64_t mask = (1ull << h) - 1, key = splitmix(l->o.seed ^ splitmix(epoch));
    uint64_t x = i;
    do { /* four Feistel rounds: a bijection of [0, 4^h); walk until back in range */
        uint64_t left = x >> h, right = x & mask;
        for (int r = 0; r < 4; r++) {
            uint64_t f = splitmix(right ^ key ^ ((uint64_t)r << 56)) & mask;
            uint64_t nl = right;
            right = left ^ f;
            left = nl;
        }
        x = left << h | right;
    } while (x >= l->list);
    return x;
}

remat_status remat_token_loader_create(const remat_token_data *d,
                                       const remat_token_loader_options *o,
                                       remat_token_loader **out) {
    if (!out) return rm_err(REMAT_EINVAL, "remat_token_loader_create: out is NULL");
    *out = NULL;
    if (!d || !o)
        return rm_err(REMAT_EINVAL, "remat_token_loader_create: %s is NULL", !d ? "d" : "o");
    if (!o->T) return rm_err(REMAT_EINVAL, "remat_token_loader_create: T is 0");
    if (o->world < 1 || o->rank < 0 || o->rank >= o->world)
        return rm_err(REMAT_EINVAL, "remat_token_loader_create: rank %d of world %d", o->rank,
                      o->world);
    remat_token_loader *l = calloc(1, sizeof *l);
    if (l) l->first = calloc(d->n + 1, sizeof *l->first);
    if (!l || !l->first) {
        free(l);
        return rm_err(REMAT_ENOMEM, "remat_token_loader_create: out of memory");
    }
    l->d = d;
    l->o = *o;
    for (size_t i = 0; i < d->n; i++) {
        uint64_t c = d->s[i].count, w = c >= o->T + 1 ? (c - 1) / o->T : 0;
        l->first[i + 1] = l->first[i] + w;
    }
    l->list = l->first[d->n];
    l->per_rank = l->list / (uint64_t)o->world;
    if (!l->per_rank) {
        uint64_t list = l->list;
        free(l->first);
        free(l);
        return rm_err(
            REMAT_EINVAL,
            "remat_token_loader_create: %llu windows of %zu tokens in %llu tokens (%zu files), "
            "fewer than the %d ranks",
            (unsigned long long)list, o->T + 1, (unsigned long long)d->total, d->n, o->world);
    }
    while (o->shuffle && l->list > (1ull << (2 * l->half_bits))) l->half_bits++;
    *out = l;
    return REMAT_OK;
}

void remat_token_loader_free(remat_token_loader *l) {
    if (!l) return;
    free(l->first);
    free(l);
}

uint64_t remat_token_loader_windows(const remat_token_loader *l) { return l ? l->per_rank : 0; }
uint64_t remat_token_loader_tell(const remat_token_loader *l) { return l ? l->pos : 0; }
void remat_token_loader_seek(remat_token_loader *l, uint64_t position) {
    if (l) l->pos = position;
}

void remat_token_loader_locate(const remat_token_loader *l, uint64_t position, size_t *shard_i,
                               uint64_t *offset) {
    uint64_t epoch = position / l->per_rank, k = position % l->per_rank;
    uint64_t j = k * (uint64_t)l->o.world + (uint64_t)l->o.rank;
    if (l->o.shuffle) j = permute(l, epoch, j);
    size_t lo = 0, hi = l->d->n; /* the shard with first[s] <= j < first[s + 1] */
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (l->first[mid] <= j) lo = mid;
        else hi = mid;
    }
    while (l->first[lo + 1] <= j) lo++; /* skip shards without windows */
    *shard_i = lo;
    *offset = (j - l->first[lo]) * l->o.T;
}

remat_status remat_token_loader_next(remat_token_loader *l, uint32_t *window) {
    if (!l || !window)
        return rm_err(REMAT_EINVAL, "remat_token_loader_next: %s is NULL", !l ? "l" : "window");
    size_t s;
    uint64_t off;
    remat_token_loader_locate(l, l->pos++, &s, &off);
    copy_tokens(&l->d->s[s], off, l->o.T + 1, window);
    return REMAT_OK;
}

remat_status remat_token_loader_batch(remat_token_loader *l, size_t b, int64_t *x, int64_t *y) {
    if (!l || !x || !y)
        return rm_err(REMAT_EINVAL, "remat_token_loader_batch: %s is NULL",
                      !l   ? "l"
                      : !x ? "x"
                           : "y");
    size_t T = l->o.T;
    uint32_t *w = malloc((T + 1) * sizeof *w);
    if (!w) return rm_err(REMAT_ENOMEM, "remat_token_loader_batch: out of memory");
    for (size_t i = 0; i < b; i++) {
        remat_token_loader_next(l, w);
        for (size_t t = 0; t < T; t++) {
            x[i * T + t] = w[t];
            y[i * T + t] = w[t + 1];
        }
    }
    free(w);
    return REMAT_OK;
}
