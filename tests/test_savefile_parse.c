/* tests/test_savefile_parse.c — issue 14 item 7: the save-file parser as a
 * library call on a buffer (remat/savefile.h): a well-formed image parses;
 * every malformed one is REMAT_EFORMAT naming the check, and a header
 * claiming more records than the buffer can hold allocates nothing. */
#include <stdlib.h>
#include <string.h>

#include "remat/savefile.h"
#include "support/rt.h"

typedef struct img {
    unsigned char b[4096];
    size_t n;
} img;

static void put32(img *m, uint32_t v) {
    for (int k = 0; k < 4; k++) m->b[m->n++] = (unsigned char)(v >> (8 * k));
}
static void put64(img *m, uint64_t v) {
    put32(m, (uint32_t)v);
    put32(m, (uint32_t)(v >> 32));
}

/* An image of format `version` with one f32 [2, 3] tensor "w" (size and
 * CRC right once sealed); version 2 records a cosine schedule. */
static void build_version(img *m, uint32_t n_tensors, uint32_t version) {
    const uint32_t hbytes =
        version == 1 ? REMAT_SAVEFILE_HEADER_BYTES_V1 : REMAT_SAVEFILE_HEADER_BYTES;
    memset(m, 0, sizeof *m);
    memcpy(m->b, REMAT_SAVEFILE_MAGIC, 8);
    m->n = 8;
    put32(m, version);
    put32(m, hbytes);
    put64(m, 0);
    size_t h = m->n;
    put32(m, 1); /* model */
    put32(m, 2); /* layers */
    put32(m, 8);
    put32(m, 1);
    put32(m, 1);
    put32(m, 0);
    put32(m, 0);
    put32(m, 0);
    put32(m, 4);
    put32(m, n_tensors);
    if (version >= 2) { /* schedule, accum, warmup, min_lr, clip */
        m->n = h + 160;
        put32(m, 1);
        put32(m, 3);
        put64(m, 7);
        double d[2] = {1e-4, 0.5};
        for (int i = 0; i < 2; i++) {
            memcpy(m->b + m->n, &d[i], 8);
            m->n += 8;
        }
    }
    m->n = h + hbytes;
    put32(m, 1);
    m->b[m->n++] = 'w';
    put32(m, REMAT_F32);
    put32(m, 2);
    put64(m, 2);
    put64(m, 3);
    put64(m, 24);
    for (int i = 0; i < 6; i++) {
        float f = (float)i;
        memcpy(m->b + m->n, &f, 4);
        m->n += 4;
    }
    put32(m, 0);
}

static void build(img *m, uint32_t n_tensors) {
    build_version(m, n_tensors, REMAT_SAVEFILE_VERSION);
}

static void seal(img *m) {
    for (int k = 0; k < 8; k++) m->b[16 + k] = (unsigned char)((uint64_t)m->n >> (8 * k));
    uint32_t c = remat_crc32(m->b, m->n - 4);
    for (int k = 0; k < 4; k++) m->b[m->n - 4 + k] = (unsigned char)(c >> (8 * k));
}

Test(savefile_parse, well_formed_image) {
    img m;
    build(&m, 1);
    seal(&m);
    remat_savefile_header h;
    remat_saved_record *r = NULL;
    RT_OK(remat_savefile_parse(m.b, m.n, &h, &r));
    cr_assert_eq(h.layers, 2);
    cr_assert_eq(h.n_tensors, 1);
    cr_assert_eq(r[0].name_len, 1);
    cr_assert_eq(r[0].name[0], 'w');
    cr_assert_eq(r[0].shape[1], 3);
    float f;
    memcpy(&f, r[0].data + 20, 4);
    cr_assert_eq(f, 5.0f);
    free(r);
    RT_OK(remat_savefile_parse_header(m.b, REMAT_SAVEFILE_PREFIX_BYTES, m.n, &h));
    cr_assert_eq(h.batch, 4);
}

