/* tools/cli/options.c — the table-driven flag parser and usage printer (options.h). */
#include "options.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "util.h"

#define USAGE_WIDTH 80
#define HELP_COLUMN 24 /* "  " + 21 columns of name and meta + " " */

static const opt_row *find_row(const opt_table *t, unsigned cmd_bit, const char *name) {
    for (int i = 0; i < t->n_rows; i++)
        if ((t->rows[i].cmds & cmd_bit) && strcmp(t->rows[i].name, name) == 0) return &t->rows[i];
    return NULL;
}

/* The index of val among "a|b|c", or -1. */
static int choice_index(const char *choices, const char *val) {
    size_t len = strlen(val);
    int idx = 0;
    for (const char *p = choices;; idx++) {
        const char *bar = strchr(p, '|');
        size_t plen = bar ? (size_t)(bar - p) : strlen(p);
        if (plen == len && strncmp(p, val, len) == 0) return idx;
        if (!bar) return -1;
        p = bar + 1;
    }
}

static void store_int(void *field, size_t size, long v) {
    if (size == sizeof(bool)) *(bool *)field = v != 0;
    else *(int *)field = (int)v;
}

/* What a numeric row accepts, for messages: "an integer in [1, 4096]",
 * "an integer >= 0" (a limit of 1e9 or more left unsaid unless over_hi),
 * "a number >= 0", "a number > 0"; into buf. */
static const char *expected(const opt_row *r, bool over_hi, char *buf, size_t n) {
    if (r->kind == OPT_NUM || r->kind == OPT_POSNUM)
        snprintf(buf, n, "a number %s %g", r->kind == OPT_NUM ? ">=" : ">", r->lo);
    else if (r->hi >= 1e9 && !over_hi) snprintf(buf, n, "an integer >= %ld", (long)r->lo);
    else snprintf(buf, n, "an integer in [%ld, %ld]", (long)r->lo, (long)r->hi);
    return buf;
}

/* The number of choices in "a|b|c". */
static int n_choices(const char *choices) {
    int k = 1;
    for (const char *p = choices; (p = strchr(p, '|')); p++) k++;
    return k;
}

int opt_check_value(const opt_table *t, unsigned cmd_bit, const char *name, double v, char *err,
                    size_t n) {
    const opt_row *r = find_row(t, cmd_bit, name);
    char what[96];
    bool ok = true;
    if (!r) {
        snprintf(err, n, "%s is no flag", name);
        return 2;
    }
    switch (r->kind) {
    case OPT_FLAG: ok = v == 0 || v == 1; break;
    case OPT_STR: ok = false; break;
    case OPT_CHOICE: ok = v >= 0 && v < n_choices(r->choices) && v == (double)(long)v; break;
    case OPT_INT:
    case OPT_LONG:
    case OPT_U64:
    case OPT_OPTINT: ok = v >= r->lo && v <= r->hi && v == (double)(long)v; break;
    case OPT_NUM:
    case OPT_POSNUM:
        ok = isfinite(v) && (r->kind == OPT_NUM ? v >= r->lo : v > r->lo) && v <= r->hi;
        break;
    }
    if (ok) return 0;
    if (r->kind == OPT_CHOICE) snprintf(err, n, "expected one of %s", r->choices);
    else if (r->kind == OPT_FLAG) snprintf(err, n, "expected 0 or 1");
    else if (r->kind == OPT_STR) snprintf(err, n, "%s takes text, not a number", name);
    else snprintf(err, n, "expected %s", expected(r, v > r->hi, what, sizeof what));
    return 2;
}

/* Converts and stores one value; 0, or 2 with the message in err. */
static int store(const opt_row *r, void *target, const char *val, char *err, size_t n) {
    void *field = (char *)target + r->off;
    long lv = 0;
    double dv = 0;
    char what[96];
    switch (r->kind) {
    case OPT_FLAG: *(bool *)field = true; return 0;
    case OPT_STR: *(const char **)field = val; return 0;
    case OPT_CHOICE: {
        int idx = choice_index(r->choices, val);
        if (idx < 0) {
            snprintf(err, n, "bad value for %s '%s': expected one of %s", r->name, val, r->choices);
            return 2;
        }
        store_int(field, r->size, idx);
        return 0;
    }
    case OPT_INT:
    case OPT_LONG:
    case OPT_U64:
    case OPT_OPTINT:
        if (!util_parse_long(val, (long)r->lo, (long)r->hi, &lv)) {
            snprintf(err, n, "bad value for '%s': expected %s", r->name,
                     expected(r, false, what, sizeof what));
            return 2;
        }
        if (r->kind == OPT_LONG) *(long *)field = lv;
        else if (r->kind == OPT_U64) *(uint64_t *)field = (uint64_t)lv;
        else *(int *)field = (int)lv;
        return 0;
    case OPT_NUM:
    case OPT_POSNUM: {
        bool ok = util_parse_double(val, &dv) && (r->kind == OPT_NUM ? dv >= r->lo : dv > r->lo) &&
                  dv <= r->hi;
        if (!ok) {
            snprintf(err, n, "bad value for '%s': expected %s", r->name,
                     expected(r, false, what, sizeof what));
            return 2;
        }
        *(double *)field = dv;
        return 0;
    }
    }
    return 0;
}

