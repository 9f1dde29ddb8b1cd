/* tools/io/tokenize.c — `remat tokenize --tokenizer T.json --data FILE --out F.bin`:
 * FILE's bytes encoded as one text with T.json's tokenizer (remat/tokenizer.h:
 * the ids of tokenizers' Tokenizer.encode(text), special tokens of the
 * post-processor included unless --no-special), written as an llm.c .bin
 * token file (remat/tokens.h; uint16 tokens when they fit, else uint32). */
#include "tokenize.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "remat/tokenizer.h"
#include "remat/tokens.h"

void tokenize_usage(FILE *f) {
    fprintf(f,
            "usage: remat tokenize --tokenizer T.json --data FILE --out F.bin [--no-special]\n"
            "\n"
            "Encodes FILE as one text with a Hugging Face tokenizer.json (byte-level BPE:\n"
            "GPT-2, Llama 3, ...) into an llm.c token file (uint16 tokens when every id\n"
            "fits, else uint32), the ids the tokenizers package gives for\n"
            "tokenizer.encode(text). Invalid UTF-8 in FILE is read as U+FFFD.\n"
            "\n"
            "  --tokenizer T.json  the tokenizer (tokenizer.json of a model directory)\n"
            "  --data FILE         the text to encode\n"
            "  --out F.bin         the token file to write (replaced whole)\n"
            "  --no-special        leave out the post-processor's tokens (Llama 3's\n"
            "                      <|begin_of_text|>): encode(text, add_special_tokens=False)\n");
}

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* --name VALUE or --name=VALUE at argv[*i]: the value, or NULL (not this flag). */
static const char *flag_value(int argc, char **argv, int *i, const char *name, bool *missing) {
    size_t n = strlen(name);
    const char *a = argv[*i];
    if (strncmp(a, name, n) != 0) return NULL;
    if (a[n] == '=') return a + n + 1;
    if (a[n] != '\0') return NULL;
    if (*i + 1 >= argc) {
        *missing = true;
        return NULL;
    }
    return argv[++*i];
}

static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "remat tokenize: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n\n");
    tokenize_usage(stderr);
    return 2;
}

int cmd_tokenize(int argc, char **argv) {
    const char *tok_path = NULL, *data = NULL, *out = NULL;
    bool special = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        bool missing = false;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            tokenize_usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--no-special")) special = false;
        else if ((v = flag_value(argc, argv, &i, "--tokenizer", &missing))) tok_path = v;
        else if ((v = flag_value(argc, argv, &i, "--data", &missing))) data = v;
        else if ((v = flag_value(argc, argv, &i, "--out", &missing))) out = v;
        else if (missing) return usage_error("missing value for '%s'", a);
        else return usage_error("unknown option '%s'", a);
    }
    if (!tok_path || !data || !out)
        return usage_error("%s is required", !tok_path ? "--tokenizer"
                                             : !data   ? "--data"
                                                       : "--out");

    remat_tokenizer *tok;
    if (remat_tokenizer_load(tok_path, &tok)) {
        fprintf(stderr, "remat tokenize: %s\n", remat_last_error());
        return 1;
    }
    int fd = open(data, O_RDONLY);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fprintf(stderr, "remat tokenize: %s: %s\n", data,
                fd < 0 ? strerror(errno) : "not a regular file");
        if (fd >= 0) close(fd);
        remat_tokenizer_free(tok);
        return 1;
    }
    size_t n = (size_t)sb.st_size;
    void *text = n ? mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    close(fd);
    if (text == MAP_FAILED) {
        fprintf(stderr, "remat tokenize: %s: cannot map: %s\n", data, strerror(errno));
        remat_tokenizer_free(tok);
        return 1;
    }
    double t0 = seconds();
    uint32_t *ids = NULL;
    size_t n_ids = 0;
    int rc = remat_tokenizer_encode(tok, text, n, special, &ids, &n_ids);
    double t1 = seconds();
    if (!rc) rc = remat_token_shard_write(out, ids, n_ids);
    if (rc) fprintf(stderr, "remat tokenize: %s\n", remat_last_error());
    else {
        uint32_t max = 0;
        for (size_t i = 0; i < n_ids; i++)
            if (ids[i] > max) max = ids[i];
        printf("%s: %zu tokens (%s) from %zu bytes of %s in %.2f s (%.1f MB/s)\n", out, n_ids,
               max > 0xFFFF ? "uint32" : "uint16", n, data, t1 - t0,
               t1 > t0 ? (double)n / (t1 - t0) / 1e6 : 0.0);
    }
    free(ids);
    if (text) munmap(text, n);
    remat_tokenizer_free(tok);
    return rc ? 1 : 0;
}
