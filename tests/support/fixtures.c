/* tests/support/fixtures.c — strict parser for the golden fixtures (see fixtures.h). */
#include "fixtures.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Largest tensor a fixture may hold: fixtures are small by design, and the
 * cap turns a corrupt shape into a message instead of a huge allocation. */
#define FX_MAX_NUMEL (1 << 20)

static void seterr(char *err, size_t n, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static void seterr(char *err, size_t n, const char *fmt, ...) {
    if (!err || n == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
}

const char *fx_kind_name(fx_kind kind) {
    switch (kind) {
    case FX_INPUT: return "input";
    case FX_OUTPUT: return "output";
    case FX_GRAD_OUTPUT: return "grad_output";
    case FX_GRAD: return "grad";
    }
    return "?";
}

static bool parse_dtype(const char *s, remat_dtype *dt) {
    if (strcmp(s, "f32") == 0) *dt = REMAT_F32;
    else if (strcmp(s, "f64") == 0) *dt = REMAT_F64;
    else if (strcmp(s, "i64") == 0) *dt = REMAT_I64;
    else return false;
    return true;
}

static bool parse_i64(const char *s, int64_t *v) {
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (end == s || *end != '\0' || errno == ERANGE) return false;
    *v = (int64_t)x;
    return true;
}

/* f32 values go through strtof so that a %.9g decimal lands on exactly the
 * float PyTorch printed (strtod + cast could double-round). */
static bool parse_value(const char *s, remat_dtype dt, double *v) {
    char *end;
    errno = 0;
    if (dt == REMAT_I64) {
        int64_t x;
        if (!parse_i64(s, &x)) return false;
        *v = (double)x;
        return true;
    }
    if (dt == REMAT_F32) {
        float f = strtof(s, &end);
        if (end == s || *end != '\0') return false;
        *v = (double)f;
        return true;
    }
    double d = strtod(s, &end);
    if (end == s || *end != '\0') return false;
    *v = d;
    return true;
}

/* ---- tokenizer: splits one line (modified in place) on blanks ---- */
static int split(char *line, char **tok, int max) {
    int n = 0;
    char *p = line;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n') p++;
        if (!*p) break;
        if (n == max) return -1;
        tok[n++] = p;
        while (*p && *p != ' ' && *p != '\t' && *p != '\r' && *p != '\n') p++;
        if (*p) *p++ = '\0';
    }
    return n;
}

static bool push(void **arr, int *n, size_t elem) {
    void *p = realloc(*arr, elem * (size_t)(*n + 1));
    if (!p) return false;
    memset((char *)p + elem * (size_t)*n, 0, elem);
    *arr = p;
    (*n)++;
    return true;
}

void fx_free(fx_case *c) {
    if (!c) return;
    for (int i = 0; i < c->n_tensors; i++) free(c->tensors[i].values);
    free(c->tensors);
    free(c->views);
    free(c->params);
    free(c);
}

const fx_tensor *fx_get(const fx_case *c, fx_kind kind, const char *name) {
    for (int i = 0; i < c->n_tensors; i++)
        if (c->tensors[i].kind == kind && strcmp(c->tensors[i].name, name) == 0)
            return &c->tensors[i];
    return NULL;
}

int fx_count(const fx_case *c, fx_kind kind) {
    int n = 0;
    for (int i = 0; i < c->n_tensors; i++) n += c->tensors[i].kind == kind;
    return n;
}

const fx_tensor *fx_nth(const fx_case *c, fx_kind kind, int k) {
    for (int i = 0; i < c->n_tensors; i++)
        if (c->tensors[i].kind == kind && k-- == 0) return &c->tensors[i];
    return NULL;
}

static bool same_shape(const fx_tensor *a, const fx_tensor *b) {
    if (a->ndim != b->ndim) return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return false;
    return true;
}

static void shape_str(int ndim, const int64_t *shape, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < ndim && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

uint64_t fx_splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* "@uniform SEED LO HI" / "@randint SEED LO HI": the values are generated
 * here exactly as scripts/gen_fixtures.py generated them. */
static bool parse_generated(fx_tensor *t, char **data, int nv, bool uniform, const char *key,
                            const char *where, char *err, size_t n) {
    if (t->kind != FX_INPUT && t->kind != FX_GRAD_OUTPUT) {
        seterr(err, n, "%s: %s %s: %s is only for input and grad_output lines", where, key, t->name,
               data[0]);
        return false;
    }
    if (uniform == (t->dtype == REMAT_I64)) {
        seterr(err, n, "%s: %s %s: %s does not fit dtype %s", where, key, t->name, data[0],
               remat_dtype_name(t->dtype));
        return false;
    }
    char *end;
    errno = 0;
    unsigned long long seed = nv == 4 ? strtoull(data[1], &end, 10) : 0;
    if (nv != 4 || end == data[1] || *end || errno == ERANGE || data[1][0] == '-') {
        seterr(err, n, "%s: %s %s: expected '%s SEED LO HI'", where, key, t->name, data[0]);
        return false;
    }
    double lo = 0, hi = 0;
    int64_t ilo = 0, ihi = 0;
    bool ok = uniform ? parse_value(data[2], REMAT_F64, &lo) && parse_value(data[3], REMAT_F64, &hi)
                      : parse_i64(data[2], &ilo) && parse_i64(data[3], &ihi);
    int e2 = 0;
    /* the product (HI-LO)*u must be exact: HI-LO a power of two */
    if (ok && uniform) ok = hi > lo && frexp(hi - lo, &e2) == 0.5;
    if (ok && !uniform) ok = ihi > ilo;
    if (!ok) {
        seterr(err, n, "%s: %s %s: bad range '%s %s' (%s)", where, key, t->name, data[2], data[3],
               uniform ? "HI-LO must be a positive power of two" : "need LO < HI");
        return false;
    }
    t->n_values = t->numel;
    t->values = malloc(sizeof(double) * (size_t)(t->numel ? t->numel : 1));
    if (!t->values) {
        seterr(err, n, "%s: out of memory", where);
        return false;
    }
    uint64_t state = seed;
    for (int64_t i = 0; i < t->numel; i++) {
        uint64_t z = fx_splitmix64(&state);
        if (uniform) {
            double v = lo + (hi - lo) * ((double)(z >> 11) * 0x1.0p-53);
            /* f32 inputs are the f64 values rounded, as torch's .to(float32) */
            t->values[i] = t->dtype == REMAT_F32 ? (double)(float)v : v;
        } else {
            t->values[i] = (double)(ilo + (int64_t)((z >> 11) % (uint64_t)(ihi - ilo)));
        }
    }
    return true;
}

/* Parses "<kind> <name> <dtype> <ndim> <shape>... <values>..." (tok[0] is
 * the kind keyword). */
static bool parse_tensor(fx_tensor *t, char **tok, int ntok, const char *where, char *err,
                         size_t n) {
    if (ntok < 4) {
        seterr(err, n, "%s: '%s' needs <name> <dtype> <ndim> <shape...> <values...>", where,
               tok[0]);
        return false;
    }
    if (strlen(tok[1]) >= FX_NAME_MAX) {
        seterr(err, n, "%s: name '%s' too long", where, tok[1]);
        return false;
    }
    strcpy(t->name, tok[1]);
    if (!parse_dtype(tok[2], &t->dtype)) {
        seterr(err, n, "%s: %s %s: bad dtype '%s' (f32, f64 or i64)", where, tok[0], tok[1],
               tok[2]);
        return false;
    }
    int64_t nd;
    if (!parse_i64(tok[3], &nd) || nd < 0 || nd > REMAT_MAX_DIMS) {
        seterr(err, n, "%s: %s %s: bad ndim '%s' (0..%d)", where, tok[0], tok[1], tok[3],
               REMAT_MAX_DIMS);
        return false;
    }
    t->ndim = (int)nd;
    if (ntok < 4 + t->ndim) {
        seterr(err, n, "%s: %s %s: ndim %d but only %d shape entries", where, tok[0], tok[1],
               t->ndim, ntok - 4);
        return false;
    }
    t->numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (!parse_i64(tok[4 + d], &t->shape[d]) || t->shape[d] < 0 || t->shape[d] > FX_MAX_NUMEL) {
            seterr(err, n, "%s: %s %s: bad size '%s' of dim %d", where, tok[0], tok[1], tok[4 + d],
                   d);
            return false;
        }
        t->numel *= t->shape[d];
        if (t->numel > FX_MAX_NUMEL) {
            seterr(err, n, "%s: %s %s: more than %d elements", where, tok[0], tok[1], FX_MAX_NUMEL);
            return false;
        }
    }
    int nv = ntok - 4 - t->ndim;
    char **data = tok + 4 + t->ndim;
    t->stride = 1;
    if (nv > 0 && data[0][0] == '@') {
        bool gen_u = strcmp(data[0], "@uniform") == 0, gen_i = strcmp(data[0], "@randint") == 0;
        if (gen_u || gen_i) return parse_generated(t, data, nv, gen_u, tok[0], where, err, n);
        if (strcmp(data[0], "@sample") != 0) {
            seterr(err, n, "%s: %s %s: unknown data form '%s' (@uniform, @randint, @sample)", where,
                   tok[0], tok[1], data[0]);
            return false;
        }
        if (t->kind != FX_OUTPUT && t->kind != FX_GRAD) {
            seterr(err, n, "%s: %s %s: @sample is only for output and grad lines", where, tok[0],
                   tok[1]);
            return false;
        }
        if (nv < 2 || !parse_i64(data[1], &t->stride) || t->stride < 1) {
            seterr(err, n, "%s: %s %s: expected '@sample STRIDE <values>...' with STRIDE >= 1",
                   where, tok[0], tok[1]);
            return false;
        }
        data += 2;
        nv -= 2;
    }
    t->n_values = t->numel ? (t->numel + t->stride - 1) / t->stride : 0;
    if (nv != t->n_values) {
        char sh[128];
        shape_str(t->ndim, t->shape, sh, sizeof sh);
        if (t->stride > 1)
            seterr(err, n, "%s: %s %s: shape %s sampled every %lld needs %lld values, found %d%s",
                   where, tok[0], tok[1], sh, (long long)t->stride, (long long)t->n_values, nv,
                   nv < t->n_values ? " (truncated line?)" : "");
        else
            seterr(err, n, "%s: %s %s: shape %s needs %lld values, found %d%s", where, tok[0],
                   tok[1], sh, (long long)t->numel, nv, nv < t->numel ? " (truncated line?)" : "");
        return false;
    }
    t->values = malloc(sizeof(double) * (size_t)(t->n_values ? t->n_values : 1));
    if (!t->values) {
        seterr(err, n, "%s: out of memory", where);
        return false;
    }
    for (int64_t i = 0; i < t->n_values; i++) {
        const char *s = data[i];
        if (!parse_value(s, t->dtype, &t->values[i])) {
            seterr(err, n, "%s: %s %s: value %lld '%s' is not a valid %s", where, tok[0], tok[1],
                   (long long)i, s, remat_dtype_name(t->dtype));
            return false;
        }
    }
    return true;
}

fx_case *fx_parse(const char *text, const char *origin, char *err, size_t n) {
    if (err && n) err[0] = '\0';
    if (!origin) origin = "<fixture>";
    fx_case *c = calloc(1, sizeof *c);
    char *buf = strdup(text ? text : "");
    /* A line of L characters has at most L/2 + 1 tokens. */
    int max_tok = (int)(strlen(text ? text : "") / 2 + 2);
    char **tok = malloc(sizeof(char *) * (size_t)max_tok);
    if (!c || !buf || !tok) {
        seterr(err, n, "%s: out of memory", origin);
        goto fail;
    }
    snprintf(c->path, sizeof c->path, "%s", origin);
    c->dtype = (remat_dtype)-1;
    bool have_case = false, have_op = false, have_dtype = false, ended = false;
    int lineno = 0;
    char *p = buf;
    while (*p) {
        char *line = p;
        char *nl = strchr(p, '\n');
        if (nl) {
            *nl = '\0';
            p = nl + 1;
        } else {
            p += strlen(p);
        }
        lineno++;
        char where[600];
        snprintf(where, sizeof where, "%s:%d", origin, lineno);
        int ntok = split(line, tok, max_tok);
        if (ntok < 0) {
            seterr(err, n, "%s: too many tokens on one line", where);
            goto fail;
        }
        if (ntok == 0 || tok[0][0] == '#') continue;
        if (ended) {
            seterr(err, n, "%s: '%s' after 'end'", where, tok[0]);
            goto fail;
        }
        const char *key = tok[0];
        if (strcmp(key, "case") == 0 || strcmp(key, "op") == 0) {
            bool is_case = key[0] == 'c';
            if (ntok != 2 || strlen(tok[1]) >= FX_NAME_MAX) {
                seterr(err, n, "%s: expected '%s <name>'", where, key);
                goto fail;
            }
            if (is_case ? have_case : have_op) {
                seterr(err, n, "%s: second '%s' line", where, key);
                goto fail;
            }
            strcpy(is_case ? c->name : c->op, tok[1]);
            if (is_case) have_case = true;
            else have_op = true;
        } else if (strcmp(key, "dtype") == 0) {
            if (ntok != 2 || !parse_dtype(tok[1], &c->dtype) || c->dtype == REMAT_I64) {
                seterr(err, n, "%s: expected 'dtype f32' or 'dtype f64'", where);
                goto fail;
            }
            if (have_dtype) {
                seterr(err, n, "%s: second 'dtype' line", where);
                goto fail;
            }
            have_dtype = true;
        } else if (strcmp(key, "param") == 0) {
            if (ntok < 2 || ntok - 2 > FX_MAX_PARAM_TOKENS || strlen(tok[1]) >= FX_NAME_MAX) {
                seterr(err, n, "%s: expected 'param <name> <value>...' (at most %d values)", where,
                       FX_MAX_PARAM_TOKENS);
                goto fail;
            }
            if (fx_param_get(c, tok[1])) {
                seterr(err, n, "%s: param '%s' given twice", where, tok[1]);
                goto fail;
            }
            if (!push((void **)&c->params, &c->n_params, sizeof(fx_param))) {
                seterr(err, n, "%s: out of memory", where);
                goto fail;
            }
            fx_param *pr = &c->params[c->n_params - 1];
            strcpy(pr->name, tok[1]);
            pr->line = lineno;
            pr->n = ntok - 2;
            for (int i = 0; i < pr->n; i++) {
                if (strlen(tok[2 + i]) >= FX_TOKEN_MAX) {
                    seterr(err, n, "%s: param %s: token '%s' too long", where, tok[1], tok[2 + i]);
                    goto fail;
                }
                strcpy(pr->tok[i], tok[2 + i]);
            }
        } else if (strcmp(key, "view") == 0) {
            if (ntok < 3 || ntok - 3 > REMAT_MAX_DIMS + 1 || strlen(tok[1]) >= FX_NAME_MAX) {
                seterr(err, n, "%s: expected 'view <input> <kind> <int>...'", where);
                goto fail;
            }
            if (!fx_get(c, FX_INPUT, tok[1])) {
                seterr(err, n, "%s: view of '%s', which is not an input defined above", where,
                       tok[1]);
                goto fail;
            }
            static const struct {
                const char *kind;
                int min, max;
            } kinds[] = {{"transpose", 2, 2},
                         {"permute", 1, REMAT_MAX_DIMS},
                         {"slice", 4, 4},
                         {"expand", 0, REMAT_MAX_DIMS}};
            int k = -1;
            for (int i = 0; i < 4; i++)
                if (strcmp(tok[2], kinds[i].kind) == 0) k = i;
            if (k < 0) {
                seterr(err, n, "%s: unknown view kind '%s' (transpose, permute, slice, expand)",
                       where, tok[2]);
                goto fail;
            }
            if (ntok - 3 < kinds[k].min || ntok - 3 > kinds[k].max) {
                seterr(err, n, "%s: view %s takes %d..%d integers, found %d", where, tok[2],
                       kinds[k].min, kinds[k].max, ntok - 3);
                goto fail;
            }
            if (!push((void **)&c->views, &c->n_views, sizeof(fx_view))) {
                seterr(err, n, "%s: out of memory", where);
                goto fail;
            }
            fx_view *v = &c->views[c->n_views - 1];
            strcpy(v->input, tok[1]);
            strcpy(v->kind, tok[2]);
            v->line = lineno;
            v->nargs = ntok - 3;
            for (int i = 0; i < v->nargs; i++)
                if (!parse_i64(tok[3 + i], &v->args[i])) {
                    seterr(err, n, "%s: view %s: '%s' is not an integer", where, tok[2],
                           tok[3 + i]);
                    goto fail;
                }
        } else if (strcmp(key, "input") == 0 || strcmp(key, "output") == 0 ||
                   strcmp(key, "grad_output") == 0 || strcmp(key, "grad") == 0) {
            fx_kind kind = key[0] == 'i'              ? FX_INPUT
                           : key[0] == 'o'            ? FX_OUTPUT
                           : strcmp(key, "grad") == 0 ? FX_GRAD
                                                      : FX_GRAD_OUTPUT;
            fx_tensor t;
            memset(&t, 0, sizeof t);
            t.kind = kind;
            t.line = lineno;
            if (!parse_tensor(&t, tok, ntok, where, err, n)) {
                free(t.values);
                goto fail;
            }
            if (fx_get(c, kind, t.name)) {
                seterr(err, n, "%s: second '%s %s' line", where, key, t.name);
                free(t.values);
                goto fail;
            }
            /* Cross-checks: a gradient belongs to something declared above
             * and has its shape and dtype. */
            const fx_tensor *ref = NULL;
            if (kind == FX_GRAD || kind == FX_GRAD_OUTPUT) {
                ref = fx_get(c, kind == FX_GRAD ? FX_INPUT : FX_OUTPUT, t.name);
                if (!ref) {
                    seterr(err, n, "%s: %s of '%s', which is not an %s defined above", where, key,
                           t.name, kind == FX_GRAD ? "input" : "output");
                    free(t.values);
                    goto fail;
                }
                if (ref->dtype == REMAT_I64 || t.dtype != ref->dtype || !same_shape(&t, ref)) {
                    char s1[128], s2[128];
                    shape_str(t.ndim, t.shape, s1, sizeof s1);
                    shape_str(ref->ndim, ref->shape, s2, sizeof s2);
                    seterr(err, n, "%s: %s %s is %s %s but the %s is %s %s", where, key, t.name, s1,
                           remat_dtype_name(t.dtype), fx_kind_name(ref->kind), s2,
                           remat_dtype_name(ref->dtype));
                    free(t.values);
                    goto fail;
                }
            }
            if (!push((void **)&c->tensors, &c->n_tensors, sizeof(fx_tensor))) {
                seterr(err, n, "%s: out of memory", where);
                free(t.values);
                goto fail;
            }
            c->tensors[c->n_tensors - 1] = t;
        } else if (strcmp(key, "end") == 0) {
            if (ntok != 1) {
                seterr(err, n, "%s: 'end' takes nothing", where);
                goto fail;
            }
            ended = true;
        } else {
            seterr(err, n,
                   "%s: unknown line '%s' (expected case, op, dtype, param, input, view, output, "
                   "grad_output, grad, end or # comment)",
                   where, key);
            goto fail;
        }
    }
    if (!have_case || !have_op || !have_dtype) {
        seterr(err, n, "%s: missing '%s' line", origin,
               !have_case ? "case"
               : !have_op ? "op"
                          : "dtype");
        goto fail;
    }
    if (!ended) {
        seterr(err, n, "%s: no 'end' line (truncated file?)", origin);
        goto fail;
    }
    if (fx_count(c, FX_OUTPUT) == 0) {
        seterr(err, n, "%s: no 'output' line", origin);
        goto fail;
    }
    free(buf);
    free(tok);
    return c;
fail:
    free(buf);
    free(tok);
    fx_free(c);
    return NULL;
}

fx_case *fx_load_file(const char *path, char *err, size_t n) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        seterr(err, n, "%s: cannot open fixture: %s (regenerate with `make fixtures`)", path,
               strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, len = 0;
    char *text = malloc(cap);
    for (;;) {
        if (!text) break;
        if (len + 1 >= cap) {
            char *t2 = realloc(text, cap * 2);
            if (!t2) {
                free(text);
                text = NULL;
                break;
            }
            text = t2;
            cap *= 2;
        }
        size_t got = fread(text + len, 1, cap - 1 - len, f);
        len += got;
        if (got == 0) break;
    }
    bool read_error = ferror(f);
    fclose(f);
    if (!text || read_error) {
        seterr(err, n, "%s: %s", path, text ? "read error" : "out of memory");
        free(text);
        return NULL;
    }
    text[len] = '\0';
    if (strlen(text) != len) {
        seterr(err, n, "%s: contains a NUL byte (not a fixture text file)", path);
        free(text);
        return NULL;
    }
    fx_case *c = fx_parse(text, path, err, n);
    free(text);
    return c;
}

fx_case *fx_load(const char *name, char *err, size_t n) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s.txt", REMAT_FIXTURE_DIR, name);
    fx_case *c = fx_load_file(path, err, n);
    if (c && strcmp(c->name, name) != 0) {
        seterr(err, n, "%s: 'case %s' does not match the file name", path, c->name);
        fx_free(c);
        return NULL;
    }
    return c;
}

