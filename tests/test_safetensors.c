/* tests/test_safetensors.c — issue 31 part 1: the parameter collection
 * (remat/params.h) and safetensors in and out (remat/safetensors.h): round
 * trips of every remat dtype, files written by the `safetensors` package
 * and a sharded checkpoint written by huggingface_hub
 * (tests/fixtures/safetensors, scripts/gen_safetensors_fixtures.py), and
 * every malformed file refused with a message naming the file and the
 * tensor while the parameters stay as they were. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "remat/params.h"
#include "remat/safetensors.h"
#include "support/fenced.h"
#include "support/rt.h"
#include "support/tmpdir.h"

#define FIX REMAT_FIXTURE_DIR "/safetensors"

static void setup(void) { rt_tmpdir_make("remat_st_test"); }

TestSuite(safetensors, .init = setup, .fini = rt_tmpdir_remove);

/* ---- helpers ----------------------------------------------------------------------------- */

static remat_tensor *tensor(remat_dtype dt, int nd, const int64_t *shape, double first) {
    remat_tensor *t = NULL;
    RT_OK(remat_empty(&t, nd, shape, dt, REMAT_DEVICE_CPU));
    int64_t n = remat_numel(t);
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    for (int64_t i = 0; i < n; i++)
        v[i] = first + (double)i * (dt == REMAT_I64 || dt == REMAT_U8 ? 1 : 0.25);
    remat_tensor *src = NULL;
    RT_OK(remat_from_data(&src, nd, shape, REMAT_F64, v));
    RT_OK(remat_copy_(t, src));
    remat_release(src);
    free(v);
    return t;
}

static double *values(const remat_tensor *t) {
    int64_t n = remat_numel(t);
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    RT_OK(remat_copy_to_buffer(t, REMAT_F64, v, n));
    return v;
}

/* Bitwise equal as doubles (NaNs equal to NaNs). */
static void assert_same_values(const remat_tensor *a, const remat_tensor *b, const char *what) {
    cr_assert_eq(remat_numel(a), remat_numel(b), "%s: numel", what);
    double *x = values(a), *y = values(b);
    for (int64_t i = 0; i < remat_numel(a); i++)
        cr_assert(memcmp(&x[i], &y[i], 8) == 0 || (isnan(x[i]) && isnan(y[i])),
                  "%s: element %lld: %.17g vs %.17g", what, (long long)i, x[i], y[i]);
    free(x);
    free(y);
}

/* The two parameters of the malformed-file tests: a f32 [2, 3] = 100, 100.25, ...
 * and b f32 [4] = 200, 200.25, ... */
typedef struct two {
    remat_params *p;
    remat_tensor *a, *b;
    uint64_t va, vb;
} two;

static two two_params(void) {
    two t = {0};
    int64_t sa[2] = {2, 3}, sb[1] = {4};
    t.a = tensor(REMAT_F32, 2, sa, 100);
    t.b = tensor(REMAT_F32, 1, sb, 200);
    RT_OK(remat_params_new(&t.p));
    RT_OK(remat_params_add(t.p, "a", t.a));
    RT_OK(remat_params_add(t.p, "b", t.b));
    t.va = remat_version(t.a);
    t.vb = remat_version(t.b);
    return t;
}

static void assert_untouched(const two *t) {
    double *a = values(t->a), *b = values(t->b);
    for (int i = 0; i < 6; i++) cr_assert_eq(a[i], 100 + 0.25 * i, "parameter a changed");
    for (int i = 0; i < 4; i++) cr_assert_eq(b[i], 200 + 0.25 * i, "parameter b changed");
    cr_assert_eq(remat_version(t->a), t->va, "a's version bumped");
    cr_assert_eq(remat_version(t->b), t->vb, "b's version bumped");
    free(a);
    free(b);
}

static void free_two(two *t) {
    remat_params_free(t->p);
    remat_release(t->a);
    remat_release(t->b);
}

/* A file of `hlen` as its header length field, then `header`, then `ndata`
 * bytes of f32 data 0, 1, 2, ... (cut to ndata). */
static void raw_file(const char *file, uint64_t hlen, const char *header, size_t ndata) {
    FILE *fp = fopen(file, "wb");
    cr_assert(fp);
    unsigned char len8[8];
    for (int k = 0; k < 8; k++) len8[k] = (unsigned char)(hlen >> (8 * k));
    cr_assert_eq(fwrite(len8, 1, 8, fp), 8);
    cr_assert_eq(fwrite(header, 1, strlen(header), fp), strlen(header));
    for (size_t i = 0; i < ndata; i += 4) {
        float f = (float)(i / 4);
        size_t k = ndata - i < 4 ? ndata - i : 4;
        cr_assert_eq(fwrite(&f, 1, k, fp), k);
    }
    fclose(fp);
}

static void raw(const char *file, const char *header, size_t ndata) {
    raw_file(file, strlen(header), header, ndata);
}

#define GOOD_A "\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}"
#define GOOD_B "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[24,40]}"

/* Loading `file` into the two parameters fails with `status`, the message
 * naming the file and containing each needle; the parameters stay as they
 * were. */
static void refused(const char *file, int status, const char *n1, const char *n2) {
    two t = two_params();
    RT_FAILS(remat_safetensors_load(t.p, file, NULL), status, file);
    const char *msg = remat_last_error();
    cr_assert(strstr(msg, "remat_safetensors_load") == msg, "message names the call: %s", msg);
    if (n1) cr_assert(strstr(msg, n1), "message lacks \"%s\": %s", n1, msg);
    if (n2) cr_assert(strstr(msg, n2), "message lacks \"%s\": %s", n2, msg);
    assert_untouched(&t);
    free_two(&t);
}

/* ---- the collection --------------------------------------------------------------------- */

