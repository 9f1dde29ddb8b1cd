/* tools/io/training_save.c — the --save / --resume file (see savefile.h, docs/file-format.md). */
#include "training_save.h"

#include "cli/term.h"
#include "cli/util.h"
#include "hf_dir.h"
#include "remat/savefile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FIXED_HEADER_BYTES REMAT_SAVEFILE_HEADER_BYTES

/* ---- CRC-32 --------------------------------------------------------------------------- */
uint32_t savefile_crc32(const void *data, size_t n) { return remat_crc32(data, n); }

/* ---- little-endian byte buffer ---------------------------------------------------------- */
typedef struct buf {
    unsigned char *p;
    size_t len, cap;
    bool oom;
    int rc; /* a failed copy of device data (the message set), else REMAT_OK */
} buf;

/* Room for n more bytes at the end of b (b->len advanced), or NULL (b->oom). */
static unsigned char *grow(buf *b, size_t n) {
    if (b->oom) return NULL;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n) cap *= 2;
        unsigned char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return NULL;
        }
        b->p = p;
        b->cap = cap;
    }
    unsigned char *at = b->p + b->len;
    b->len += n;
    return at;
}

static void put(buf *b, const void *src, size_t n) {
    unsigned char *at = grow(b, n);
    if (at && n) memcpy(at, src, n);
}
static void put_u32(buf *b, uint32_t v) {
    unsigned char x[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 24)};
    put(b, x, 4);
}
static void put_u64(buf *b, uint64_t v) {
    put_u32(b, (uint32_t)v);
    put_u32(b, (uint32_t)(v >> 32));
}
static void put_f64(buf *b, double d) {
    uint64_t v;
    memcpy(&v, &d, 8);
    put_u64(b, v);
}
static bool host_little_endian(void) {
    uint16_t x = 1;
    unsigned char c;
    memcpy(&c, &x, 1);
    return c == 1;
}

static void put_tensor(buf *b, const char *prefix, const char *name, remat_tensor *t) {
    char full[16 + MODEL_MAX_NAME];
    snprintf(full, sizeof full, "%s%s", prefix, name);
    uint32_t n = (uint32_t)strlen(full);
    put_u32(b, n);
    put(b, full, n);
    put_u32(b, (uint32_t)remat_tensor_dtype(t));
    put_u32(b, (uint32_t)remat_ndim(t));
    for (int d = 0; d < remat_ndim(t); d++) put_u64(b, (uint64_t)remat_size(t, d));
    uint64_t nbytes = (uint64_t)remat_numel(t) * remat_dtype_size(remat_tensor_dtype(t));
    put_u64(b, nbytes);
    /* parameters and optimizer state are dense (made so by model/optim init); on a device
     * the host cannot address (cuda) they are copied out */
    unsigned char *at = grow(b, (size_t)nbytes);
    if (!at || !nbytes) return;
    if (remat_device_host_addressable(remat_tensor_device(t).type))
        memcpy(at, remat_data(t), nbytes);
    else if (!b->rc) b->rc = remat_copy_to_buffer(t, remat_tensor_dtype(t), at, remat_numel(t));
}

/* The run's flags that --resume keeps unless they are given again: record
 * RUN_FLAGS, u8 text, one "--flag value" line each (a reader that does not
 * know the record skips it; a file without it resumes with the flags as given). */
#define RUN_FLAGS "run.flags"
static void run_flags_text(const config *c, char *buf, size_t n) {
    snprintf(buf, n,
             "--checkpoint %s\n--reentrant %s\n--autocast %s\n--save-every %ld\n"
             "--plan-offload %s\n--plan-lossy %s\n",
             c->strat.kind == STRAT_NONE || !c->checkpoint_text ? "none" : c->checkpoint_text,
             c->reentrant ? "on" : "off", c->autocast ? "bf16" : "off", c->save_every,
             c->plan_offload ? "on" : "off", c->plan_lossy ? "on" : "off");
}

static void put_bytes_record(buf *b, const char *name, const char *text, uint64_t len) {
    uint32_t n = (uint32_t)strlen(name);
    put_u32(b, n);
    put(b, name, n);
    put_u32(b, (uint32_t)REMAT_U8);
    put_u32(b, 1);
    put_u64(b, len);
    put_u64(b, len);
    put(b, text, (size_t)len);
}

static void put_text_record(buf *b, const char *name, const char *text) {
    put_bytes_record(b, name, text, strlen(text));
}

/* A Hugging Face model's run (MODEL_HF) also keeps the model's config.json
 * (HF_CONFIG) and where its directory was (HF_DIR: the tokenizer for
 * --resume without --init-from). */
#define HF_CONFIG "hf.config"
#define HF_DIR "hf.dir"
/* A run on another device than cpu also keeps that device's RNG state (RNG_DEVICE, the
 * remat_rng_get_state blob): its dropout masks continue where they were. */
