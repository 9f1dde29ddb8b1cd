/* src/io/savefile_parse.c — parser of the save-file format (remat/savefile.h,
 * docs/file-format.md). Reads only from the buffer it is given; every
 * offset is checked against the buffer's end before it is used. */
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "core/core.h"
#include "remat/savefile.h"

uint32_t remat_crc32(const void *data, size_t n) {
    return (uint32_t)crc32_z(crc32_z(0L, Z_NULL, 0), data, n);
}

static uint32_t get_u32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get_u64(const unsigned char *p) {
    return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}
static double get_f64(const unsigned char *p) {
    uint64_t v = get_u64(p);
    double d;
    memcpy(&d, &v, 8);
    return d;
}

remat_status remat_savefile_parse_header(const void *prefix, size_t n, uint64_t file_size,
                                         remat_savefile_header *out) {
    if (!prefix || !out)
        return rm_err(REMAT_EINVAL, "remat_savefile_parse_header: prefix and out must not be NULL");
    uint64_t need =
        file_size < REMAT_SAVEFILE_PREFIX_BYTES ? file_size : REMAT_SAVEFILE_PREFIX_BYTES;
    if (n < need)
        return rm_err(REMAT_EINVAL, "remat_savefile_parse_header: %zu bytes given, %llu needed", n,
                      (unsigned long long)need);
    const unsigned char *p = prefix;
    if (file_size < 8 || memcmp(p, REMAT_SAVEFILE_MAGIC, 8) != 0)
        return rm_err(REMAT_EFORMAT, "not a remat save file (bad magic; expected \"%s\")",
                      REMAT_SAVEFILE_MAGIC);
    if (file_size < REMAT_SAVEFILE_PREAMBLE_BYTES)
        return rm_err(REMAT_EFORMAT, "truncated file (%llu bytes, the preamble alone is %u)",
                      (unsigned long long)file_size, REMAT_SAVEFILE_PREAMBLE_BYTES);
    uint32_t version = get_u32(p + 8), hbytes = get_u32(p + 12);
    uint64_t fbytes = get_u64(p + 16);
    if (version < 1 || version > REMAT_SAVEFILE_VERSION)
        return rm_err(REMAT_EFORMAT,
                      "unsupported format version %u (this remat reads versions "
                      "1 to %u)",
                      version, REMAT_SAVEFILE_VERSION);
    const uint32_t want_hbytes =
        version == 1 ? REMAT_SAVEFILE_HEADER_BYTES_V1 : REMAT_SAVEFILE_HEADER_BYTES;
    if (fbytes > file_size)
        return rm_err(REMAT_EFORMAT, "truncated file: %llu bytes of the %llu it should have",
                      (unsigned long long)file_size, (unsigned long long)fbytes);
    if (fbytes < file_size)
        return rm_err(REMAT_EFORMAT, "%llu bytes of unexpected data after the end of the file",
                      (unsigned long long)(file_size - fbytes));
    if (hbytes != want_hbytes || file_size < REMAT_SAVEFILE_PREAMBLE_BYTES + hbytes + 4)
        return rm_err(REMAT_EFORMAT, "corrupt header (header size %u)", hbytes);
    const unsigned char *h = p + REMAT_SAVEFILE_PREAMBLE_BYTES;
    remat_savefile_header r;
    r.model = get_u32(h + 0);
    r.layers = get_u32(h + 4);
    r.width = get_u32(h + 8);
    r.heads = get_u32(h + 12);
    r.context = get_u32(h + 16);
    r.vocab = get_u32(h + 20);
    r.untied = get_u32(h + 24);
    r.optim = get_u32(h + 28);
    r.batch = get_u32(h + 32);
    r.n_tensors = get_u32(h + 36);
    r.lr = get_f64(h + 40);
    r.weight_decay = get_f64(h + 48);
    r.momentum = get_f64(h + 56);
    r.beta1 = get_f64(h + 64);
    r.beta2 = get_f64(h + 72);
    r.eps = get_f64(h + 80);
    r.seed = get_u64(h + 88);
    r.step = (int64_t)get_u64(h + 96);
    r.optim_t = (int64_t)get_u64(h + 104);
    memcpy(r.rng, h + 112, 32);
    r.task = get_u32(h + 144);
    r.data_crc = get_u32(h + 148);
    r.data_bytes = get_u64(h + 152);
    r.version = version;
    r.has_schedule = version >= 2;
    r.schedule = r.has_schedule ? get_u32(h + 160) : 0;
    r.accum = r.has_schedule ? get_u32(h + 164) : 1;
    r.warmup = r.has_schedule ? get_u64(h + 168) : 0;
    r.min_lr = r.has_schedule ? get_f64(h + 176) : 0;
    r.clip = r.has_schedule ? get_f64(h + 184) : 0;
    if (r.schedule > 1 || r.accum == 0)
        return rm_err(REMAT_EFORMAT, "corrupt header (schedule %u, accum %u)", r.schedule, r.accum);
    if (r.n_tensors > REMAT_SAVEFILE_MAX_TENSORS)
        return rm_err(REMAT_EFORMAT, "corrupt header (%u tensors)", r.n_tensors);
    *out = r;
    return REMAT_OK;
}