Test(safetensors, params_keep_order_names_and_references) {
    int64_t s[1] = {3};
    int64_t live = remat_live_tensors();
    remat_params *p = NULL;
    RT_OK(remat_params_new(&p));
    const char *names[] = {"z.weight", "a.bias", "m\xc3\xa9lange", "b"};
    remat_tensor *w = tensor(REMAT_F32, 1, s, 0);
    for (int i = 0; i < 4; i++) RT_OK(remat_params_add(p, names[i], i == 3 ? w : w));
    remat_release(w); /* the collection keeps it alive */
    cr_assert_eq(remat_params_count(p), 4);
    for (int i = 0; i < 4; i++) {
        cr_assert_str_eq(remat_params_name(p, i), names[i]);
        cr_assert_eq(remat_params_find(p, names[i]), i);
        cr_assert_eq(remat_params_tensor(p, i), remat_params_get(p, names[i]));
    }
    cr_assert_eq(remat_params_numel(p), 12); /* one tensor under 4 names counts 4 times */
    cr_assert_null(remat_params_get(p, "a"));
    cr_assert_null(remat_params_name(p, 4));
    cr_assert_null(remat_params_tensor(p, -1));
    RT_FAILS(remat_params_add(p, "a.bias", remat_params_tensor(p, 0)), REMAT_EINVAL,
             "'a.bias' is already in the collection");
    RT_FAILS(remat_params_add(p, "", remat_params_tensor(p, 0)), REMAT_EINVAL, "empty");
    RT_FAILS(remat_params_add(p, "bad\xff", remat_params_tensor(p, 0)), REMAT_EINVAL, "UTF-8");
    RT_FAILS(remat_params_add(p, "x", NULL), REMAT_EINVAL, "t is NULL");
    cr_assert_eq(remat_params_count(p), 4, "a failed add adds nothing");
    /* many names: the table grows and still finds each */
    for (int i = 0; i < 500; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "layer.%d.w", i);
        RT_OK(remat_params_add(p, nm, remat_params_tensor(p, 0)));
    }
    for (int i = 0; i < 500; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "layer.%d.w", i);
        cr_assert_eq(remat_params_find(p, nm), 4 + i);
    }
    remat_params_free(p);
    remat_params_free(NULL);
    cr_assert_eq(remat_live_tensors(), live, "the collection released its references");
}

/* ---- round trips -------------------------------------------------------------------------- */

Test(safetensors, round_trip_every_dtype_with_metadata) {
    remat_dtype dts[] = {REMAT_F32, REMAT_F64, REMAT_BF16, REMAT_I64, REMAT_U8};
    const char *st[] = {"F32", "F64", "BF16", "I64", "U8"};
    const char *names[] = {"w.f32", "w.f64", "w.bf16", "ids", "mask"};
    int64_t shapes[5][3] = {{3, 5, 1}, {7, 1, 1}, {2, 3, 3}, {5, 1, 1}, {9, 1, 1}};
    int nds[] = {2, 1, 3, 1, 1};
    remat_params *p = NULL, *q = NULL;
    RT_OK(remat_params_new(&p));
    RT_OK(remat_params_new(&q));
    remat_tensor *orig[6] = {0};
    for (int i = 0; i < 5; i++) {
        orig[i] = tensor(dts[i], nds[i], shapes[i], i == 3 ? -(double)(INT64_C(1) << 40) : 1.5 + i);
        RT_OK(remat_params_add(p, names[i], orig[i]));
        remat_tensor *z = NULL;
        RT_OK(remat_zeros(&z, nds[i], shapes[i], dts[i], REMAT_DEVICE_CPU));
        RT_OK(remat_params_add(q, names[i], z));
        remat_release(z);
    }
    RT_OK(remat_scalar(&orig[5], -3.5, REMAT_F32)); /* a 0-dim tensor */
    RT_OK(remat_params_add(p, "scalar", orig[5]));
    remat_tensor *z = NULL;
    RT_OK(remat_scalar(&z, 0, REMAT_F32));
    RT_OK(remat_params_add(q, "scalar", z));
    remat_release(z);
    const char *meta[] = {"format", "pt", "quote\"d", "line\nbreak \xe2\x9c\x93"};
    RT_OK(remat_safetensors_save(rt_tmpdir_path("m.safetensors"), p, 2, meta));
    RT_OK(remat_safetensors_load(q, rt_tmpdir_path("m.safetensors"), NULL));
    for (int i = 0; i < 6; i++)
        assert_same_values(remat_params_tensor(q, i), orig[i], remat_params_name(q, i));
    /* the header: the collection's order, the dtypes' names, the metadata;
     * the data aligned to each element size */
    remat_safetensors *f = NULL;
    RT_OK(remat_safetensors_open(&f, rt_tmpdir_path("m.safetensors")));
    cr_assert_eq(remat_safetensors_count(f), 6);
    for (int i = 0; i < 5; i++) {
        const remat_safetensors_tensor *t = remat_safetensors_at(f, i);
        cr_assert_str_eq(t->name, names[i]);
        cr_assert_str_eq(t->dtype, st[i]);
        cr_assert_eq(t->begin % remat_dtype_size(dts[i]), 0, "%s unaligned", names[i]);
        cr_assert_eq(((uintptr_t)t->data) % remat_dtype_size(dts[i]), 0, "%s unaligned", names[i]);
    }
    cr_assert_eq(remat_safetensors_at(f, 5)->ndim, 0);
    cr_assert_eq(remat_safetensors_metadata_count(f), 2);
    cr_assert_str_eq(remat_safetensors_metadata(f, "quote\"d"), "line\nbreak \xe2\x9c\x93");
    const char *k = NULL, *v = NULL;
    RT_OK(remat_safetensors_metadata_at(f, 0, &k, &v));
    cr_assert_str_eq(k, "format");
    cr_assert_str_eq(v, "pt");
    cr_assert_null(remat_safetensors_metadata(f, "absent"));
    remat_safetensors_close(f);
    for (int i = 0; i < 6; i++) remat_release(orig[i]);
    remat_params_free(p);
    remat_params_free(q);
}