/* ---- params ---- */
const fx_param *fx_param_get(const fx_case *c, const char *name) {
    for (int i = 0; i < c->n_params; i++)
        if (strcmp(c->params[i].name, name) == 0) return &c->params[i];
    return NULL;
}

static const fx_param *param_n(const fx_case *c, const char *name, int want, char *err, size_t n) {
    const fx_param *p = fx_param_get(c, name);
    if (!p) {
        seterr(err, n, "%s: op %s needs 'param %s'", c->path, c->op, name);
        return NULL;
    }
    if (want >= 0 && p->n != want) {
        seterr(err, n, "%s:%d: param %s: expected %d value(s), found %d", c->path, p->line, name,
               want, p->n);
        return NULL;
    }
    return p;
}

bool fx_param_int(const fx_case *c, const char *name, int64_t *v, char *err, size_t n) {
    const fx_param *p = param_n(c, name, 1, err, n);
    if (!p) return false;
    if (!parse_i64(p->tok[0], v)) {
        seterr(err, n, "%s:%d: param %s: '%s' is not an integer", c->path, p->line, name,
               p->tok[0]);
        return false;
    }
    return true;
}

bool fx_param_double(const fx_case *c, const char *name, double *v, char *err, size_t n) {
    const fx_param *p = param_n(c, name, 1, err, n);
    if (!p) return false;
    if (!parse_value(p->tok[0], REMAT_F64, v)) {
        seterr(err, n, "%s:%d: param %s: '%s' is not a number", c->path, p->line, name, p->tok[0]);
        return false;
    }
    return true;
}