int opt_parse(const opt_table *t, unsigned cmd_bit, void *target, int argc, char **argv, int first,
              char *err, size_t n) {
    for (int i = first; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) return 1;
        if (strncmp(arg, "--", 2) != 0) {
            snprintf(err, n, "unexpected argument '%s'", arg);
            return 2;
        }
        /* --name=value or --name value */
        char name[64];
        const char *eq = strchr(arg, '=');
        size_t nlen = eq ? (size_t)(eq - arg) : strlen(arg);
        const opt_row *r = NULL;
        if (nlen < sizeof name) {
            memcpy(name, arg, nlen);
            name[nlen] = '\0';
            r = find_row(t, cmd_bit, name);
        }
        if (!r) {
            snprintf(err, n, "unknown option '%s'", arg);
            return 2;
        }
        const char *val = eq ? eq + 1 : NULL;
        if (r->kind == OPT_FLAG && val) {
            snprintf(err, n, "option takes no value '%s'", arg);
            return 2;
        }
        if (r->kind == OPT_OPTINT && !val) {
            *(int *)((char *)target + r->off) = (int)r->bare;
        } else {
            if (r->kind != OPT_FLAG && !val) {
                if (i + 1 >= argc) {
                    snprintf(err, n, "missing value for '%s'", name);
                    return 2;
                }
                val = argv[++i];
            }
            int rc = store(r, target, val, err, n);
            if (rc) return rc;
        }
        if (r->has_set) *(bool *)((char *)target + r->set_off) = true;
    }
    return 0;
}

/* ---- usage ------------------------------------------------------------------------- */
static bool section_used(const opt_table *t, unsigned cmd_bit, int s) {
    for (int i = 0; i < t->n_rows; i++)
        if ((t->rows[i].cmds & cmd_bit) && t->rows[i].section == s && t->rows[i].help) return true;
    return false;
}

static void print_row(const opt_row *r, FILE *f) {
    char left[96];
    snprintf(left, sizeof left, "%s%s%s", r->name,
             r->meta ? (r->kind == OPT_OPTINT ? "[=" : " ") : "", r->meta ? r->meta : "");
    if (r->meta && r->kind == OPT_OPTINT) strncat(left, "]", sizeof left - strlen(left) - 1);
    int col = fprintf(f, "  %-*s ", HELP_COLUMN - 3, left);
    if (col > HELP_COLUMN) col = fprintf(f, "\n%*s", HELP_COLUMN, "") - 1;
    for (const char *p = r->help;;) {
        const char *nl = strchr(p, '\n');
        int len = nl ? (int)(nl - p) : (int)strlen(p);
        fwrite(p, 1, (size_t)len, f);
        col += len;
        if (!nl) break;
        fprintf(f, "\n%*s", HELP_COLUMN, "");
        col = HELP_COLUMN;
        p = nl + 1;
    }
    if (r->dflt) {
        int dlen = (int)strlen(r->dflt);
        if (col + 1 + dlen > USAGE_WIDTH) { /* on a line of its own */
            fprintf(f, "\n");
            col = 0;
        }
        int right = col + 1 + dlen > USAGE_WIDTH - 1 ? col + 1 + dlen : USAGE_WIDTH - 1;
        fprintf(f, "%*s", right - col, r->dflt);
    }
    fprintf(f, "\n");
}

void opt_usage(const opt_table *t, unsigned cmd_bit, FILE *f) {
    bool first = true;
    for (int s = 0; s < t->n_sections; s++) {
        if (!section_used(t, cmd_bit, s)) continue;
        fprintf(f, "%s%s\n", first ? "" : "\n", t->sections[s].title);
        if (t->sections[s].preamble) fputs(t->sections[s].preamble, f);
        first = false;
        for (int i = 0; i < t->n_rows; i++)
            if ((t->rows[i].cmds & cmd_bit) && t->rows[i].section == s && t->rows[i].help)
                print_row(&t->rows[i], f);
    }
}