Test(safetensors, loads_convert_to_the_parameters_dtype) {
    int64_t s[1] = {9};
    remat_tensor *w = tensor(REMAT_F32, 1, s, -1.0 / 3.0), *w64 = NULL, *w16 = NULL;
    remat_params *p = NULL;
    RT_OK(remat_params_new(&p));
    RT_OK(remat_params_add(p, "w", w));
    RT_OK(remat_safetensors_save(rt_tmpdir_path("w.safetensors"), p, 0, NULL));
    remat_params_free(p);
    RT_OK(remat_zeros(&w64, 1, s, REMAT_F64, REMAT_DEVICE_CPU));
    RT_OK(remat_zeros(&w16, 1, s, REMAT_BF16, REMAT_DEVICE_CPU));
    remat_tensor *want64 = NULL, *want16 = NULL;
    RT_OK(remat_to_dtype(&want64, w, REMAT_F64));
    RT_OK(remat_to_dtype(&want16, w, REMAT_BF16));
    remat_tensor *targets[2] = {w64, w16}, *wants[2] = {want64, want16};
    for (int i = 0; i < 2; i++) {
        RT_OK(remat_params_new(&p));
        RT_OK(remat_params_add(p, "w", targets[i]));
        uint64_t v0 = remat_version(targets[i]);
        RT_OK(remat_safetensors_load(p, rt_tmpdir_path("w.safetensors"), NULL));
        cr_assert_gt(remat_version(targets[i]), v0, "loading is an in-place write");
        assert_same_values(targets[i], wants[i], i ? "bf16" : "f64");
        remat_params_free(p);
    }
    /* floats do not load into integers */
    remat_tensor *ids = NULL;
    RT_OK(remat_zeros(&ids, 1, s, REMAT_I64, REMAT_DEVICE_CPU));
    RT_OK(remat_params_new(&p));
    RT_OK(remat_params_add(p, "w", ids));
    RT_FAILS(remat_safetensors_load(p, rt_tmpdir_path("w.safetensors"), NULL), REMAT_EDTYPE,
             "tensor 'w' is F32, which does not load into its i64 parameter");
    remat_params_free(p);
    remat_release(ids);
    remat_release(want64);
    remat_release(want16);
    remat_release(w);
    remat_release(w64);
    remat_release(w16);
}

/* A strided parameter (a transposed view) and one requiring grad load through
 * the staging copy, in the parameter's own layout. */
Test(safetensors, loads_into_strided_parameters_and_leaves) {
    int64_t s[2] = {2, 3}, st[2] = {3, 2};
    remat_tensor *src = tensor(REMAT_F32, 2, s, 1), *base = NULL, *view = NULL, *leaf = NULL;
    remat_params *p = NULL;
    RT_OK(remat_params_new(&p));
    RT_OK(remat_params_add(p, "w", src));
    RT_OK(remat_params_add(p, "leaf", src));
    RT_OK(remat_safetensors_save(rt_tmpdir_path("w.safetensors"), p, 0, NULL));
    remat_params_free(p);
    RT_OK(remat_zeros(&base, 2, st, REMAT_F64, REMAT_DEVICE_CPU));
    RT_OK(remat_transpose(&view, base, 0, 1));
    RT_OK(remat_zeros(&leaf, 2, s, REMAT_F32, REMAT_DEVICE_CPU));
    RT_OK(remat_set_requires_grad(leaf, true));
    RT_OK(remat_params_new(&p));
    RT_OK(remat_params_add(p, "w", view));
    RT_OK(remat_params_add(p, "leaf", leaf));
    RT_OK(remat_safetensors_load(p, rt_tmpdir_path("w.safetensors"), NULL));
    assert_same_values(view, src, "strided");
    assert_same_values(leaf, src, "leaf");
    cr_assert(remat_requires_grad(leaf) && remat_is_leaf(leaf));
    double *b = values(base); /* base[j][i] = src[i][j] */
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++) cr_assert_eq(b[j * 2 + i], 1 + 0.25 * (i * 3 + j));
    free(b);
    remat_params_free(p);
    remat_release(src);
    remat_release(base);
    remat_release(view);
    remat_release(leaf);
}

/* Writing takes any strides; a tensor under two names (tied weights) is
 * written twice. */
Test(safetensors, save_strided_and_tied) {
    int64_t s[2] = {3, 2};
    remat_tensor *a = tensor(REMAT_F64, 2, s, 0), *t = NULL, *back = NULL;
    RT_OK(remat_transpose(&t, a, 0, 1));
    remat_params *p = NULL;
    RT_OK(remat_params_new(&p));
    RT_OK(remat_params_add(p, "t", t));
    RT_OK(remat_params_add(p, "tied", t));
    RT_OK(remat_safetensors_save(rt_tmpdir_path("t.safetensors"), p, 0, NULL));
    remat_safetensors *f = NULL;
    RT_OK(remat_safetensors_open(&f, rt_tmpdir_path("t.safetensors")));
    RT_OK(remat_safetensors_get(&back, f, "tied", REMAT_F64));
    cr_assert_eq(remat_size(back, 0), 2);
    assert_same_values(back, t, "transposed");
    RT_FAILS(remat_safetensors_get(&back, f, "nope", REMAT_F64), REMAT_EINVAL, "no tensor 'nope'");
    cr_assert_null(back);
    remat_safetensors_close(f);
    remat_params_free(p);
    remat_release(a);
    remat_release(t);
}

Test(safetensors, save_failures_leave_no_file) {
    two t = two_params();
    RT_FAILS(remat_safetensors_save(rt_tmpdir_path("no/such/dir/x.safetensors"), t.p, 0, NULL),
             REMAT_EIO, "no/such/dir/x.safetensors");
    remat_tensor *m = NULL;
    int64_t s[1] = {1};
    RT_OK(remat_zeros(&m, 1, s, REMAT_F32, REMAT_DEVICE_CPU));
    RT_OK(remat_params_add(t.p, "__metadata__", m));
    RT_FAILS(remat_safetensors_save(rt_tmpdir_path("x.safetensors"), t.p, 0, NULL), REMAT_EINVAL,
             "\"__metadata__\" is reserved");
    const char *meta[] = {"k", "v", "k", "w"};
    remat_params *q = NULL;
    RT_OK(remat_params_new(&q));
    RT_FAILS(remat_safetensors_save(rt_tmpdir_path("x.safetensors"), q, 2, meta), REMAT_EINVAL,
             "'k' given twice");
    cr_assert_neq(access(rt_tmpdir_path("x.safetensors"), F_OK), 0);
    cr_assert_str_eq(rt_tmpdir_list(""), "", "a temporary file was left behind");
    remat_params_free(q);
    remat_release(m);
    free_two(&t);
}

/* ---- the malformed files: each refused, naming the file and the tensor ------------------- */

Test(safetensors, good_file_loads) {
    raw(rt_tmpdir_path("good.safetensors"), "{" GOOD_A "," GOOD_B "}", 40);
    two t = two_params();
    uint64_t va = remat_version(t.a);
    RT_OK(remat_safetensors_load(t.p, rt_tmpdir_path("good.safetensors"), NULL));
    double *a = values(t.a), *b = values(t.b);
    for (int i = 0; i < 6; i++) cr_assert_eq(a[i], i);
    for (int i = 0; i < 4; i++) cr_assert_eq(b[i], 6 + i);
    cr_assert_gt(remat_version(t.a), va);
    free(a);
    free(b);
    free_two(&t);
}

