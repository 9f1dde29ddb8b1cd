/* tools/io/hf_dir.c — Hugging Face model directories for the remat program (see hf_dir.h). */
#include "hf_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/util.h"

/* rc with the library's message behind "flag dir: " (remat_set_error must not
 * read the buffer it writes). */
static int with_prefix(int rc, const char *flag, const char *dir) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", remat_last_error());
    return remat_set_error(rc, "%s %s: %s", flag, dir, msg);
}

/* The whole regular file at path into *buf (NUL-terminated, malloc'd). */
static int read_file(const char *path, const char *flag, char **buf, size_t *n) {
    *buf = NULL;
    *n = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        int e = fd < 0 ? errno : 0;
        if (fd >= 0) close(fd);
        return remat_set_error(REMAT_EIO, "%s: cannot read %s: %s", flag, path,
                               e ? strerror(e) : "not a regular file");
    }
    size_t size = (size_t)st.st_size, got = 0;
    char *p = malloc(size + 1);
    while (p && got < size) {
        ssize_t k = read(fd, p + got, size - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        got += (size_t)k;
    }
    close(fd);
    if (!p) return remat_set_error(REMAT_ENOMEM, "%s: out of memory reading %s", flag, path);
    if (got != size) {
        free(p);
        return remat_set_error(REMAT_EIO, "%s: read error on %s", flag, path);
    }
    p[size] = '\0';
    *buf = p;
    *n = size;
    return REMAT_OK;
}

static bool is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* DIR/tokenizer.json into d->tok when the directory has one. */
static int open_tokenizer(hf_dir *d, const char *dir, const char *flag) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/tokenizer.json", dir) >= (int)sizeof path)
        return remat_set_error(REMAT_EINVAL, "%s %s: path too long", flag, dir);
    if (!is_file(path)) return REMAT_OK;
    int rc = remat_tokenizer_load(path, &d->tok);
    return rc ? with_prefix(rc, flag, dir) : REMAT_OK;
}

int hf_dir_from_config(hf_dir *d, const char *text, size_t n, const char *name, const char *dir,
                       const char *flag) {
    memset(d, 0, sizeof *d);
    int rc = remat_hf_config_parse(&d->cfg, &d->extra, text, n, name);
    if (rc) return with_prefix(rc, flag, dir ? dir : name);
    d->config_text = malloc(n + 1);
    d->path = dir ? strdup(dir) : NULL;
    if (!d->config_text || (dir && !d->path)) {
        hf_dir_free(d);
        return remat_set_error(REMAT_ENOMEM, "%s: out of memory", flag);
    }
    memcpy(d->config_text, text, n);
    d->config_text[n] = '\0';
    d->config_len = n;
    if (dir && (rc = open_tokenizer(d, dir, flag))) hf_dir_free(d);
    return rc;
}

int hf_dir_open(hf_dir *d, const char *dir, const char *flag) {
    memset(d, 0, sizeof *d);
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return remat_set_error(REMAT_EIO,
                               "%s %s: %s (a Hugging Face model directory: config.json, "
                               "model.safetensors, tokenizer.json)",
                               flag, dir,
                               stat(dir, &st) != 0 ? strerror(errno) : "is not a directory");
    char path[4096];
    if (snprintf(path, sizeof path, "%s/config.json", dir) >= (int)sizeof path)
        return remat_set_error(REMAT_EINVAL, "%s %s: path too long", flag, dir);
    if (!is_file(path))
        return remat_set_error(REMAT_EIO,
                               "%s %s: the directory has no config.json (a Hugging Face model "
                               "directory, as save_pretrained writes it)",
                               flag, dir);
    char *text;
    size_t n;
    int rc = read_file(path, flag, &text, &n);
    if (!rc) rc = hf_dir_from_config(d, text, n, path, dir, flag);
    free(text);
    return rc;
}

void hf_dir_free(hf_dir *d) {
    if (!d) return;
    free(d->path);
    free(d->config_text);
    remat_tokenizer_free(d->tok);
    memset(d, 0, sizeof *d);
}

const char *hf_family_name(remat_model_family f) {
    return f == REMAT_MODEL_GPT2 ? "GPT-2" : f == REMAT_MODEL_LLAMA ? "Llama" : "?";
}

/* Loads the directory's weights by transformers' names (the library also
 * takes them without the base-model prefix and skips the hub files'
 * buffers: remat_hf_load_weights); a tied model whose file also lists
 * lm_head.weight (state_dict's names) gets a second try with those. The
 * first error is the one reported (loading is all or nothing: a failed try
 * changed nothing). */
static int load_weights(remat_model *m, const hf_dir *d) {
    char first[1024] = "";
    int first_rc = REMAT_OK;
    for (int state_dict = 0; state_dict <= (d->cfg.tie_word_embeddings ? 1 : 0); state_dict++) {
        remat_params *p = NULL;
        int rc = remat_model_params(m, state_dict, &p);
        if (!rc) rc = remat_hf_load_weights(p, d->path, NULL);
        remat_params_free(p);
        if (!rc) return REMAT_OK;
        if (!state_dict) {
            snprintf(first, sizeof first, "%s", remat_last_error());
            first_rc = rc;
            /* a file that is not there or not safetensors: no other names help */
            if (rc != REMAT_EINVAL) break;
        }
    }
    return remat_set_error(first_rc, "--init-from %s: %s", d->path, first);
}

