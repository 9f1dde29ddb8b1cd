/* examples/safetensors_copy.c — reads a safetensors file into remat
 * tensors and writes them back with remat (remat/safetensors.h):
 *
 *     example_safetensors_copy IN.safetensors OUT.safetensors
 *
 * Each tensor becomes the remat dtype nearest its own (F16 → f32, BOOL →
 * u8, smaller integers → i64); the metadata is kept.
 * scripts/gen_safetensors_fixtures.py runs it to check that the `safetensors`
 * package reads what remat writes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <remat/remat.h>

static remat_dtype nearest(const char *st) {
    if (!strcmp(st, "F64")) return REMAT_F64;
    if (!strcmp(st, "BF16")) return REMAT_BF16;
    if (!strcmp(st, "F32") || !strcmp(st, "F16")) return REMAT_F32;
    if (!strcmp(st, "U8") || !strcmp(st, "BOOL")) return REMAT_U8;
    return REMAT_I64;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s IN.safetensors OUT.safetensors\n", argv[0]);
        return 2;
    }
    remat_safetensors *f = NULL;
    remat_params *p = NULL;
    const char **meta = NULL;
    int rc = remat_safetensors_open(&f, argv[1]);
    if (!rc) rc = remat_params_new(&p);
    for (int64_t i = 0; !rc && i < remat_safetensors_count(f); i++) {
        const remat_safetensors_tensor *t = remat_safetensors_at(f, i);
        remat_tensor *x = NULL;
        rc = remat_safetensors_get(&x, f, t->name, nearest(t->dtype));
        if (!rc) rc = remat_params_add(p, t->name, x); /* the collection keeps its own reference */
        remat_release(x);
    }
    int64_t nm = remat_safetensors_metadata_count(f);
    if (!rc && nm) {
        meta = calloc((size_t)(2 * nm), sizeof *meta);
        if (!meta) rc = REMAT_ENOMEM;
        for (int64_t i = 0; !rc && i < nm; i++)
            rc = remat_safetensors_metadata_at(f, i, &meta[2 * i], &meta[2 * i + 1]);
    }
    if (!rc) rc = remat_safetensors_save(argv[2], p, (int)nm, meta);
    if (rc) fprintf(stderr, "%s: %s\n", remat_status_name(rc), remat_last_error());
    free(meta);
    remat_params_free(p);
    remat_safetensors_close(f);
    return rc ? 1 : 0;
}