Test(safetensors, refuses_short_and_truncated_files) {
    raw_file(rt_tmpdir_path("short.safetensors"), 3, "", 0);
    FILE *fp = fopen(rt_tmpdir_path("tiny.safetensors"), "wb");
    fwrite("\x05\0\0", 1, 3, fp);
    fclose(fp);
    refused(rt_tmpdir_path("tiny.safetensors"), REMAT_EFORMAT, "truncated", NULL);
    raw_file(rt_tmpdir_path("long.safetensors"), 1000, "{" GOOD_A "}", 24);
    refused(rt_tmpdir_path("long.safetensors"), REMAT_EFORMAT, "runs past the end of the file",
            NULL);
    raw(rt_tmpdir_path("cut.safetensors"), "{" GOOD_A "," GOOD_B "}", 30); /* cut in b's data */
    refused(rt_tmpdir_path("cut.safetensors"), REMAT_EFORMAT, "tensor 'b'",
            "run past the data section");
    FILE *e = fopen(rt_tmpdir_path("empty.safetensors"), "wb");
    fclose(e);
    refused(rt_tmpdir_path("empty.safetensors"), REMAT_EFORMAT, "truncated", NULL);
    refused(rt_tmpdir_path("absent.safetensors"), REMAT_EIO, "cannot open", NULL);
}

Test(safetensors, refuses_bad_json_and_utf8) {
    raw(rt_tmpdir_path("json.safetensors"), "{" GOOD_A ",\"b\":{\"dtype\":\"F32\",", 40);
    refused(rt_tmpdir_path("json.safetensors"), REMAT_EFORMAT, "not valid JSON", NULL);
    raw(rt_tmpdir_path("utf8.safetensors"),
        "{" GOOD_A ",\"b\xc0\xaf\":{\"dtype\":\"F32\",\"shape\":[4],"
        "\"data_offsets\":[24,40]}}",
        40);
    refused(rt_tmpdir_path("utf8.safetensors"), REMAT_EFORMAT, "not valid UTF-8", NULL);
    raw(rt_tmpdir_path("nul.safetensors"),
        "{" GOOD_A ",\"b\\u0000x\":{\"dtype\":\"F32\",\"shape\":[4],"
        "\"data_offsets\":[24,40]}}",
        40);
    refused(rt_tmpdir_path("nul.safetensors"), REMAT_EFORMAT, "\\u0000", NULL);
    raw(rt_tmpdir_path("ctl.safetensors"),
        "{" GOOD_A ",\"b\x01\":{\"dtype\":\"F32\",\"shape\":[4],"
        "\"data_offsets\":[24,40]}}",
        40);
    refused(rt_tmpdir_path("ctl.safetensors"), REMAT_EFORMAT, "control character", NULL);
    raw(rt_tmpdir_path("trail.safetensors"), "{" GOOD_A "," GOOD_B "}  x", 40);
    refused(rt_tmpdir_path("trail.safetensors"), REMAT_EFORMAT, "bytes after its JSON value", NULL);
    raw(rt_tmpdir_path("list.safetensors"), "[1, 2]", 40);
    refused(rt_tmpdir_path("list.safetensors"), REMAT_EFORMAT, "does not start with '{'", NULL);
    raw(rt_tmpdir_path("meta.safetensors"), "{\"__metadata__\":{\"k\":1}," GOOD_A "," GOOD_B "}",
        40);
    refused(rt_tmpdir_path("meta.safetensors"), REMAT_EFORMAT,
            "\"__metadata__\" entry 'k' is not a string", NULL);
    /* padding with spaces (as the safetensors package pads) is fine */
    raw(rt_tmpdir_path("pad.safetensors"), "{" GOOD_A "," GOOD_B "}     ", 40);
    two t = two_params();
    RT_OK(remat_safetensors_load(t.p, rt_tmpdir_path("pad.safetensors"), NULL));
    free_two(&t);
}

Test(safetensors, refuses_lying_offsets_and_shapes) {
    raw(rt_tmpdir_path("overlap.safetensors"),
        "{" GOOD_A ",\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[20,36]}}", 40);
    refused(rt_tmpdir_path("overlap.safetensors"), REMAT_EFORMAT,
            "tensor 'b': data_offsets [20, 36] overlap", "tensor 'a' [0, 24]");
    raw(rt_tmpdir_path("range.safetensors"),
        "{" GOOD_A ",\"b\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[24,56]}}", 40);
    refused(rt_tmpdir_path("range.safetensors"), REMAT_EFORMAT, "tensor 'b'",
            "run past the data section");
    raw(rt_tmpdir_path("bytes.safetensors"),
        "{" GOOD_A ",\"b\":{\"dtype\":\"F32\",\"shape\":[5],\"data_offsets\":[24,40]}}", 40);
    refused(rt_tmpdir_path("bytes.safetensors"), REMAT_EFORMAT,
            "tensor 'b': shape [5] of F32 is 20 bytes", "hold 16");
    raw(rt_tmpdir_path("huge.safetensors"),
        "{" GOOD_A ",\"b\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],"
        "\"data_offsets\":[24,40]}}",
        40);
    refused(rt_tmpdir_path("huge.safetensors"), REMAT_EFORMAT, "tensor 'b'", "is more than");
    raw(rt_tmpdir_path("hole.safetensors"),
        "{" GOOD_A ",\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[28,44]}}", 44);
    refused(rt_tmpdir_path("hole.safetensors"), REMAT_EFORMAT, "bytes [24, 28)",
            "before tensor 'b'");
    raw(rt_tmpdir_path("tail.safetensors"), "{" GOOD_A "," GOOD_B "}", 44);
    refused(rt_tmpdir_path("tail.safetensors"), REMAT_EFORMAT, "44 bytes", "end at byte 40");
    raw(rt_tmpdir_path("rev.safetensors"),
        "{" GOOD_A ",\"b\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[40,24]}}", 40);
    refused(rt_tmpdir_path("rev.safetensors"), REMAT_EFORMAT, "tensor 'b'", "begin <= end");
    raw(rt_tmpdir_path("neg.safetensors"),
        "{" GOOD_A ",\"b\":{\"dtype\":\"F32\",\"shape\":[-4],\"data_offsets\":[24,40]}}", 40);
    refused(rt_tmpdir_path("neg.safetensors"), REMAT_EFORMAT, "tensor 'b'", "is not a size");
    raw(rt_tmpdir_path("dims.safetensors"),
        "{" GOOD_A ",\"b\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,4],"
        "\"data_offsets\":[24,40]}}",
        40);
    refused(rt_tmpdir_path("dims.safetensors"), REMAT_EUNSUPPORTED, "tensor 'b' has 9 dims", NULL);
    raw(rt_tmpdir_path("dtype.safetensors"),
        "{" GOOD_A ",\"b\":{\"dtype\":\"F12\",\"shape\":[4],\"data_offsets\":[24,40]}}", 40);
    refused(rt_tmpdir_path("dtype.safetensors"), REMAT_EFORMAT, "tensor 'b': unknown dtype \"F12\"",
            NULL);
    raw(rt_tmpdir_path("nodtype.safetensors"),
        "{" GOOD_A ",\"b\":{\"shape\":[4],\"data_offsets\":[24,40]}}", 40);
    refused(rt_tmpdir_path("nodtype.safetensors"), REMAT_EFORMAT, "tensor 'b': no \"dtype\"", NULL);
    raw(rt_tmpdir_path("twice.safetensors"),
        "{" GOOD_A ",\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"shape\":[2,2],"
        "\"data_offsets\":[24,40]}}",
        40);
    refused(rt_tmpdir_path("twice.safetensors"), REMAT_EFORMAT, "tensor 'b': \"shape\" given twice",
            NULL);
}

