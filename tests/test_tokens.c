/* tests/test_tokens.c — issue 31 item 5: llm.c .bin token shards
 * (remat/tokens.h): written and read back in both versions, a file laid
 * out as llm.c writes it, malformed headers refused naming the file, the
 * loader's windows in order and shuffled, each rank's share disjoint. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "remat/tokens.h"
#include "support/rt.h"
#include "support/tmpdir.h"

static void setup(void) { rt_tmpdir_make("remat_tokens"); }
TestSuite(tokens, .init = setup, .fini = rt_tmpdir_remove);

/* a file of raw bytes: header ints, then count tokens of width bytes */
static void write_raw(const char *p, int32_t magic, int32_t version, int32_t count, int width,
                      int n_tokens) {
    FILE *f = fopen(p, "wb");
    cr_assert(f);
    int32_t h[256] = {magic, version, count};
    cr_assert(fwrite(h, 4, 256, f) == 256);
    for (int i = 0; i < n_tokens; i++) {
        uint32_t v = (uint32_t)(i * 7 + 1);
        cr_assert(fwrite(&v, (size_t)width, 1, f) == 1); /* little-endian host */
    }
    fclose(f);
}

Test(tokens, write_and_read_both_versions) {
    uint32_t small[1000], big[300];
    for (int i = 0; i < 1000; i++) small[i] = (uint32_t)(i * 65) & 0xFFFF;
    for (int i = 0; i < 300; i++) big[i] = 65536u + (uint32_t)i * 1000u;
    RT_OK(remat_token_shard_write(rt_tmpdir_path("a.bin"), small, 1000));
    RT_OK(remat_token_shard_write(rt_tmpdir_path("b.bin"), big, 300));
    FILE *f = fopen(rt_tmpdir_path("a.bin"), "rb");
    int32_t h[256];
    cr_assert(fread(h, 4, 256, f) == 256);
    fseek(f, 0, SEEK_END);
    cr_assert_eq(ftell(f), 1024 + 2 * 1000, "version 1: uint16 tokens");
    fclose(f);
    cr_assert(h[0] == 20240520 && h[1] == 1 && h[2] == 1000 && h[3] == 0 && h[255] == 0);
    f = fopen(rt_tmpdir_path("b.bin"), "rb");
    cr_assert(fread(h, 4, 256, f) == 256);
    fseek(f, 0, SEEK_END);
    cr_assert_eq(ftell(f), 1024 + 4 * 300, "version 2: uint32 tokens");
    fclose(f);
    cr_assert(h[1] == 2 && h[2] == 300);
    const char *both[] = {rt_tmpdir_path("a.bin"), rt_tmpdir_path("b.bin")};
    remat_token_data *d;
    RT_OK(remat_token_data_open(both, 2, &d));
    cr_assert_eq(remat_token_data_count(d), 1300);
    cr_assert_eq(remat_token_data_shards(d), 2);
    cr_assert_eq(remat_token_data_shard_count(d, 1), 300);
    uint32_t out[1300];
    RT_OK(remat_token_data_read(d, 0, 1300, out));
    cr_assert(!memcmp(out, small, sizeof small) && !memcmp(out + 1000, big, sizeof big));
    RT_OK(remat_token_data_read(d, 990, 20, out)); /* across the two files */
    cr_assert(out[0] == small[990] && out[9] == small[999] && out[10] == big[0] &&
              out[19] == big[9]);
    RT_FAILS(remat_token_data_read(d, 1290, 11, out), REMAT_EINVAL, "1300");
    remat_token_data_free(d);
    remat_token_data_free(NULL);
}

/* llm.c's own layout (its write_datafile: an int32 header, then uint16 tokens) reads as it is. */
Test(tokens, reads_llm_c_files) {
    write_raw(rt_tmpdir_path("llmc.bin"), 20240520, 1, 500, 2, 500);
    const char *p[] = {rt_tmpdir_path("llmc.bin")};
    remat_token_data *d;
    RT_OK(remat_token_data_open(p, 1, &d));
    uint32_t out[500];
    RT_OK(remat_token_data_read(d, 0, 500, out));
    for (int i = 0; i < 500; i++) cr_assert_eq(out[i], (uint32_t)(i * 7 + 1) & 0xFFFF);
    remat_token_data_free(d);
}