bool fx_param_ints(const fx_case *c, const char *name, int64_t *v, int max, int *cnt, char *err,
                   size_t n) {
    const fx_param *p = param_n(c, name, -1, err, n);
    if (!p) return false;
    if (p->n > max) {
        seterr(err, n, "%s:%d: param %s: at most %d values, found %d", c->path, p->line, name, max,
               p->n);
        return false;
    }
    for (int i = 0; i < p->n; i++)
        if (!parse_i64(p->tok[i], &v[i])) {
            seterr(err, n, "%s:%d: param %s: '%s' is not an integer", c->path, p->line, name,
                   p->tok[i]);
            return false;
        }
    *cnt = p->n;
    return true;
}

const char *fx_param_str(const fx_case *c, const char *name) {
    const fx_param *p = fx_param_get(c, name);
    return p && p->n == 1 ? p->tok[0] : NULL;
}

/* ---- tensors ---- */
int fx_make_tensor(const fx_tensor *t, remat_tensor **out) {
    *out = NULL;
    if (t->n_values != t->numel)
        return remat_set_error(REMAT_EFORMAT, "fx_make_tensor: %s %s holds only samples",
                               fx_kind_name(t->kind), t->name);
    size_t es = remat_dtype_size(t->dtype);
    void *buf = malloc(es * (size_t)(t->numel ? t->numel : 1));
    if (!buf) return remat_set_error(REMAT_ENOMEM, "fx_make_tensor: out of memory");
    for (int64_t i = 0; i < t->numel; i++) {
        if (t->dtype == REMAT_F32) ((float *)buf)[i] = (float)t->values[i];
        else if (t->dtype == REMAT_F64) ((double *)buf)[i] = t->values[i];
        else ((int64_t *)buf)[i] = (int64_t)t->values[i];
    }
    int rc = remat_from_data(out, t->ndim, t->ndim ? t->shape : NULL, t->dtype, buf);
    free(buf);
    return rc;
}