Test(safetensors, refuses_duplicate_missing_extra_and_misshaped_tensors) {
    raw(rt_tmpdir_path("dup.safetensors"), "{" GOOD_A "," GOOD_B "," GOOD_B "}", 40);
    refused(rt_tmpdir_path("dup.safetensors"), REMAT_EFORMAT, "tensor 'b' appears twice", NULL);
    raw(rt_tmpdir_path("missing.safetensors"), "{" GOOD_A "}", 24);
    refused(rt_tmpdir_path("missing.safetensors"), REMAT_EINVAL,
            "has no tensor 'b' for its parameter", "1 missing");
    raw(rt_tmpdir_path("extra.safetensors"),
        "{" GOOD_A "," GOOD_B ",\"c\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[40,44]}}",
        44);
    refused(rt_tmpdir_path("extra.safetensors"), REMAT_EINVAL, "tensor 'c' is no parameter's",
            "1 unexpected");
    raw(rt_tmpdir_path("shape.safetensors"),
        "{" GOOD_A ",\"b\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[24,40]}}", 40);
    refused(rt_tmpdir_path("shape.safetensors"), REMAT_ESHAPE, "tensor 'b' has shape [2, 2]",
            "its parameter [4]");
    raw(rt_tmpdir_path("int.safetensors"),
        "{" GOOD_A ",\"b\":{\"dtype\":\"I32\",\"shape\":[4],\"data_offsets\":[24,40]}}", 40);
    refused(rt_tmpdir_path("int.safetensors"), REMAT_EDTYPE, "tensor 'b' is I32", "f32 parameter");
    /* what the options allow */
    two t = two_params();
    remat_load_options o = {.allow_missing = true};
    RT_OK(remat_safetensors_load(t.p, rt_tmpdir_path("missing.safetensors"), &o));
    double *b = values(t.b);
    cr_assert_eq(b[0], 200, "a missing parameter keeps its values");
    free(b);
    RT_FAILS(remat_safetensors_load(t.p, rt_tmpdir_path("extra.safetensors"), &o), REMAT_EINVAL,
             "'c'");
    o = (remat_load_options){.allow_unexpected = true};
    RT_OK(remat_safetensors_load(t.p, rt_tmpdir_path("extra.safetensors"), &o));
    free_two(&t);
}

Test(safetensors, parse_from_memory) {
    raw(rt_tmpdir_path("good.safetensors"), "{" GOOD_A "," GOOD_B "}", 40);
    FILE *fp = fopen(rt_tmpdir_path("good.safetensors"), "rb");
    unsigned char buf[512];
    size_t n = fread(buf, 1, sizeof buf, fp);
    fclose(fp);
    remat_safetensors *f = NULL;
    RT_OK(remat_safetensors_parse(&f, buf, n, "mem"));
    cr_assert_eq(remat_safetensors_count(f), 2);
    cr_assert_eq(remat_safetensors_find(f, "b")->begin, 24);
    remat_tensor *b = NULL;
    RT_OK(remat_safetensors_get(&b, f, "b", REMAT_F64));
    cr_assert_eq(rt_item_at(b, 3), 9);
    remat_release(b);
    remat_safetensors_close(f);
    RT_FAILS(remat_safetensors_parse(&f, buf, n - 1, "mem"), REMAT_EFORMAT, "mem: tensor 'b'");
    cr_assert_null(f);
    RT_FAILS(remat_safetensors_parse(&f, buf, 4, NULL), REMAT_EFORMAT, "buffer: truncated");
}

/* ---- files written by the safetensors package ---------------------------------------------- */

static remat_tensor *from_file(const char *file, const char *name, remat_dtype dt) {
    remat_safetensors *f = NULL;
    RT_OK(remat_safetensors_open(&f, file));
    remat_tensor *t = NULL;
    RT_OK(remat_safetensors_get(&t, f, name, dt));
    remat_safetensors_close(f);
    return t;
}

/* Every tensor of dtypes.safetensors into a parameter of each dtype it can
 * load into, compared with NAME.f64 (its exact values) converted by remat. */