Test(tokens, malformed_files_name_the_file) {
    remat_token_data *d = (remat_token_data *)1;
    const char *p[1];
    p[0] = rt_tmpdir_path("missing.bin");
    RT_FAILS(remat_token_data_open(p, 1, &d), REMAT_EIO, p[0]);
    cr_assert_null(d);
    FILE *f = fopen(rt_tmpdir_path("short.bin"), "wb");
    fputs("tiny", f);
    fclose(f);
    p[0] = rt_tmpdir_path("short.bin");
    RT_FAILS(remat_token_data_open(p, 1, &d), REMAT_EFORMAT,
             "short.bin: 4 bytes, shorter than the 1024-byte header");
    write_raw(rt_tmpdir_path("magic.bin"), 12345, 1, 10, 2, 10);
    p[0] = rt_tmpdir_path("magic.bin");
    RT_FAILS(remat_token_data_open(p, 1, &d), REMAT_EFORMAT, "magic.bin: magic 12345");
    write_raw(rt_tmpdir_path("version.bin"), 20240520, 3, 10, 2, 10);
    p[0] = rt_tmpdir_path("version.bin");
    RT_FAILS(remat_token_data_open(p, 1, &d), REMAT_EFORMAT, "version.bin: version 3");
    write_raw(rt_tmpdir_path("count.bin"), 20240520, 1, 100, 2, 90); /* cut short */
    p[0] = rt_tmpdir_path("count.bin");
    RT_FAILS(remat_token_data_open(p, 1, &d), REMAT_EFORMAT,
             "count.bin: the header says 100 tokens");
    write_raw(rt_tmpdir_path("width.bin"), 20240520, 2, 10, 2,
              10); /* uint32 promised, uint16 written */
    p[0] = rt_tmpdir_path("width.bin");
    RT_FAILS(remat_token_data_open(p, 1, &d), REMAT_EFORMAT, "width.bin");
    /* a bad file among good ones: nothing stays open */
    write_raw(rt_tmpdir_path("good.bin"), 20240520, 1, 10, 2, 10);
    const char *two[] = {rt_tmpdir_path("good.bin"), rt_tmpdir_path("count.bin")};
    RT_FAILS(remat_token_data_open(two, 2, &d), REMAT_EFORMAT, "count.bin");
    cr_assert_null(d);
}

/* shards of 1000 and 455 tokens holding 0, 1, 2, ... */
static remat_token_data *numbered(void) {
    uint32_t v[1455];
    for (uint32_t i = 0; i < 1455; i++) v[i] = i;
    RT_OK(remat_token_shard_write(rt_tmpdir_path("s0.bin"), v, 1000));
    RT_OK(remat_token_shard_write(rt_tmpdir_path("s1.bin"), v + 1000, 455));
    const char *p[] = {rt_tmpdir_path("s0.bin"), rt_tmpdir_path("s1.bin")};
    remat_token_data *d;
    RT_OK(remat_token_data_open(p, 2, &d));
    return d;
}

