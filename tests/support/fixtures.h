/*
 * tests/support/fixtures.h — loader for the PyTorch golden fixtures.
 *
 * The fixtures (tests/fixtures/<case>.txt, listed in tests/fixtures/index.txt)
 * are written by scripts/gen_fixtures.py; docs/fixtures.md describes the
 * format. This loader is deliberately strict: every malformed line makes
 * fx_load fail with "<path>:<line>: <what is wrong>" in err, so a broken or
 * truncated fixture can never pass as an empty one.
 *
 * The directory is the compile definition REMAT_FIXTURE_DIR (CMakeLists.txt
 * sets it for the test support library).
 */
#ifndef REMAT_TEST_FIXTURES_H
#define REMAT_TEST_FIXTURES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "remat/remat.h"

#ifndef REMAT_FIXTURE_DIR
#error "REMAT_FIXTURE_DIR must be defined (CMakeLists.txt sets it for remat_test_support)"
#endif

#define FX_NAME_MAX 64
#define FX_MAX_PARAM_TOKENS 16
#define FX_TOKEN_MAX 48

/* What a tensor line is. */
typedef enum fx_kind { FX_INPUT = 0, FX_OUTPUT = 1, FX_GRAD_OUTPUT = 2, FX_GRAD = 3 } fx_kind;

/* One tensor line: "<kind> <name> <dtype> <ndim> <shape>... <data>", data
 * being one of
 *   <values>...                   all numel values, row-major;
 *   @uniform SEED LO HI           (input, grad_output) generated: see fx_splitmix64;
 *   @randint SEED LO HI           (i64 input) generated;
 *   @sample STRIDE <values>...    (output, grad) the values at flat indices
 *                                 0, STRIDE, 2*STRIDE, ... < numel.
 * values holds n_values doubles (exact for f32 and for the i64 values
 * fixtures use): numel of them unless sampled. */
typedef struct fx_tensor {
    fx_kind kind;
    char name[FX_NAME_MAX];
    remat_dtype dtype;
    int ndim;
    int64_t shape[REMAT_MAX_DIMS];
    int64_t numel;
    int64_t stride;   /* 1, or the @sample stride */
    int64_t n_values; /* entries in values */
    double *values;
    int line; /* line number in the file, for messages */
} fx_tensor;

/* "view <input> <kind> <int>...": applied in file order to the stored input. */
typedef struct fx_view {
    char input[FX_NAME_MAX];
    char kind[16]; /* transpose | permute | slice | expand */
    int nargs;
    int64_t args[REMAT_MAX_DIMS + 1];
    int line;
} fx_view;

/* "param <name> <token>...": zero or more tokens. */
typedef struct fx_param {
    char name[FX_NAME_MAX];
    int n;
    char tok[FX_MAX_PARAM_TOKENS][FX_TOKEN_MAX];
    int line;
} fx_param;

typedef struct fx_case {
    char path[512];
    char name[FX_NAME_MAX];
    char op[FX_NAME_MAX];
    remat_dtype dtype; /* the case's float dtype */
    int n_tensors;
    fx_tensor *tensors;
    int n_views;
    fx_view *views;
    int n_params;
    fx_param *params;
} fx_case;

/* The splitmix64 stream behind @uniform/@randint (scripts/gen_fixtures.py
 * has the same function): state += 0x9E3779B97F4A7C15, then the usual
 * splitmix64 finaliser. @uniform value i = LO + (HI-LO) * ((z_i >> 11) * 2^-53)
 * (HI-LO must be a power of two so that every compiler gets the same
 * double), converted to the dtype; @randint value i = LO + (z_i >> 11) % (HI-LO). */
uint64_t fx_splitmix64(uint64_t *state);

/* Loads REMAT_FIXTURE_DIR/<name>.txt and checks that its `case` line names
 * <name>. NULL on any failure, with the reason in err. */
fx_case *fx_load(const char *name, char *err, size_t err_len);
/* Loads a fixture from an explicit path. */
fx_case *fx_load_file(const char *path, char *err, size_t err_len);
/* Parses fixture text; origin names it in messages. */
fx_case *fx_parse(const char *text, const char *origin, char *err, size_t err_len);
void fx_free(fx_case *c);

/* Tensor line of `kind` named `name`, or NULL. */
const fx_tensor *fx_get(const fx_case *c, fx_kind kind, const char *name);
/* Number of tensor lines of `kind`, and the i-th of them (file order). */
int fx_count(const fx_case *c, fx_kind kind);
const fx_tensor *fx_nth(const fx_case *c, fx_kind kind, int i);

/* Parameters. Each getter returns false and writes the reason into err if
 * the parameter is missing or malformed. */
const fx_param *fx_param_get(const fx_case *c, const char *name);
bool fx_param_int(const fx_case *c, const char *name, int64_t *v, char *err, size_t err_len);
bool fx_param_double(const fx_case *c, const char *name, double *v, char *err, size_t err_len);
/* A list of integers (possibly empty); *n gets the count (at most max). */
bool fx_param_ints(const fx_case *c, const char *name, int64_t *v, int max, int *n, char *err,
                   size_t err_len);
/* A single word. */
const char *fx_param_str(const fx_case *c, const char *name);

/* A new contiguous cpu tensor holding t's values (requires_grad off). */
int fx_make_tensor(const fx_tensor *t, remat_tensor **out);
/* Applies the views of input `name` to base, in order, through the public
 * view ops (so they are differentiated through); *out gets a new reference
 * (base itself, retained, when there are none). */
int fx_apply_views(const fx_case *c, const char *name, remat_tensor *base, remat_tensor **out);

/* Compares got against the expected tensor: same dtype and shape, and
 * |got - exp| <= atol + rtol * |exp| elementwise (i64: exactly equal).
 * Returns the number of mismatching elements (a dtype or shape mismatch
 * counts as all of them, at least 1) and describes the worst ones in msg
 * (index, got, expected, difference, tolerance). */
int64_t fx_compare(const remat_tensor *got, const fx_tensor *exp, double atol, double rtol,
                   char *msg, size_t msg_len);
/* True if every expected (stored or sampled) value is 0 (a NULL remat
 * gradient then matches). */
bool fx_all_zero(const fx_tensor *t);

/* ---- the index (tests/fixtures/index.txt: "<case> <op> <dtype>" lines) ---- */
typedef struct fx_index_entry {
    char name[FX_NAME_MAX];
    char op[FX_NAME_MAX];
    remat_dtype dtype;
} fx_index_entry;
/* Loads the index; *entries is malloc'd (free it). false + err on failure. */
bool fx_index_load(fx_index_entry **entries, int *n, char *err, size_t err_len);

const char *fx_kind_name(fx_kind kind);

#endif