Test(safetensors, python_written_dtypes) {
    const char *file = FIX "/dtypes.safetensors";
    remat_safetensors *f = NULL;
    RT_OK(remat_safetensors_open(&f, file));
    cr_assert_str_eq(remat_safetensors_metadata(f, "format"), "pt");
    cr_assert_str_eq(remat_safetensors_metadata(f, "note"), "h\xc3\xa9llo \xe2\x9c\x93");
    const char *fl[] = {"f32", "f16", "bf16", "f64"};
    const char *dts[] = {"F32", "F16", "BF16", "F64"};
    for (int i = 0; i < 4; i++) {
        const remat_safetensors_tensor *t = remat_safetensors_find(f, fl[i]);
        cr_assert(t, "no %s", fl[i]);
        cr_assert_str_eq(t->dtype, dts[i]);
        char ref[16];
        snprintf(ref, sizeof ref, "%s.f64", fl[i]);
        remat_tensor *exact = from_file(file, ref, REMAT_F64);
        remat_dtype into[] = {REMAT_F64, REMAT_F32, REMAT_BF16};
        for (int k = 0; k < 3; k++) {
            remat_tensor *p = NULL, *want = NULL;
            RT_OK(remat_zeros(&p, t->ndim, t->shape, into[k], REMAT_DEVICE_CPU));
            remat_params *ps = NULL;
            RT_OK(remat_params_new(&ps));
            RT_OK(remat_params_add(ps, fl[i], p));
            remat_load_options o = {.allow_unexpected = true};
            RT_OK(remat_safetensors_load(ps, file, &o));
            /* f64 -> bf16 goes through f32, as PyTorch converts */
            remat_tensor *mid = NULL;
            RT_OK(remat_to_dtype(&mid, exact, into[k] == REMAT_F64 ? REMAT_F64 : REMAT_F32));
            RT_OK(remat_to_dtype(&want, mid, into[k]));
            char what[64];
            snprintf(what, sizeof what, "%s into %s", fl[i], remat_dtype_name(into[k]));
            assert_same_values(p, want, what);
            remat_release(mid);
            remat_release(want);
            remat_release(p);
            remat_params_free(ps);
        }
        remat_release(exact);
    }
    /* the integers, into i64 (and u8 where they fit) */
    struct {
        const char *name;
        int n;
        int64_t v[8];
    } ints[] = {
        {"i64", 7, {0, 1, -1, (INT64_C(1) << 40) + 3, -(INT64_C(1) << 62), INT64_MAX, 7}},
        {"i32", 4, {INT32_MIN, INT32_MAX, 5, -6}},
        {"i16", 3, {-32768, 32767, 3}},
        {"i8", 4, {-128, 127, 0, -1}},
        {"u8", 3, {0, 255, 17}},
        {"bool", 4, {1, 0, 1, 1}},
    };
    for (int i = 0; i < 6; i++) {
        remat_tensor *t = from_file(file, ints[i].name, REMAT_I64);
        cr_assert_eq(remat_numel(t), ints[i].n);
        int64_t got[8];
        RT_OK(remat_copy_to_buffer(t, REMAT_I64, got, 8));
        for (int k = 0; k < ints[i].n; k++)
            cr_assert_eq(got[k], ints[i].v[k], "%s[%d]: %lld", ints[i].name, k, (long long)got[k]);
        remat_release(t);
        remat_tensor *u = NULL;
        if (i >= 4) {
            u = from_file(file, ints[i].name, REMAT_U8);
            cr_assert_eq(((unsigned char *)remat_data(u))[1], ints[i].v[1]);
            remat_release(u);
        } else {
            RT_FAILS(remat_safetensors_get(&u, f, ints[i].name, REMAT_U8), REMAT_EDTYPE,
                     ints[i].name);
        }
    }
    remat_tensor *sc = from_file(file, "scalar", REMAT_F32),
                 *em = from_file(file, "empty", REMAT_F32);
    cr_assert_eq(remat_ndim(sc), 0);
    cr_assert_eq(rt_item_at(sc, 0), 2.75);
    cr_assert_eq(remat_ndim(em), 2);
    cr_assert_eq(remat_numel(em), 0);
    remat_release(sc);
    remat_release(em);
    remat_safetensors_close(f);
}

/* huggingface_hub's sharded checkpoint: its index and 3+ shards load as one. */
Test(safetensors, python_written_sharded_checkpoint) {
    const char *names[] = {"embed.weight", "layers.0.w", "layers.0.b",
                           "layers.1.w",   "layers.1.b", "head.weight"};
    const char *expected = FIX "/sharded_expected.safetensors";
    remat_params *p = NULL;
    RT_OK(remat_params_new(&p));
    remat_tensor *want[6];
    for (int i = 0; i < 6; i++) {
        want[i] = from_file(expected, names[i], i == 5 ? REMAT_BF16 : REMAT_F32);
        remat_tensor *z = NULL;
        RT_OK(remat_zeros(&z, remat_ndim(want[i]), remat_shape(want[i]),
                          remat_tensor_dtype(want[i]), REMAT_DEVICE_CPU));
        RT_OK(remat_params_add(p, names[i], z));
        remat_release(z);
    }
    RT_OK(remat_safetensors_load(p, FIX "/sharded/model.safetensors.index.json", NULL));
    for (int i = 0; i < 6; i++) {
        assert_same_values(remat_params_get(p, names[i]), want[i], names[i]);
        remat_release(want[i]);
    }
    /* a missing parameter is named with the index */
    remat_tensor *z = NULL;
    int64_t one = 1;
    RT_OK(remat_zeros(&z, 1, &one, REMAT_F32, REMAT_DEVICE_CPU));
    RT_OK(remat_params_add(p, "extra.param", z));
    RT_FAILS(remat_safetensors_load(p, FIX "/sharded/model.safetensors.index.json", NULL),
             REMAT_EINVAL, "model.safetensors.index.json has no tensor 'extra.param'");
    remat_release(z);
    remat_params_free(p);
}