Test(tokens, windows_in_order_split_over_ranks) {
    remat_token_data *d = numbered();
    remat_token_loader_options o;
    remat_token_loader_options_init(&o, 100);
    remat_token_loader *l;
    RT_OK(remat_token_loader_create(d, &o, &l));
    /* 999/100 = 9 windows in the first file, 454/100 = 4 in the second */
    cr_assert_eq(remat_token_loader_windows(l), 13);
    uint32_t w[101];
    for (int k = 0; k < 13; k++) {
        RT_OK(remat_token_loader_next(l, w));
        uint32_t start = k < 9 ? 100u * (uint32_t)k : 1000u + 100u * (uint32_t)(k - 9);
        for (int t = 0; t <= 100; t++) cr_assert_eq(w[t], start + (uint32_t)t, "window %d", k);
    }
    RT_OK(remat_token_loader_next(l, w)); /* the next epoch starts over */
    cr_assert_eq(w[0], 0);
    remat_token_loader_free(l);
    /* three ranks: entries r, r + 3, ...; 13 / 3 = 4 each, the 13th left out */
    bool seen[13] = {0};
    for (int r = 0; r < 3; r++) {
        o.rank = r;
        o.world = 3;
        RT_OK(remat_token_loader_create(d, &o, &l));
        cr_assert_eq(remat_token_loader_windows(l), 4);
        for (int k = 0; k < 4; k++) {
            size_t s;
            uint64_t off;
            remat_token_loader_locate(l, (uint64_t)k, &s, &off);
            int idx = s == 0 ? (int)(off / 100) : 9 + (int)(off / 100);
            cr_assert_eq(idx, k * 3 + r);
            cr_assert(!seen[idx]);
            seen[idx] = true;
        }
        remat_token_loader_free(l);
    }
    o.rank = 3;
    RT_FAILS(remat_token_loader_create(d, &o, &l), REMAT_EINVAL, "rank 3 of world 3");
    remat_token_loader_options_init(&o, 2000);
    RT_FAILS(remat_token_loader_create(d, &o, &l), REMAT_EINVAL, "0 windows of 2001 tokens");
    remat_token_data_free(d);
}

Test(tokens, shuffled_windows_cover_each_once_per_epoch) {
    remat_token_data *d = numbered();
    remat_token_loader_options o;
    remat_token_loader_options_init(&o, 10); /* 99 + 45 = 144 windows */
    o.shuffle = true;
    o.seed = 42;
    o.world = 2;
    int count[144] = {0};
    uint32_t order[2][2][72];
    for (int r = 0; r < 2; r++) {
        o.rank = r;
        remat_token_loader *l;
        RT_OK(remat_token_loader_create(d, &o, &l));
        cr_assert_eq(remat_token_loader_windows(l), 72);
        uint32_t w[11];
        for (int e = 0; e < 2; e++)
            for (int k = 0; k < 72; k++) {
                RT_OK(remat_token_loader_next(l, w));
                for (int t = 0; t <= 10; t++)
                    cr_assert_eq(w[t], w[0] + (uint32_t)t, "a window is contiguous");
                cr_assert(w[0] % 10 == 0 && (w[0] < 990 || (w[0] >= 1000 && w[0] + 10 < 1455)));
                order[r][e][k] = w[0];
                if (e == 0) count[w[0] < 1000 ? w[0] / 10 : 99 + (w[0] - 1000) / 10]++;
            }
        /* seeking back replays the same windows */
        remat_token_loader_seek(l, 5);
        RT_OK(remat_token_loader_next(l, w));
        cr_assert_eq(w[0], order[r][0][5]);
        cr_assert_eq(remat_token_loader_tell(l), 6);
        int64_t x[3 * 10], y[3 * 10];
        remat_token_loader_seek(l, 0);
        RT_OK(remat_token_loader_batch(l, 3, x, y));
        for (int i = 0; i < 3; i++)
            for (int t = 0; t < 10; t++) {
                cr_assert_eq(x[i * 10 + t], (int64_t)order[r][0][i] + t);
                cr_assert_eq(y[i * 10 + t], (int64_t)order[r][0][i] + t + 1);
            }
        remat_token_loader_free(l);
    }
    for (int i = 0; i < 144; i++)
        cr_assert_eq(count[i], 1, "window %d read %d times in an epoch", i, count[i]);
    cr_assert(memcmp(order[0][0], order[0][1], sizeof order[0][0]), "each epoch has its own order");
    int in_order = 0;
    for (int k = 1; k < 72; k++) in_order += order[0][0][k] > order[0][0][k - 1];
    cr_assert(in_order < 60, "the order is shuffled (%d of 71 steps ascending)", in_order);
    remat_token_data_free(d);
}
