/* tests/fuzz/fuzz_safetensors.c — libFuzzer target for the safetensors
 * parser (remat/safetensors.h), built by `make fuzz` (clang,
 * -fsanitize=fuzzer,address,undefined). The input is taken as a file
 * image; when it parses, every tensor's bytes are read and every tensor
 * converted to each remat dtype it loads into (what a load does with it).
 * So that mutations of the JSON reach the checks behind the header length,
 * a second parse runs on a copy whose length field is made to cover the
 * whole header. Seeds: tests/fuzz/corpus/safetensors. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "remat/remat.h"
#include "remat/safetensors.h"

static void parse(const uint8_t *data, size_t size) {
    remat_safetensors *f = NULL;
    if (remat_safetensors_parse(&f, data, size, "fuzz") != REMAT_OK) return;
    volatile unsigned sum = 0;
    const remat_dtype dts[] = {REMAT_F32, REMAT_F64, REMAT_BF16, REMAT_I64, REMAT_U8};
    for (int64_t i = 0; i < remat_safetensors_count(f); i++) {
        const remat_safetensors_tensor *t = remat_safetensors_at(f, i);
        /* the bytes lie inside the buffer */
        if (t->end > t->begin) sum += ((const unsigned char *)t->data)[t->end - t->begin - 1];
        sum += (unsigned)strlen(t->name) + (unsigned)t->ndim;
        if (remat_safetensors_find(f, t->name) != t) abort();
        for (int k = 0; k < 5; k++) {
            remat_tensor *x = NULL;
            if (remat_safetensors_get(&x, f, t->name, dts[k]) == REMAT_OK)
                sum += (unsigned)remat_numel(x);
            remat_release(x);
        }
    }
    for (int64_t i = 0; i < remat_safetensors_metadata_count(f); i++) {
        const char *k = NULL, *v = NULL;
        if (remat_safetensors_metadata_at(f, i, &k, &v) == REMAT_OK)
            sum += (unsigned)strlen(k) + (unsigned)strlen(v);
    }
    (void)sum;
    remat_safetensors_close(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    parse(data, size);
    if (size < 9) return 0;
    /* the header length made to end at the first '}' that closes the
     * top-level object, so that mutations of the JSON are checked as JSON */
    uint8_t *fixed = malloc(size);
    if (!fixed) return 0;
    memcpy(fixed, data, size);
    size_t depth = 0, end = 0;
    for (size_t i = 8; i < size && !end; i++) {
        if (fixed[i] == '{') depth++;
        else if (fixed[i] == '}' && depth && --depth == 0) end = i + 1;
    }
    if (end) {
        uint64_t hlen = end - 8;
        for (int k = 0; k < 8; k++) fixed[k] = (uint8_t)(hlen >> (8 * k));
        parse(fixed, size);
    }
    free(fixed);
    return 0;
}