/* Indexes that lie about their shards. */
Test(safetensors, refuses_bad_indexes) {
    raw(rt_tmpdir_path("s1.safetensors"), "{" GOOD_A "}", 24);
    raw(rt_tmpdir_path("s2.safetensors"),
        "{\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 16);
    struct {
        const char *file, *json, *n1, *n2;
        int status;
    } cases[] = {
        {"ok.index.json", "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\"}}",
         NULL, NULL, REMAT_OK},
        {"nomap.index.json", "{\"metadata\":{}}", "no \"weight_map\"", NULL, REMAT_EFORMAT},
        {"wrong.index.json", "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s1.safetensors\"}}",
         "maps tensor 'b' to", "s1.safetensors, which has no such tensor", REMAT_EFORMAT},
        {"unlisted.index.json", "{\"weight_map\":{\"a\":\"s1.safetensors\"}}", NULL, NULL,
         REMAT_EINVAL},
        {"up.index.json", "{\"weight_map\":{\"a\":\"../s1.safetensors\",\"b\":\"s2.safetensors\"}}",
         "tensor 'a'", "not a file name", REMAT_EFORMAT},
        {"dup.index.json",
         "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\",\"a\":\"s1."
         "safetensors\"}}",
         "tensor 'a' appears twice", NULL, REMAT_EFORMAT},
        {"gone.index.json", "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s3.safetensors\"}}",
         "s3.safetensors", "cannot open", REMAT_EIO},
        {"json.index.json", "{\"weight_map\":{\"a\":", "not valid JSON", NULL, REMAT_EFORMAT},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        FILE *fp = fopen(rt_tmpdir_path(cases[i].file), "w");
        fputs(cases[i].json, fp);
        fclose(fp);
        if (cases[i].status == REMAT_OK) {
            two t = two_params();
            RT_OK(remat_safetensors_load(t.p, rt_tmpdir_path(cases[i].file), NULL));
            cr_assert_eq(rt_item_at(t.b, 3), 3);
            free_two(&t);
        } else {
            refused(rt_tmpdir_path(cases[i].file), cases[i].status, cases[i].n1, cases[i].n2);
        }
    }
    /* a shard tensor the index does not list: the index lies */
    raw(rt_tmpdir_path("s4.safetensors"),
        "{\"c\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"b\":{\"dtype\":\"F32\","
        "\"shape\":[4],\"data_offsets\":[4,20]}}",
        20);
    FILE *fp = fopen(rt_tmpdir_path("more.index.json"), "w");
    fputs("{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s4.safetensors\"}}", fp);
    fclose(fp);
    refused(rt_tmpdir_path("more.index.json"), REMAT_EFORMAT, "tensor 'c' is not in the weight_map",
            NULL);
}

/* ---- sharded checkpoints written (remat_safetensors_save_sharded) ------------------------- */

/* f32 tensors a, b, c, big, d, e, f, z of 6, 6, 2, 12, 6, 2, 2, 0 elements
 * (values 0, 0.25, ... from 10 * their rank) in a new collection, which
 * holds the only references. */
#define N_EIGHT 8
static remat_params *eight(void) {
    static const char *names[N_EIGHT] = {"a", "b", "c", "big", "d", "e", "f", "z"};
    static const int64_t sizes[N_EIGHT] = {6, 6, 2, 12, 6, 2, 2, 0};
    remat_params *p = NULL;
    RT_OK(remat_params_new(&p));
    for (int i = 0; i < N_EIGHT; i++) {
        remat_tensor *t = tensor(REMAT_F32, 1, &sizes[i], 10.0 * i);
        RT_OK(remat_params_add(p, names[i], t));
        remat_release(t);
    }
    return p;
}

/* Zeroed parameters of the same names and shapes, loaded from `path`, equal p's. */
static void loads_back(const remat_params *p, const char *path) {
    remat_params *q = NULL;
    RT_OK(remat_params_new(&q));
    for (int64_t i = 0; i < remat_params_count(p); i++) {
        remat_tensor *t = remat_params_tensor(p, i), *z = NULL;
        RT_OK(remat_zeros(&z, remat_ndim(t), remat_shape(t), remat_tensor_dtype(t),
                          REMAT_DEVICE_CPU));
        RT_OK(remat_params_add(q, remat_params_name(p, i), z));
        remat_release(z);
    }
    RT_OK(remat_safetensors_load(q, path, NULL));
    for (int64_t i = 0; i < remat_params_count(p); i++)
        assert_same_values(remat_params_tensor(q, i), remat_params_tensor(p, i),
                           remat_params_name(p, i));
    remat_params_free(q);
}

static char *slurp(const char *path) {
    FILE *fp = fopen(path, "rb");
    cr_assert(fp, "cannot open %s", path);
    static char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, fp);
    fclose(fp);
    buf[n] = '\0';
    return buf;
}

#define SHARD(k, n) "model-0000" #k "-of-0000" #n ".safetensors"

/* Under a 40-byte limit the tensors are cut as huggingface_hub 2.4's
 * split_torch_state_dict_into_shards cuts them ([a], [big], [b, c],
 * [d, e, f, z]: the tensor larger than the limit gets its shard where it
 * comes, before the one being filled), and the index is what
 * json.dumps(index, indent=2, sort_keys=True) writes (both from Python). */
Test(safetensors, sharded_save_cuts_as_huggingface_hub) {
    remat_params *p = eight();
    const char *meta[] = {"format", "pt"};
    RT_OK(remat_safetensors_save_sharded(rt_tmpdir(), NULL, p, 40, 1, meta));
    cr_assert_str_eq(rt_tmpdir_list(""), SHARD(1, 4) " " SHARD(2, 4) " " SHARD(3, 4) " " SHARD(
                                             4, 4) " model.safetensors.index.json");
    cr_assert_str_eq(slurp(rt_tmpdir_path("model.safetensors.index.json")),
                     "{\n  \"metadata\": {\n    \"total_parameters\": 36,\n    \"total_size\": "
                     "144\n  },\n  \"weight_map\": {\n"
                     "    \"a\": \"model-00001-of-00004.safetensors\",\n"
                     "    \"b\": \"model-00003-of-00004.safetensors\",\n"
                     "    \"big\": \"model-00002-of-00004.safetensors\",\n"
                     "    \"c\": \"model-00003-of-00004.safetensors\",\n"
                     "    \"d\": \"model-00004-of-00004.safetensors\",\n"
                     "    \"e\": \"model-00004-of-00004.safetensors\",\n"
                     "    \"f\": \"model-00004-of-00004.safetensors\",\n"
                     "    \"z\": \"model-00004-of-00004.safetensors\"\n  }\n}\n");
    remat_safetensors *f = NULL;
    RT_OK(remat_safetensors_open(&f, rt_tmpdir_path(SHARD(3, 4))));
    cr_assert_eq(remat_safetensors_count(f), 2);
    cr_assert_str_eq(remat_safetensors_at(f, 0)->name, "b");
    cr_assert_str_eq(remat_safetensors_at(f, 1)->name, "c");
    cr_assert_str_eq(remat_safetensors_metadata(f, "format"), "pt");
    remat_safetensors_close(f);
    loads_back(p, rt_tmpdir_path("model.safetensors.index.json"));
    remat_params_free(p);
}

/* A new save replaces what an earlier one of the same stem left: shards of
 * another count, the single file beside shards, the index and shards beside
 * a single file; other files stay. */