#define RNG_DEVICE "rng.device"

/* What the run's data was (CRC-32 and bytes): the text, or the tokens. */
static void task_identity(const task *t, uint32_t *crc, uint64_t *bytes) {
    const void *p = t->kind == TASK_TOKENS ? (const void *)t->tokens : (const void *)t->text;
    size_t n = t->kind == TASK_TOKENS ? t->n_tokens * sizeof *t->tokens : t->text_len;
    *crc = p ? savefile_crc32(p, n) : 0u;
    *bytes = p ? (uint64_t)n : 0u;
}

static int write_all(int fd, const unsigned char *p, size_t n) {
    while (n) {
        ssize_t k = write(fd, p, n);
        if (k < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* The optimizer's index of model parameter j (the optimizer orders them by
 * group), -1 if it has none. */
static int optim_index(const remat_optimizer *o, const model *m, int j) {
    for (int k = 0; k < remat_optim_n_params(o); k++)
        if (remat_optim_param(o, k) == m->params[j].t) return k;
    return -1;
}

static remat_tensor *optim_slot(const remat_optimizer *o, const model *m, int j,
                                remat_optim_slot slot) {
    int k = optim_index(o, m, j);
    return k < 0 ? NULL : remat_optim_state(o, k, slot);
}

/* Removes PATH.tmp.XXXXXX files (regular, 6-character suffix) that saves
 * killed before their rename left next to path. */
static void remove_stale_temporaries(const char *path) {
    char *dcopy = strdup(path), *bcopy = strdup(path);
    if (!dcopy || !bcopy) {
        free(dcopy);
        free(bcopy);
        return;
    }
    const char *dir = dirname(dcopy), *base = basename(bcopy);
    size_t bl = strlen(base);
    DIR *d = opendir(dir);
    if (d) {
        int dfd = dirfd(d);
        for (struct dirent *e; (e = readdir(d)) != NULL;) {
            if (strlen(e->d_name) != bl + 11 || strncmp(e->d_name, base, bl) != 0 ||
                strncmp(e->d_name + bl, ".tmp.", 5) != 0)
                continue;
            struct stat st;
            if (fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
                unlinkat(dfd, e->d_name, 0);
        }
        closedir(d);
    }
    free(dcopy);
    free(bcopy);
}

/* Writes the len bytes at p to path through a temporary file in its directory, renamed over
 * it once complete and synced (a re-save keeps the file's mode). */
static int write_atomic(const char *path, const unsigned char *p, size_t len) {
    /* rename() would replace whatever path is: only a regular file (or
     * nothing) may be there — not a symlink, FIFO, device or directory */
    struct stat tst;
    bool existed = lstat(path, &tst) == 0;
    if (existed && !S_ISREG(tst.st_mode)) {
        return remat_set_error(
            REMAT_EIO, "--save %s: is %s; --save writes regular files only", path,
            S_ISLNK(tst.st_mode)                           ? "a symbolic link"
            : S_ISDIR(tst.st_mode)                         ? "a directory"
            : S_ISFIFO(tst.st_mode)                        ? "a FIFO"
            : S_ISCHR(tst.st_mode) || S_ISBLK(tst.st_mode) ? "a device"
                                                           : "not a regular file");
    }
    remove_stale_temporaries(path);
    /* temp file in the target's directory, so rename() is atomic */
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 16);
    char *dir = strdup(path);
    if (!tmp || !dir) {
        free(tmp);
        free(dir);
        return remat_set_error(REMAT_ENOMEM, "--save %s: out of memory", path);
    }
    snprintf(tmp, plen + 16, "%s.tmp.XXXXXX", path);
    int fd = mkstemp(tmp);
    int rc = REMAT_OK;
    if (fd >= 0) { /* mkstemp makes 0600: a re-save keeps the file's mode, a new file gets
                    * the one the umask gives */
        mode_t mask = umask(0);
        umask(mask);
        if (fchmod(fd, existed ? tst.st_mode & 07777 : 0666 & ~mask) != 0)
            rc = remat_set_error(REMAT_EIO, "--save %s: chmod failed: %s", path, strerror(errno));
    }
    if (fd < 0) {
        rc = remat_set_error(REMAT_EIO, "--save %s: cannot create a temporary file: %s", path,
                             strerror(errno));
    } else {
        if (!rc && (write_all(fd, p, len) != 0 || fsync(fd) != 0)) {
            rc = remat_set_error(REMAT_EIO, "--save %s: write failed: %s", path, strerror(errno));
        }
        if (close(fd) != 0 && !rc)
            rc = remat_set_error(REMAT_EIO, "--save %s: close failed: %s", path, strerror(errno));
        if (!rc && rename(tmp, path) != 0)
            rc = remat_set_error(REMAT_EIO, "--save %s: rename failed: %s", path, strerror(errno));
        if (rc) {
            unlink(tmp);
        } else {
            /* make the rename itself durable */
            int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY);
            if (dfd >= 0) {
                fsync(dfd);
                close(dfd);
            }
        }
    }
    free(tmp);
    free(dir);
    return rc;
}

int savefile_write(const char *path, const config *c, const task *t, const model *m,
                   const remat_optimizer *o, int64_t step) {
    if (!host_little_endian())
        return remat_set_error(REMAT_EUNSUPPORTED, "--save: big-endian hosts are not supported");
    uint8_t rng[REMAT_RNG_STATE_BYTES];
    int rc = remat_rng_get_state(REMAT_DEVICE_CPU, rng);
    if (rc) return rc;
    const bool hf = m->kind == MODEL_HF;
    char hf_dir_path[4096] = "";
    if (hf && c->hf->path && !realpath(c->hf->path, hf_dir_path))
        snprintf(hf_dir_path, sizeof hf_dir_path, "%s", c->hf->path);
    const bool on_dev = m->device.type != REMAT_DEVICE_CPU.type;
    uint8_t dev_rng[REMAT_RNG_STATE_BYTES];
    if (on_dev && (rc = remat_rng_get_state(m->device, dev_rng))) return rc;
    /* + RUN_FLAGS, HF_*, RNG_DEVICE */
    uint32_t n_tensors = (uint32_t)m->n_params + 1 + (hf ? 2u : 0u) + (on_dev ? 1u : 0u);
    for (int i = 0; i < m->n_params; i++)
        n_tensors += (optim_slot(o, m, i, REMAT_OPTIM_EXP_AVG) != NULL) +
                     (optim_slot(o, m, i, REMAT_OPTIM_EXP_AVG_SQ) != NULL);
    const remat_optim_options *oo = remat_optim_get_options(o);

    buf b = {0};
    put(&b, SAVEFILE_MAGIC, 8);
    put_u32(&b, SAVEFILE_VERSION);
    put_u32(&b, FIXED_HEADER_BYTES);
    put_u64(&b, 0); /* file size, patched below */
    size_t h0 = b.len;
    put_u32(&b, (uint32_t)m->kind);
    put_u32(&b, (uint32_t)m->layers);
    put_u32(&b, (uint32_t)m->width);
    put_u32(&b, (uint32_t)m->heads);
    put_u32(&b, (uint32_t)m->context);
    put_u32(&b, (uint32_t)m->vocab);
    put_u32(&b, m->untied ? 1u : 0u);
    put_u32(&b, (uint32_t)c->optim);
    put_u32(&b, (uint32_t)c->batch);
    put_u32(&b, n_tensors);
    put_f64(&b, c->lr);
    put_f64(&b, c->weight_decay);
    put_f64(&b, c->momentum);
    put_f64(&b, oo->beta1);
    put_f64(&b, oo->beta2);
    put_f64(&b, oo->eps);
    put_u64(&b, c->seed);
    put_u64(&b, (uint64_t)step);
    put_u64(&b, (uint64_t)remat_optim_updates(o));
    put(&b, rng, sizeof rng);
    uint32_t data_crc;
    uint64_t data_bytes;
    task_identity(t, &data_crc, &data_bytes);
    put_u32(&b, (uint32_t)t->kind);
    put_u32(&b, data_crc);
    put_u64(&b, data_bytes);
    put_u32(&b, c->cosine ? 1u : 0u); /* version 2: the schedule */
    put_u32(&b, (uint32_t)c->accum);
    put_u64(&b, (uint64_t)c->warmup);
    put_f64(&b, c->min_lr);
    put_f64(&b, c->clip);
    if (!b.oom && b.len - h0 != FIXED_HEADER_BYTES) {
        free(b.p);
        return remat_set_error(REMAT_ESTATE, "--save: internal header size mismatch");
    }
    for (int i = 0; i < m->n_params; i++) put_tensor(&b, "", m->params[i].name, m->params[i].t);
    for (int i = 0; i < m->n_params; i++) {
        remat_tensor *sm = optim_slot(o, m, i, REMAT_OPTIM_EXP_AVG);
        remat_tensor *sv = optim_slot(o, m, i, REMAT_OPTIM_EXP_AVG_SQ);
        if (sm) put_tensor(&b, "optim.m.", m->params[i].name, sm);
        if (sv) put_tensor(&b, "optim.v.", m->params[i].name, sv);
    }
    char flags[512];
    run_flags_text(c, flags, sizeof flags);
    put_text_record(&b, RUN_FLAGS, flags);
    if (hf) {
        put_bytes_record(&b, HF_CONFIG, c->hf->config_text, c->hf->config_len);
        put_text_record(&b, HF_DIR, hf_dir_path);
    }
    if (on_dev) put_bytes_record(&b, RNG_DEVICE, (const char *)dev_rng, sizeof dev_rng);
    put_u32(&b, 0); /* CRC placeholder */
    if (b.rc) {
        free(b.p);
        char msg[512]; /* remat_set_error must not read the buffer it writes */
        snprintf(msg, sizeof msg, "%s", remat_last_error());
        return remat_set_error(b.rc, "--save %s: %s", path, msg);
    }
    if (b.oom) {
        free(b.p);
        return remat_set_error(REMAT_ENOMEM, "--save %s: out of memory", path);
    }
    uint64_t size = b.len;
    for (int k = 0; k < 8; k++) b.p[16 + k] = (unsigned char)(size >> (8 * k));
    uint32_t crc = savefile_crc32(b.p, b.len - 4);
    for (int k = 0; k < 4; k++) b.p[b.len - 4 + k] = (unsigned char)(crc >> (8 * k));

    rc = write_atomic(path, b.p, b.len);
    free(b.p);
    return rc;
}

/* ---- reading --------------------------------------------------------------------------- */
void savefile_free(saved_state *s) {
    free(s->image);
    free(s->tensors);
    memset(s, 0, sizeof *s);
}

/* The program's copy of the library's header fields. */
static void take_header(saved_state *s, const remat_savefile_header *h) {
    s->model = h->model;
    s->layers = h->layers;
    s->width = h->width;
    s->heads = h->heads;
    s->context = h->context;
    s->vocab = h->vocab;
    s->untied = h->untied;
    s->optim = h->optim;
    s->batch = h->batch;
    s->n_tensors = h->n_tensors;
    s->lr = h->lr;
    s->weight_decay = h->weight_decay;
    s->momentum = h->momentum;
    s->beta1 = h->beta1;
    s->beta2 = h->beta2;
    s->eps = h->eps;
    s->seed = h->seed;
    s->step = h->step;
    s->optim_t = h->optim_t;
    memcpy(s->rng, h->rng, sizeof s->rng);
    s->task = h->task;
    s->data_crc = h->data_crc;
    s->data_bytes = h->data_bytes;
    s->has_schedule = h->has_schedule;
    s->schedule = h->schedule;
    s->accum = h->accum;
    s->warmup = h->warmup;
    s->min_lr = h->min_lr;
    s->clip = h->clip;
}

/* The saved hyperparameters against their flags' bounds (args_check_value:
 * the numbers `remat train` would take on its command line). A value out of
 * range is a corrupt file, and the message names the file and the saved
 * flag, never a flag the user did not type. */
static int check_hyperparameters(const saved_state *s, const char *path) {
    const struct {
        const char *flag;
        double v;
        bool v2; /* stored since version 2 (has_schedule) */
    } hp[] = {
        {"--lr", s->lr, false},
        {"--weight-decay", s->weight_decay, false},
        {"--momentum", s->momentum, false},
        {"--lr-schedule", (double)s->schedule, true},
        {"--warmup", (double)s->warmup, true},
        {"--min-lr", s->min_lr, true},
        {"--clip", s->clip, true},
        {"--accum", (double)s->accum, true},
    };
    char err[160];
    for (size_t i = 0; i < sizeof hp / sizeof *hp; i++)
        if ((!hp[i].v2 || s->has_schedule) &&
            args_check_value(CMD_TRAIN, hp[i].flag, hp[i].v, err, sizeof err))
            return remat_set_error(REMAT_EFORMAT,
                                   "--resume %s: corrupt header: the saved %s is %.15g (%s)", path,
                                   hp[i].flag, hp[i].v, err);
    return REMAT_OK;
}

/* The header's values against the flags' limits and the file's size (each
 * block has at least a width x width f32 matrix, a GPT a context x width
 * position table; a tensor record takes at least 21 bytes): a corrupt
 * header is refused before the rest of the file is read or a model built. */
static int check_header(const saved_state *s, const char *path, uint64_t size) {
    const char *bad = NULL;
    uint64_t v = 0, lim = 0;
#define LIMIT(field, max)                                                                          \
    if (!bad && (s->field == 0 || s->field > (uint64_t)(max))) {                                   \
        bad = #field;                                                                              \
        v = s->field;                                                                              \
        lim = (uint64_t)(max);                                                                     \
    }
    LIMIT(layers, ARGS_MAX_LAYERS)
    LIMIT(width, ARGS_MAX_WIDTH)
    LIMIT(heads, ARGS_MAX_HEADS)
    LIMIT(context, ARGS_MAX_CONTEXT)
    LIMIT(batch, ARGS_MAX_BATCH)
#undef LIMIT
    if (bad)
        return remat_set_error(REMAT_EFORMAT,
                               "--resume %s: corrupt header: %s %llu is outside "
                               "1..%llu (the --%s limit)",
                               path, bad, (unsigned long long)v, (unsigned long long)lim, bad);
    const char *what = s->model > 3                                         ? "model"
                       : s->optim > 1                                       ? "optimizer"
                       : s->untied > 1                                      ? "untied head"
                       : s->task > 3                                        ? "task"
                       : (s->model == MODEL_HF) != (s->task == TASK_TOKENS) ? "task for the model"
                       : s->step < 0                                        ? "step"
                       : s->optim_t < 0 ? "optimizer update count"
                                        : NULL;
    if (what)
        return remat_set_error(REMAT_EFORMAT, "--resume %s: corrupt header (impossible %s)", path,
                               what);
    int rc = check_hyperparameters(s, path);
    if (rc) return rc;
    uint64_t min_bytes =
        (uint64_t)s->layers * s->width * (s->model == MODEL_HF ? 1u : s->width) * 4u;
    if (s->model == MODEL_GPT) min_bytes += (uint64_t)s->context * s->width * 4u;
    if (min_bytes > size || (uint64_t)s->n_tensors * 21u > size)
        return remat_set_error(REMAT_EFORMAT,
                               "--resume %s: corrupt header: %u layers of width "
                               "%u%s and %u tensors cannot fit in a file of %llu bytes",
                               path, s->layers, s->width, s->model == MODEL_GPT ? " (GPT)" : "",
                               s->n_tensors, (unsigned long long)size);
    return REMAT_OK;
}

/* Reads exactly n bytes at the descriptor's position; -1 on error or EOF. */
static int read_full(int fd, unsigned char *p, size_t n) {
    while (n) {
        ssize_t k = read(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

int savefile_read(const char *path, saved_state *s) {
    memset(s, 0, sizeof *s);
    if (!host_little_endian())
        return remat_set_error(REMAT_EUNSUPPORTED,
                               "--resume %s: big-endian hosts are not "
                               "supported",
                               path);
    /* a model directory given where a --save file belongs */
    struct stat dst;
    char cfg[4200];
    snprintf(cfg, sizeof cfg, "%s/config.json", path);
    if (stat(path, &dst) == 0 && S_ISDIR(dst.st_mode) && stat(cfg, &dst) == 0)
        return remat_set_error(REMAT_EINVAL,
                               "--resume %s is a Hugging Face model directory: start from it with "
                               "--init-from %s (--resume takes a file written by --save)",
                               path, path);
    /* only a regular file (a FIFO must not block the open) */
    int fd = util_open_regular(path, "--resume");
    if (fd < 0) return REMAT_EIO;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return remat_set_error(REMAT_EIO, "--resume %s: %s", path, strerror(errno));
    }
    size_t size = (size_t)st.st_size;
    /* the preamble and header first: a bad header is refused before the
     * rest of the file is read or anything is allocated for it */
    unsigned char head[REMAT_SAVEFILE_PREFIX_BYTES];
    size_t hn = size < sizeof head ? size : sizeof head;
    if (read_full(fd, head, hn) != 0) {
        close(fd);
        return remat_set_error(REMAT_EIO, "--resume %s: read error", path);
    }
    remat_savefile_header h;
    int rc = remat_savefile_parse_header(head, hn, size, &h);
    if (!rc) {
        take_header(s, &h);
        rc = check_header(s, path, size);
    } else {
        rc = remat_set_error(rc, "--resume %s: %s", path, remat_last_error());
    }
    if (rc) {
        close(fd);
        return rc;
    }
    s->image = malloc(size);
    if (!s->image) {
        close(fd);
        return remat_set_error(REMAT_ENOMEM, "--resume %s: out of memory for %zu bytes", path,
                               size);
    }
    memcpy(s->image, head, hn);
    int got = read_full(fd, s->image + hn, size - hn);
    close(fd);
    if (got != 0) {
        savefile_free(s);
        return remat_set_error(REMAT_EIO,
                               "--resume %s: read error (the file changed while it "
                               "was read?)",
                               path);
    }
    s->size = size;
    remat_saved_record *recs = NULL;
    rc = remat_savefile_parse(s->image, size, &h, &recs);
    if (rc) {
        savefile_free(s);
        return remat_set_error(rc, "--resume %s: %s", path, remat_last_error());
    }
    s->tensors = calloc(h.n_tensors ? h.n_tensors : 1, sizeof *s->tensors);
    if (!s->tensors) {
        free(recs);
        savefile_free(s);
        return remat_set_error(REMAT_ENOMEM, "--resume %s: out of memory", path);
    }
    for (uint32_t i = 0; i < h.n_tensors; i++) {
        saved_tensor *t = &s->tensors[i];
        t->name = recs[i].name;
        t->name_len = recs[i].name_len;
        t->dtype = recs[i].dtype;
        t->ndim = recs[i].ndim;
        memcpy(t->shape, recs[i].shape, sizeof t->shape);
        t->nbytes = recs[i].nbytes;
        t->data = recs[i].data;
    }
    free(recs);
    return REMAT_OK;
}

#define MISMATCH(flag, have, want)                                                                 \
    remat_set_error(REMAT_EINVAL,                                                                  \
                    "--resume %s: " flag " %lld does not match the saved run's %lld (leave "       \
                    "it out to continue with the saved value)",                                    \
                    path, (long long)(have), (long long)(want))

void savefile_model_config(const saved_state *s, config *c) {
    c->model = (model_kind)s->model;
    c->layers = (int)s->layers;
    c->width = (int)s->width;
    c->heads = (int)s->heads;
    c->context = (int)s->context;
    c->batch = (int)s->batch;
    c->untied = s->untied != 0;
    c->optim = (optim_kind)s->optim;
}

static const saved_tensor *find(const saved_state *s, const char *prefix, const char *name);
static int needs_data(const saved_state *s, const char *path);

/* The value of "--flag value" in the RUN_FLAGS text t (len bytes) into v, or false. */
static bool run_flag(const char *t, size_t len, const char *flag, char *v, size_t n) {
    size_t fl = strlen(flag);
    for (size_t i = 0; i < len;) {
        const char *nl = memchr(t + i, '\n', len - i);
        size_t e = nl ? (size_t)(nl - t) : len;
        if (e - i > fl && !memcmp(t + i, flag, fl) && t[i + fl] == ' ') {
            snprintf(v, n, "%.*s", (int)(e - i - fl - 1), t + i + fl + 1);
            return true;
        }
        i = e + 1;
    }
    return false;
}

/* --checkpoint, --reentrant, --autocast and --save-every from the file where
 * the command line leaves them out; says what it kept (unless --quiet). The
 * planner's options --plan-offload and --plan-lossy belong to the saved
 * --checkpoint: kept with it (a flag given on the command line can only add
 * one), and not when --checkpoint is given again (then they are as given). */
static int merge_run_flags(const saved_state *s, const char *path, config *c) {
    static char kept_checkpoint[224]; /* outlives the file's image */
    const saved_tensor *r = find(s, "", RUN_FLAGS);
    if (!r || r->dtype != (uint32_t)REMAT_U8) return REMAT_OK; /* an older file */
    const char *t = (const char *)r->data;
    size_t len = (size_t)r->nbytes;
    char v[224], note[400] = "";
    size_t nn = 0;
    if (!c->set_reentrant && run_flag(t, len, "--reentrant", v, sizeof v))
        c->reentrant = strcmp(v, "on") == 0;
    if (!c->checkpoint_text && run_flag(t, len, "--checkpoint", v, sizeof v) &&
        strcmp(v, "none") != 0) {
        char err[256];
        strategy st;
        memset(&st, 0, sizeof st);
        if (!strategy_parse(v, c->reentrant, &st, err, sizeof err))
            return remat_set_error(REMAT_EFORMAT, "--resume %s: the saved --checkpoint %s: %s",
                                   path, v, err);
        snprintf(kept_checkpoint, sizeof kept_checkpoint, "%s", v);
        strategy_free(&c->strat);
        c->strat = st;
        c->checkpoint_text = kept_checkpoint;
        nn += (size_t)snprintf(note + nn, sizeof note - nn, ", --checkpoint %s", v);
        static const char *const plan_flags[] = {"--plan-offload", "--plan-lossy"};
        bool *plan_opts[] = {&c->plan_offload, &c->plan_lossy};
        for (int i = 0; i < 2; i++)
            if (!*plan_opts[i] && run_flag(t, len, plan_flags[i], v, sizeof v) &&
                strcmp(v, "on") == 0) {
                *plan_opts[i] = true;
                if (nn < sizeof note)
                    nn += (size_t)snprintf(note + nn, sizeof note - nn, ", %s", plan_flags[i]);
            }
    }
    if (!c->set_autocast && run_flag(t, len, "--autocast", v, sizeof v)) {
        c->autocast = strcmp(v, "bf16") == 0;
        if (c->autocast && nn < sizeof note)
            nn += (size_t)snprintf(note + nn, sizeof note - nn, ", --autocast bf16");
    }
    if (!c->set_save_every && c->save && run_flag(t, len, "--save-every", v, sizeof v)) {
        c->save_every = atol(v);
        if (c->save_every > 0 && nn < sizeof note)
            nn +=
                (size_t)snprintf(note + nn, sizeof note - nn, ", --save-every %ld", c->save_every);
    }
    if (nn && !c->quiet)
        term_printf(stderr,
                    "remat train: --resume %s: continuing with the saved run's%s (give the "
                    "flag to change it)\n",
                    path, note + 1);
    return REMAT_OK;
}

int savefile_merge_config(const saved_state *s, const char *path, config *c) {
    static const char *const kinds[] = {"gpt", "mlp", "Hugging Face", "llama"};
    if (c->set_model && (uint32_t)c->model != s->model)
        return remat_set_error(REMAT_EINVAL, "--resume %s: --model %s does not match the saved %s",
                               path, kinds[c->model], kinds[s->model]);
    if (c->init_from && s->model != MODEL_HF)
        return remat_set_error(REMAT_EINVAL,
                               "--resume %s: the saved run trained the program's %s, not a Hugging "
                               "Face model: leave out --init-from",
                               path, kinds[s->model]);
    if (c->export_dir && s->model != MODEL_HF)
        return remat_set_error(REMAT_EINVAL,
                               "--resume %s: --export writes a Hugging Face model; the saved run "
                               "trained the program's %s",
                               path, kinds[s->model]);
    if (c->set_layers && (uint32_t)c->layers != s->layers)
        return MISMATCH("--layers", c->layers, s->layers);
    if (c->set_width && (uint32_t)c->width != s->width)
        return MISMATCH("--width", c->width, s->width);
    if (c->set_heads && (uint32_t)c->heads != s->heads)
        return MISMATCH("--heads", c->heads, s->heads);
    if (c->set_context && (uint32_t)c->context != s->context)
        return MISMATCH("--context", c->context, s->context);
    if (c->set_batch && (uint32_t)c->batch != s->batch)
        return MISMATCH("--batch", c->batch, s->batch);
    if (c->set_seed && c->seed != s->seed) return MISMATCH("--seed", c->seed, s->seed);
    if (c->set_untied && (uint32_t)c->untied != s->untied)
        return remat_set_error(REMAT_EINVAL, "--resume %s: --untied does not match the saved model",
                               path);
    if (c->set_optim && (uint32_t)c->optim != s->optim)
        return remat_set_error(REMAT_EINVAL,
                               "--resume %s: --optim does not match the saved optimizer", path);
    savefile_model_config(s, c);
    c->seed = s->seed;
    /* hyperparameters given on the command line win: changing the learning rate
     * when resuming is common */
    if (!c->set_lr) c->lr = s->lr;
    if (!c->set_weight_decay) c->weight_decay = s->weight_decay;
    if (!c->set_momentum) c->momentum = s->momentum;
    if (s->has_schedule) { /* a version-1 file: the flags as given */
        if (!c->set_schedule) c->cosine = s->schedule == 1;
        if (!c->set_warmup) c->warmup = (long)s->warmup;
        if (!c->set_min_lr) c->min_lr = s->min_lr;
        if (!c->set_clip) c->clip = s->clip;
        if (!c->set_accum) c->accum = (int)s->accum;
    }
    if ((c->model == MODEL_GPT || c->model == MODEL_LLAMA) &&
        (c->width % c->heads != 0 || s->vocab != GPT_VOCAB))
        return remat_set_error(REMAT_EFORMAT, "--resume %s: corrupt header (model shape)", path);
    int rc = merge_run_flags(s, path, c);
    if (rc) return rc;
    /* before the model checks, which would blame the saved --context */
    if (s->task == (uint32_t)TASK_TEXT && !c->data) return needs_data(s, path);
    /* the strategy and flag checks args_parse left for the file's model */
    char err[512];
    if (args_check_model(c, false, err, sizeof err))
        return remat_set_error(REMAT_EINVAL, "--resume %s: %s", path, err);
    return REMAT_OK;
}

/* A run trained on a text file resumes only with --data. */
static int needs_data(const saved_state *s, const char *path) {
    return remat_set_error(REMAT_EINVAL,
                           "--resume %s: the run was trained on a text file (%llu bytes): "
                           "pass it again with --data FILE",
                           path, (unsigned long long)s->data_bytes);
}

int savefile_check_task(const saved_state *s, const char *path, const task *t) {
    static const char *names[] = {"the built-in addition task", "a text file",
                                  "the built-in MLP task", "a Hugging Face model's tokens"};
    if (s->task == (uint32_t)TASK_TEXT && t->kind != TASK_TEXT) return needs_data(s, path);
    if (s->task != (uint32_t)t->kind)
        return remat_set_error(REMAT_EINVAL, "--resume %s: the run was trained on %s, not on %s",
                               path, names[s->task], names[t->kind]);
    uint32_t crc;
    uint64_t bytes;
    task_identity(t, &crc, &bytes);
    if ((t->kind == TASK_TEXT || t->kind == TASK_TOKENS) &&
        (s->data_bytes != bytes || s->data_crc != crc))
        remat_warn("--resume %s: --data has other contents than the file the run was trained on "
                   "(%llu bytes, CRC-32 %08x); continuing on the new data",
                   path, (unsigned long long)s->data_bytes, s->data_crc);
    return REMAT_OK;
}

const char *savefile_record(const saved_state *s, const char *name, size_t *n) {
    const saved_tensor *r = find(s, "", name);
    if (!r || r->dtype != (uint32_t)REMAT_U8) return NULL;
    *n = (size_t)r->nbytes;
    return (const char *)r->data;
}

static const saved_tensor *find(const saved_state *s, const char *prefix, const char *name) {
    size_t pl = strlen(prefix), nl = strlen(name);
    for (uint32_t i = 0; i < s->n_tensors; i++) {
        const saved_tensor *t = &s->tensors[i];
        if (t->name_len == pl + nl && !memcmp(t->name, prefix, pl) &&
            !memcmp(t->name + pl, name, nl))
            return t;
    }
    return NULL;
}

static int load_into(const saved_state *s, const char *path, const char *prefix, const char *name,
                     remat_tensor *dst) {
    const saved_tensor *t = find(s, prefix, name);
    if (!t)
        return remat_set_error(REMAT_EFORMAT, "--resume %s: tensor %s%s is missing", path, prefix,
                               name);
    bool ok = t->dtype == (uint32_t)remat_tensor_dtype(dst) && (int)t->ndim == remat_ndim(dst);
    for (uint32_t d = 0; ok && d < t->ndim; d++) ok = t->shape[d] == remat_size(dst, (int)d);
    if (!ok) {
        char want[64];
        return remat_set_error(REMAT_EFORMAT,
                               "--resume %s: tensor %s%s has the wrong shape (model "
                               "expects %s)",
                               path, prefix, name, remat_describe(dst, want, sizeof want));
    }
    if (remat_device_host_addressable(remat_tensor_device(dst).type)) {
        memcpy(remat_data(dst), t->data, (size_t)t->nbytes);
        return REMAT_OK;
    }
    /* a device the host cannot address (cuda): through a host tensor and a device copy */
    remat_tensor *h = NULL, *d = NULL;
    int rc = remat_from_data(&h, (int)t->ndim, t->shape, remat_tensor_dtype(dst), t->data);
    if (!rc) rc = remat_to_device(&d, h, remat_tensor_device(dst));
    if (!rc) {
        bool prev = remat_no_grad_begin();
        rc = remat_copy_(dst, d);
        remat_grad_mode_restore(prev);
    }
    remat_release(d);
    remat_release(h);
    if (rc) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", remat_last_error());
        return remat_set_error(rc, "--resume %s: tensor %s%s: %s", path, prefix, name, msg);
    }
    return REMAT_OK;
}

int savefile_load_params(const saved_state *s, const char *path, model *m) {
    int rc = REMAT_OK;
    for (int i = 0; !rc && i < m->n_params; i++)
        rc = load_into(s, path, "", m->params[i].name, m->params[i].t);
    return rc;
}

int savefile_restore(const saved_state *s, const char *path, model *m, remat_optimizer *o,
                     int64_t *step) {
    const remat_optim_options *oo = remat_optim_get_options(o);
    if (oo->kind == REMAT_OPTIM_ADAMW &&
        (s->beta1 != oo->beta1 || s->beta2 != oo->beta2 || s->eps != oo->eps))
        return remat_set_error(REMAT_EFORMAT,
                               "--resume %s: AdamW betas (%g, %g), eps %g in the file; this remat "
                               "uses (%g, %g), eps %g",
                               path, s->beta1, s->beta2, s->eps, oo->beta1, oo->beta2, oo->eps);
    int rc = savefile_load_params(s, path, m);
    for (int i = 0; !rc && i < m->n_params; i++) {
        remat_tensor *sm = optim_slot(o, m, i, REMAT_OPTIM_EXP_AVG);
        remat_tensor *sv = optim_slot(o, m, i, REMAT_OPTIM_EXP_AVG_SQ);
        if (sm) rc = load_into(s, path, "optim.m.", m->params[i].name, sm);
        if (!rc && sv) rc = load_into(s, path, "optim.v.", m->params[i].name, sv);
    }
    if (rc) return rc;
    rc = remat_optim_set_updates(o, s->optim_t);
    if (rc) return remat_set_error(rc, "--resume %s: %s", path, remat_last_error());
    rc = remat_rng_set_state(REMAT_DEVICE_CPU, s->rng);
    size_t dn = 0;
    const char *dev_rng = savefile_record(s, RNG_DEVICE, &dn);
    /* a file of a cpu run resumed on a device leaves the device's generator as seeded */
    if (!rc && dev_rng && dn == REMAT_RNG_STATE_BYTES && m->device.type != REMAT_DEVICE_CPU.type)
        rc = remat_rng_set_state(m->device, (const uint8_t *)dev_rng);
    if (rc) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", remat_last_error());
        return remat_set_error(rc, "--resume %s: the saved RNG state: %s", path, msg);
    }
    *step = s->step;
    return REMAT_OK;
}