int fx_apply_views(const fx_case *c, const char *name, remat_tensor *base, remat_tensor **out) {
    remat_tensor *cur = remat_retain(base);
    *out = NULL;
    for (int i = 0; i < c->n_views; i++) {
        const fx_view *v = &c->views[i];
        if (strcmp(v->input, name) != 0) continue;
        remat_tensor *next = NULL;
        int rc;
        if (strcmp(v->kind, "transpose") == 0) {
            rc = remat_transpose(&next, cur, (int)v->args[0], (int)v->args[1]);
        } else if (strcmp(v->kind, "permute") == 0) {
            int perm[REMAT_MAX_DIMS];
            for (int k = 0; k < v->nargs; k++) perm[k] = (int)v->args[k];
            rc = remat_permute(&next, cur, v->nargs, perm);
        } else if (strcmp(v->kind, "slice") == 0) {
            rc = remat_slice(&next, cur, (int)v->args[0], v->args[1], v->args[2], v->args[3]);
        } else { /* expand (checked by the parser) */
            rc = remat_expand(&next, cur, v->nargs, v->args);
        }
        remat_release(cur);
        if (rc != REMAT_OK) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", remat_last_error());
            return remat_set_error(rc, "%s:%d: applying view %s to input %s: %s", c->path, v->line,
                                   v->kind, name, msg);
        }
        cur = next;
    }
    *out = cur;
    return REMAT_OK;
}