remat_status remat_savefile_parse(const void *buf, size_t n, remat_savefile_header *hdr,
                                  remat_saved_record **records) {
    if (records) *records = NULL;
    if (!buf || !hdr || !records)
        return rm_err(REMAT_EINVAL, "remat_savefile_parse: buf, hdr and records must not be NULL");
    int rc = remat_savefile_parse_header(buf, n, n, hdr);
    if (rc) return rc;
    const unsigned char *p = buf;
    uint32_t crc = get_u32(p + n - 4), want = remat_crc32(p, n - 4);
    if (crc != want)
        return rm_err(REMAT_EFORMAT,
                      "corrupt file: checksum mismatch (stored CRC-32 %08x, "
                      "computed %08x)",
                      crc, want);
    uint32_t count = hdr->n_tensors;
    size_t off = REMAT_SAVEFILE_PREAMBLE_BYTES + get_u32(p + 12), end = n - 4;
    /* every record takes at least 21 bytes: no allocation beyond what the file can hold */
    if ((uint64_t)count * 21u > end - off)
        return rm_err(REMAT_EFORMAT, "corrupt header (%u tensors cannot fit in %zu bytes)", count,
                      n);
    remat_saved_record *recs = count ? calloc(count, sizeof *recs) : NULL;
    if (count && !recs) return rm_err(REMAT_ENOMEM, "out of memory for %u tensor records", count);
    for (uint32_t i = 0; i < count; i++) {
        remat_saved_record *t = &recs[i];
        if (end - off < 4) {
            free(recs);
            return rm_err(REMAT_EFORMAT, "corrupt tensor record %u", i);
        }
        t->name_len = get_u32(p + off);
        off += 4;
        if (t->name_len == 0 || t->name_len > REMAT_SAVEFILE_MAX_NAME ||
            end - off < t->name_len + 8u) {
            free(recs);
            return rm_err(REMAT_EFORMAT, "corrupt tensor record %u (name)", i);
        }
        t->name = (const char *)(p + off);
        off += t->name_len;
        t->dtype = get_u32(p + off);
        t->ndim = get_u32(p + off + 4);
        off += 8;
        if (t->ndim > REMAT_MAX_DIMS || end - off < 8u * t->ndim + 8u) {
            free(recs);
            return rm_err(REMAT_EFORMAT, "corrupt tensor record %u (shape)", i);
        }
        uint64_t numel = 1;
        bool over = false;
        for (uint32_t d = 0; d < t->ndim; d++) {
            t->shape[d] = (int64_t)get_u64(p + off);
            off += 8;
            if (t->shape[d] < 0 || t->shape[d] > (INT64_C(1) << 40)) {
                free(recs);
                return rm_err(REMAT_EFORMAT, "corrupt tensor record %u (shape)", i);
            }
            if (t->shape[d] && numel > UINT64_MAX / (uint64_t)t->shape[d]) over = true;
            else numel *= (uint64_t)t->shape[d];
        }
        t->nbytes = get_u64(p + off);
        off += 8;
        size_t es = t->dtype <= REMAT_BF16 ? remat_dtype_size((remat_dtype)t->dtype) : 0;
        if (!es || over || numel > UINT64_MAX / es || t->nbytes != numel * es ||
            t->nbytes > end - off) {
            free(recs);
            return rm_err(REMAT_EFORMAT, "corrupt tensor record %u (data size)", i);
        }
        t->data = p + off;
        off += (size_t)t->nbytes;
    }
    if (off != end) {
        free(recs);
        return rm_err(REMAT_EFORMAT, "corrupt file (%zu stray bytes)", end - off);
    }
    *records = recs;
    return REMAT_OK;
}
