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

/* A version-1 image with one f32 [2, 3] tensor "w", size and CRC right. */
static void build(img *m, uint32_t n_tensors) {
    memset(m, 0, sizeof *m);
    memcpy(m->b, REMAT_SAVEFILE_MAGIC, 8);
    m->n = 8;
    put32(m, REMAT_SAVEFILE_VERSION);
    put32(m, REMAT_SAVEFILE_HEADER_BYTES);
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
    m->n = h + REMAT_SAVEFILE_HEADER_BYTES;
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
