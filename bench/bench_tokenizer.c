/* bench/bench_tokenizer.c — remat_tokenizer_encode's speed on a text file.
 *
 *   bench_tokenizer TOKENIZER.json TEXT [ROUNDS] [--lines | --dump IDS.u32]
 *
 * Encodes the whole file as one text (or, with --lines, each line as its
 * own text, as a data loader over documents would) ROUNDS times (default
 * 5) and prints, per round, the seconds and the MB/s (10^6 bytes of input
 * per second) on one thread, by the wall clock and by the process's CPU
 * time (which preemption on a busy machine does not inflate), then the
 * medians with the spread and the number of ids. --dump writes the ids of the whole text (uint32, little
 * endian) to a file. bench/tokenizer_speed.py runs it beside the `tokenizers`
 * package on the same file, interleaved. */
#include <stdint.h>

#include "bench_util.h"
#include "remat/tokenizer.h"

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s TOKENIZER.json TEXT [ROUNDS] [--lines]\n", argv[0]);
        return 2;
    }
    int rounds = argc > 3 && argv[3][0] != '-' ? atoi(argv[3]) : 5;
    int lines = argc > 3 && !strcmp(argv[argc - 1], "--lines");
    const char *dump = argc > 4 && !strcmp(argv[argc - 2], "--dump") ? argv[argc - 1] : NULL;
    if (rounds < 1) rounds = 1;
    remat_tokenizer *tok;
    CHECK(remat_tokenizer_load(argv[1], &tok));
    FILE *f = fopen(argv[2], "rb");
    if (!f) {
        perror(argv[2]);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    size_t n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc(n + 1);
    if (!text || fread(text, 1, n, f) != n) return 1;
    fclose(f);
    double *secs = malloc((size_t)rounds * sizeof *secs),
           *cpus = malloc((size_t)rounds * sizeof *cpus);
    size_t total_ids = 0;
    for (int r = 0; r < rounds; r++) {
        uint32_t *ids;
        size_t nids;
        total_ids = 0;
        double t0 = now(), c0 = cpu_now();
        if (lines) {
            for (size_t i = 0; i < n;) {
                char *nl = memchr(text + i, '\n', n - i);
                size_t e = nl ? (size_t)(nl - text) + 1 : n;
                CHECK(remat_tokenizer_encode(tok, text + i, e - i, false, &ids, &nids));
                total_ids += nids;
                free(ids);
                i = e;
            }
        } else {
            CHECK(remat_tokenizer_encode(tok, text, n, false, &ids, &nids));
            total_ids = nids;
            FILE *d = dump && r == 0 ? fopen(dump, "wb") : NULL;
            if (d) {
                if (fwrite(ids, sizeof *ids, nids, d) != nids) perror(dump);
                fclose(d);
            }
            free(ids);
        }
        secs[r] = now() - t0;
        cpus[r] = cpu_now() - c0;
        printf("round %d: %.4f s  %.2f MB/s  cpu %.4f s  %.2f MB/s\n", r, secs[r],
               (double)n / secs[r] / 1e6, cpus[r], (double)n / cpus[r] / 1e6);
    }
    qsort(secs, (size_t)rounds, sizeof *secs, cmp_d);
    double med = secs[rounds / 2];
    printf("remat: %zu bytes -> %zu ids; median %.2f MB/s (rounds %.2f-%.2f MB/s)\n", n, total_ids,
           (double)n / med / 1e6, (double)n / secs[rounds - 1] / 1e6, (double)n / secs[0] / 1e6);
    qsort(cpus, (size_t)rounds, sizeof *cpus, cmp_d);
    printf("remat cpu time: median %.2f MB/s (rounds %.2f-%.2f MB/s)\n",
           (double)n / cpus[rounds / 2] / 1e6, (double)n / cpus[rounds - 1] / 1e6,
           (double)n / cpus[0] / 1e6);
    free(secs);
    free(cpus);
    free(text);
    remat_tokenizer_free(tok);
    return 0;
}
