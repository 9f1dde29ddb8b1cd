/* tests/fuzz/fuzz_savefile.c — libFuzzer target for the save-file parser
 * (remat/savefile.h), built by `make fuzz` (clang,
 * -fsanitize=fuzzer,address,undefined). The input is taken as a file
 * image; so that mutations reach the tensor records instead of stopping at
 * the size and checksum checks, a second parse runs on a copy whose size
 * field and CRC-32 are made right. Seeds: tests/fuzz/corpus/savefile. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "remat/remat.h"
#include "remat/savefile.h"

static void parse(const uint8_t *data, size_t size) {
    remat_savefile_header h;
    remat_saved_record *recs = NULL;
    if (remat_savefile_parse(data, size, &h, &recs) == REMAT_OK) {
        /* touch every record's bytes: they must lie inside the buffer */
        volatile unsigned sum = 0;
        for (uint32_t i = 0; i < h.n_tensors; i++) {
            sum += (unsigned char)recs[i].name[recs[i].name_len - 1];
            if (recs[i].nbytes) sum += recs[i].data[recs[i].nbytes - 1];
        }
        (void)sum;
    }
    free(recs);
    (void)remat_savefile_parse_header(data, size, size, &h);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    parse(data, size);
    if (size < REMAT_SAVEFILE_PREFIX_BYTES + 4) return 0;
    uint8_t *fixed = malloc(size);
    if (!fixed) return 0;
    memcpy(fixed, data, size);
    for (int k = 0; k < 8; k++) fixed[16 + k] = (uint8_t)((uint64_t)size >> (8 * k));
    uint32_t crc = remat_crc32(fixed, size - 4);
    for (int k = 0; k < 4; k++) fixed[size - 4 + k] = (uint8_t)(crc >> (8 * k));
    parse(fixed, size);
    free(fixed);
    return 0;
}