int hf_model_create(remat_model **m, const hf_dir *d, remat_device device, bool load) {
    *m = NULL;
    int rc = remat_model_create(m, &d->cfg, device);
    if (rc) return with_prefix(rc, "--init-from", d->path ? d->path : "(config)");
    if (load && (rc = load_weights(*m, d))) {
        remat_model_free(*m);
        *m = NULL;
    }
    return rc;
}

/* An llm.c token file begins with the little-endian magic 20240520. */
static bool is_token_file(const char *path) {
    unsigned char b[4];
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    bool yes =
        fread(b, 1, 4, f) == 4 && ((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                                   (uint32_t)b[3] << 24) == REMAT_TOKENS_MAGIC;
    fclose(f);
    return yes;
}

static int read_token_file(const char *file, const char *flag, uint32_t **ids, size_t *n) {
    remat_token_data *td = NULL;
    int rc = remat_token_data_open(&file, 1, &td);
    if (rc) return with_prefix(rc, flag, file);
    uint64_t count = remat_token_data_count(td);
    uint32_t *p = malloc(sizeof *p * (count ? (size_t)count : 1));
    if (!p) rc = remat_set_error(REMAT_ENOMEM, "%s %s: out of memory", flag, file);
    if (!rc) rc = remat_token_data_read(td, 0, (size_t)count, p);
    remat_token_data_free(td);
    if (rc) {
        free(p);
        return rc;
    }
    *ids = p;
    *n = (size_t)count;
    return REMAT_OK;
}

int hf_read_tokens(const hf_dir *d, const char *file, const char *flag, uint32_t **ids, size_t *n) {
    *ids = NULL;
    *n = 0;
    int fd = util_open_regular(file, flag); /* a FIFO would never end */
    if (fd < 0) return REMAT_EIO;
    close(fd);
    int rc;
    if (is_token_file(file)) {
        rc = read_token_file(file, flag, ids, n);
    } else {
        if (!d->tok)
            return remat_set_error(REMAT_EINVAL,
                                   "%s %s: a text file needs the model's tokenizer.json, and %s "
                                   "has none (or give a token file made by remat tokenize)",
                                   flag, file, d->path ? d->path : "the saved run");
        char *text;
        size_t len;
        rc = read_file(file, flag, &text, &len);
        if (!rc) rc = remat_tokenizer_encode(d->tok, text, len, true, ids, n);
        free(text);
        if (rc) return rc;
    }
    for (size_t i = 0; !rc && i < *n; i++)
        if ((int64_t)(*ids)[i] >= d->cfg.vocab)
            rc = remat_set_error(REMAT_EINVAL,
                                 "%s %s: token %zu is id %u, beyond the model's vocab_size %lld "
                                 "(config.json)",
                                 flag, file, i, (*ids)[i], (long long)d->cfg.vocab);
    if (rc) {
        free(*ids);
        *ids = NULL;
        *n = 0;
    }
    return rc;
}

/* Copies src to dst (replacing it) through a temporary file renamed over it. */
static int copy_file(const char *src, const char *dst) {
    char *buf;
    size_t n;
    int rc = read_file(src, "--export", &buf, &n);
    if (rc) return rc;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.XXXXXX", dst);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        free(buf);
        return remat_set_error(REMAT_EIO, "--export: cannot create %s: %s", dst, strerror(errno));
    }
    size_t done = 0;
    while (done < n) {
        ssize_t k = write(fd, buf + done, n - done);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        done += (size_t)k;
    }
    mode_t mask = umask(0);
    umask(mask);
    bool ok = done == n && fchmod(fd, 0666 & ~mask) == 0;
    ok = close(fd) == 0 && ok;
    ok = ok && rename(tmp, dst) == 0;
    if (!ok) {
        rc = remat_set_error(REMAT_EIO, "--export: cannot write %s: %s", dst, strerror(errno));
        unlink(tmp);
    }
    free(buf);
    return rc;
}

/* mkdir -p: out's missing ancestors (remat_hf_export makes out itself). */
static int make_parents(const char *out) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s", out) >= (int)sizeof path)
        return remat_set_error(REMAT_EINVAL, "--export %s: path too long", out);
    for (char *p = path + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(path, 0777) != 0 && errno != EEXIST)
            return remat_set_error(REMAT_EIO, "--export %s: cannot create %s: %s", out, path,
                                   strerror(errno));
        *p = '/';
    }
    return REMAT_OK;
}

int hf_export(const char *out, const hf_dir *d, const remat_model *m) {
    remat_params *p = NULL;
    int rc = make_parents(out);
    if (!rc) rc = remat_model_params(m, false, &p);
    if (!rc) rc = remat_hf_export(out, remat_model_get_config(m), &d->extra, p);
    remat_params_free(p);
    if (rc) return with_prefix(rc, "--export", out);
    static const char *const files[] = {"tokenizer.json", "tokenizer_config.json",
                                        "special_tokens_map.json", "generation_config.json"};
    for (size_t i = 0; !rc && d->path && i < sizeof files / sizeof *files; i++) {
        char src[4096], dst[4096];
        if (snprintf(src, sizeof src, "%s/%s", d->path, files[i]) >= (int)sizeof src ||
            snprintf(dst, sizeof dst, "%s/%s", out, files[i]) >= (int)sizeof dst)
            return remat_set_error(REMAT_EINVAL, "--export %s: path too long", out);
        if (is_file(src)) rc = copy_file(src, dst);
    }
    return rc;
}