bool fx_all_zero(const fx_tensor *t) {
    for (int64_t i = 0; i < t->n_values; i++)
        if (t->values[i] != 0) return false;
    return true;
}

/* Row-major flat index → "[i, j, k]". */
static void index_str(int64_t flat, int ndim, const int64_t *shape, char *buf, size_t n) {
    int64_t idx[REMAT_MAX_DIMS];
    for (int d = ndim - 1; d >= 0; d--) {
        idx[d] = shape[d] ? flat % shape[d] : 0;
        flat = shape[d] ? flat / shape[d] : 0;
    }
    shape_str(ndim, idx, buf, n);
}

int64_t fx_compare(const remat_tensor *got, const fx_tensor *exp, double atol, double rtol,
                   char *msg, size_t msg_len) {
    if (msg && msg_len) msg[0] = '\0';
    char se[128], sg[128];
    shape_str(exp->ndim, exp->shape, se, sizeof se);
    if (!got) {
        seterr(msg, msg_len, "%s %s: remat gave no tensor (expected %s %s)",
               fx_kind_name(exp->kind), exp->name, se, remat_dtype_name(exp->dtype));
        return exp->numel ? exp->numel : 1;
    }
    shape_str(remat_ndim(got), remat_shape(got), sg, sizeof sg);
    bool shape_ok = remat_ndim(got) == exp->ndim;
    for (int d = 0; shape_ok && d < exp->ndim; d++) shape_ok = remat_shape(got)[d] == exp->shape[d];
    if (!shape_ok || remat_tensor_dtype(got) != exp->dtype) {
        seterr(msg, msg_len, "%s %s: remat gave %s %s, expected %s %s", fx_kind_name(exp->kind),
               exp->name, sg, remat_dtype_name(remat_tensor_dtype(got)), se,
               remat_dtype_name(exp->dtype));
        return exp->numel ? exp->numel : 1;
    }
    double *v = malloc(sizeof(double) * (size_t)(exp->numel ? exp->numel : 1));
    if (!v) {
        seterr(msg, msg_len, "fx_compare: out of memory");
        return 1;
    }
    int rc = remat_copy_to_buffer(got, REMAT_F64, v, exp->numel);
    if (rc != REMAT_OK) {
        seterr(msg, msg_len, "%s %s: remat_copy_to_buffer failed: %s", fx_kind_name(exp->kind),
               exp->name, remat_last_error());
        free(v);
        return exp->numel ? exp->numel : 1;
    }
    bool exact = exp->dtype == REMAT_I64;
    int64_t bad = 0, worst = -1;
    double worst_excess = 0;
    size_t k = 0;
    /* expected value j is element j*stride (stride 1 unless sampled) */
    for (int64_t j = 0; j < exp->n_values; j++) {
        int64_t i = j * exp->stride;
        double e = exp->values[j], g = v[i], d = fabs(g - e);
        double tol = exact ? 0 : atol + rtol * fabs(e);
        bool ok = exact ? g == e : d <= tol; /* NaN fails */
        if (ok) continue;
        double excess = isnan(d) ? INFINITY : d - tol;
        if (worst < 0 || excess > worst_excess) worst = j, worst_excess = excess;
        if (bad < 4 && msg && k < msg_len) {
            char ix[128];
            index_str(i, exp->ndim, exp->shape, ix, sizeof ix);
            k += (size_t)snprintf(
                msg + k, msg_len - k, "%s%s %s%s: got %.17g expected %.17g |diff| %.3g > tol %.3g",
                bad ? "; " : "", fx_kind_name(exp->kind), exp->name, ix, g, e, d, tol);
        }
        bad++;
    }
    if (bad > 0 && msg && k < msg_len) {
        char ix[128];
        index_str(worst * exp->stride, exp->ndim, exp->shape, ix, sizeof ix);
        snprintf(msg + k, msg_len - k,
                 "; %lld of %lld %s off, worst at %s: got %.17g expected %.17g", (long long)bad,
                 (long long)exp->n_values, exp->stride > 1 ? "sampled elements" : "elements", ix,
                 v[worst * exp->stride], exp->values[worst]);
    }
    free(v);
    return bad;
}