Test(safetensors, sharded_save_replaces_an_earlier_checkpoint) {
    remat_params *p = eight();
    cr_assert_eq(mkdir(rt_tmpdir_path("ck"), 0777), 0);
    fclose(fopen(rt_tmpdir_path("ck/tokenizer.json"), "w"));
    fclose(fopen(rt_tmpdir_path("ck/other-00001-of-00002.safetensors"), "w"));
    char ck[512];
    snprintf(ck, sizeof ck, "%s", rt_tmpdir_path("ck"));
    RT_OK(remat_safetensors_save_sharded(ck, "model", p, 40, 0, NULL));
    RT_OK(
        remat_safetensors_save_sharded(ck, "model", p, 64, 0, NULL)); /* [a b c] [big] [d e f z] */
    cr_assert_str_eq(rt_tmpdir_list("ck"),
                     SHARD(1, 3) " " SHARD(2, 3) " " SHARD(3, 3) " model.safetensors.index.json "
                                                                 "other-00001-of-00002.safetensors "
                                                                 "tokenizer.json");
    loads_back(p, rt_tmpdir_path("ck/model.safetensors.index.json"));
    RT_OK(remat_safetensors_save_sharded(ck, NULL, p, 1000, 0, NULL)); /* one file */
    cr_assert_str_eq(rt_tmpdir_list("ck"),
                     "model.safetensors other-00001-of-00002.safetensors tokenizer.json");
    loads_back(p, rt_tmpdir_path("ck/model.safetensors"));
    RT_OK(remat_safetensors_save_sharded(ck, NULL, p, 40, 0, NULL));
    cr_assert_str_eq(rt_tmpdir_list("ck"), SHARD(1, 4) " " SHARD(2, 4) " " SHARD(3, 4) " " SHARD(
                                               4, 4) " model.safetensors.index.json "
                                                     "other-00001-of-00002.safetensors "
                                                     "tokenizer.json");
    loads_back(p, rt_tmpdir_path("ck/model.safetensors.index.json"));
    remat_params_free(p);
}

/* A save that fails leaves the directory as it was (no shard renamed, no
 * temporary file); bad arguments are refused before anything is written. */
Test(safetensors, sharded_save_failures_leave_the_directory_as_it_was) {
    remat_params *p = eight();
    RT_OK(remat_safetensors_save_sharded(rt_tmpdir(), NULL, p, 40, 0, NULL));
    char before[4096];
    snprintf(before, sizeof before, "%s", rt_tmpdir_list(""));
    remat_params *q = eight(); /* the same names, other values, plus a bad one last */
    for (int64_t i = 0; i < remat_params_count(q); i++)
        RT_OK(remat_mul_scalar_(remat_params_tensor(q, i), 2));
    remat_tensor *m = NULL;
    int64_t one = 1;
    RT_OK(remat_zeros(&m, 1, &one, REMAT_F32, REMAT_DEVICE_CPU));
    RT_OK(remat_params_add(q, "__metadata__", m));
    RT_FAILS(remat_safetensors_save_sharded(rt_tmpdir(), NULL, q, 40, 0, NULL), REMAT_EINVAL,
             "\"__metadata__\" is reserved");
    cr_assert_str_eq(rt_tmpdir_list(""), before);
    RT_FAILS(remat_safetensors_save_sharded(rt_tmpdir(), NULL, q, 0, 0, NULL), REMAT_EINVAL,
             "max_shard_bytes must be positive");
    RT_FAILS(remat_safetensors_save_sharded(rt_tmpdir(), "a/b", q, 40, 0, NULL), REMAT_EINVAL,
             "plain file name");
    RT_FAILS(remat_safetensors_save_sharded(rt_tmpdir_path("none"), NULL, q, 40, 0, NULL),
             REMAT_EIO, "is not a directory");
    cr_assert_str_eq(rt_tmpdir_list(""), before);
    remat_params_free(q);
    remat_release(m);
    loads_back(p, rt_tmpdir_path("model.safetensors.index.json")); /* the first save's values */
    remat_params_free(p);
}

/* ---- parameters on a device the host cannot address ------------------------------------- */

/* Loading writes parameters on "fenced" (tests/support/fenced.h: memory
 * that faults on any host access outside kernels and copies, as a GPU's):
 * contiguous ones by a copy to the device, a strided view through a staging
 * tensor on the device, converted from the file's dtype; saving reads them
 * back. The values are the cpu load's. */
Test(safetensors, loads_and_saves_on_a_device_the_host_cannot_address) {
    remat_device fd = {rt_fenced_type(), 0};
    cr_assert_geq(fd.type, 0);
    int64_t s23[2] = {2, 3}, s32[2] = {3, 2}, s4[1] = {4};
    remat_tensor *w = tensor(REMAT_F32, 2, s23, 1), *t = tensor(REMAT_F32, 2, s32, 5),
                 *b = tensor(REMAT_F64, 1, s4, -2);
    remat_params *src = NULL;
    RT_OK(remat_params_new(&src));
    RT_OK(remat_params_add(src, "w", w));
    RT_OK(remat_params_add(src, "t", t));
    RT_OK(remat_params_add(src, "b", b));
    RT_OK(remat_safetensors_save(rt_tmpdir_path("s.safetensors"), src, 0, NULL));
    remat_tensor *dw = NULL, *base = NULL, *view = NULL, *db = NULL;
    RT_OK(remat_zeros(&dw, 2, s23, REMAT_F32, fd));
    RT_OK(remat_zeros(&base, 2, s23, REMAT_F32, fd));
    RT_OK(remat_transpose(&view, base, 0, 1)); /* [3, 2], strided */
    RT_OK(remat_zeros(&db, 1, s4, REMAT_BF16, fd));
    remat_params *p = NULL;
    RT_OK(remat_params_new(&p));
    RT_OK(remat_params_add(p, "w", dw));
    RT_OK(remat_params_add(p, "t", view));
    RT_OK(remat_params_add(p, "b", db));
    uint64_t v0 = remat_version(dw);
    RT_OK(remat_safetensors_load(p, rt_tmpdir_path("s.safetensors"), NULL));
    cr_assert_gt(remat_version(dw), v0);
    assert_same_values(dw, w, "contiguous f32 on the device");
    assert_same_values(view, t, "strided f32 on the device");
    assert_same_values(db, b, "F64 -> bf16 on the device (exact values)");
    RT_OK(remat_safetensors_save(rt_tmpdir_path("back.safetensors"), p, 0, NULL));
    loads_back(src, rt_tmpdir_path("back.safetensors"));
    remat_params_free(p);
    remat_params_free(src);
    remat_release(w);
    remat_release(t);
    remat_release(b);
    remat_release(dw);
    remat_release(base);
    remat_release(view);
    remat_release(db);
}