/* Version 2 adds the schedule; version-1 files (written before it) still
 * parse, as a constant schedule that says it was not recorded. */
Test(savefile_parse, both_versions_parse) {
    img m;
    remat_savefile_header h;
    remat_saved_record *r = NULL;
    build_version(&m, 1, 2);
    seal(&m);
    RT_OK(remat_savefile_parse(m.b, m.n, &h, &r));
    cr_assert(h.version == 2 && h.has_schedule && h.schedule == 1 && h.accum == 3 && h.warmup == 7);
    cr_assert(h.min_lr == 1e-4 && h.clip == 0.5);
    cr_assert_eq(r[0].shape[1], 3);
    free(r);
    build_version(&m, 1, 1);
    seal(&m);
    RT_OK(remat_savefile_parse(m.b, m.n, &h, &r));
    cr_assert(h.version == 1 && !h.has_schedule && h.schedule == 0 && h.accum == 1 &&
              h.warmup == 0 && h.clip == 0 && h.layers == 2);
    cr_assert(r[0].name[0] == 'w' && r[0].shape[1] == 3);
    free(r);
    build_version(&m, 1, 3);
    seal(&m);
    RT_FAILS(remat_savefile_parse(m.b, m.n, &h, &r), REMAT_EFORMAT, "version 3");
    build_version(&m, 1, 1); /* version 1 with version 2's header size */
    m.b[12] = (unsigned char)REMAT_SAVEFILE_HEADER_BYTES;
    seal(&m);
    RT_FAILS(remat_savefile_parse(m.b, m.n, &h, &r), REMAT_EFORMAT, "header size");
    build_version(&m, 1, 2); /* accum 0 */
    m.b[REMAT_SAVEFILE_PREAMBLE_BYTES + 164] = 0;
    seal(&m);
    RT_FAILS(remat_savefile_parse(m.b, m.n, &h, &r), REMAT_EFORMAT, "accum 0");
}

Test(savefile_parse, malformed_images_are_eformat) {
    img m;
    remat_savefile_header h;
    remat_saved_record *r = (remat_saved_record *)0x1;
    build(&m, 1);
    seal(&m);
    RT_FAILS(remat_savefile_parse(m.b, m.n - 1, &h, &r), REMAT_EFORMAT, "truncated");
    cr_assert_null(r);
    m.b[40] ^= 1;
    RT_FAILS(remat_savefile_parse(m.b, m.n, &h, &r), REMAT_EFORMAT, "checksum");
    build(&m, 2); /* a record missing */
    seal(&m);
    RT_FAILS(remat_savefile_parse(m.b, m.n, &h, &r), REMAT_EFORMAT, "corrupt tensor record 1");
    build(&m, 1);
    m.b[REMAT_SAVEFILE_PREFIX_BYTES + 5 + 8 + 8] = 0xff; /* dim 1 huge */
    seal(&m);
    RT_FAILS(remat_savefile_parse(m.b, m.n, &h, &r), REMAT_EFORMAT, "record 0");
    build(&m, 1);
    m.b[REMAT_SAVEFILE_PREFIX_BYTES + 5] = 9; /* unknown dtype */
    seal(&m);
    RT_FAILS(remat_savefile_parse(m.b, m.n, &h, &r), REMAT_EFORMAT, "data size");
    build(&m, 900000); /* more records than the bytes can hold: refused before allocating */
    seal(&m);
    RT_FAILS(remat_savefile_parse(m.b, m.n, &h, &r), REMAT_EFORMAT, "cannot fit");
    memcpy(m.b, "NOTASAVE", 8);
    RT_FAILS(remat_savefile_parse(m.b, m.n, &h, &r), REMAT_EFORMAT, "not a remat save file");
    RT_FAILS(remat_savefile_parse(m.b, 3, &h, &r), REMAT_EFORMAT, "not a remat save file");
    RT_FAILS(remat_savefile_parse(NULL, 3, &h, &r), REMAT_EINVAL, NULL);
}