/* ---- index ---- */
bool fx_index_load(fx_index_entry **entries, int *count, char *err, size_t n) {
    *entries = NULL;
    *count = 0;
    char path[512];
    snprintf(path, sizeof path, "%s/index.txt", REMAT_FIXTURE_DIR);
    FILE *f = fopen(path, "r");
    if (!f) {
        seterr(err, n, "%s: cannot open fixture index: %s (regenerate with `make fixtures`)", path,
               strerror(errno));
        return false;
    }
    char line[1024];
    int lineno = 0;
    fx_index_entry *arr = NULL;
    int cnt = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        if (!strchr(line, '\n') && !feof(f)) {
            seterr(err, n, "%s:%d: line too long", path, lineno);
            goto fail;
        }
        char *tok[8];
        int nt = split(line, tok, 8);
        if (nt == 0 || tok[0][0] == '#') continue;
        if (nt != 3 || strlen(tok[0]) >= FX_NAME_MAX || strlen(tok[1]) >= FX_NAME_MAX) {
            seterr(err, n, "%s:%d: expected '<case> <op> <dtype>'", path, lineno);
            goto fail;
        }
        if (!push((void **)&arr, &cnt, sizeof(fx_index_entry))) {
            seterr(err, n, "%s: out of memory", path);
            goto fail;
        }
        fx_index_entry *e = &arr[cnt - 1];
        strcpy(e->name, tok[0]);
        strcpy(e->op, tok[1]);
        if (!parse_dtype(tok[2], &e->dtype) || e->dtype == REMAT_I64) {
            seterr(err, n, "%s:%d: bad dtype '%s'", path, lineno, tok[2]);
            goto fail;
        }
        for (int i = 0; i < cnt - 1; i++)
            if (strcmp(arr[i].name, e->name) == 0) {
                seterr(err, n, "%s:%d: case %s listed twice", path, lineno, e->name);
                goto fail;
            }
    }
    fclose(f);
    if (cnt == 0) {
        seterr(err, n, "%s: no cases listed", path);
        free(arr);
        return false;
    }
    *entries = arr;
    *count = cnt;
    return true;
fail:
    fclose(f);
    free(arr);
    return false;
}
