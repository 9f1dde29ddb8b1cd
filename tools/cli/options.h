/*
 * tools/cli/options.h — a table-driven command-line parser and the usage text
 * generated from the same table.
 *
 * One row per flag says its name, what value it takes, where the value goes
 * (an offset into the caller's struct), which commands accept it and its
 * lines in the usage. Adding a flag is adding a row: the parser, the range
 * check, the error message and the --help text all come from it.
 *
 * Flags are long options only: `--name VALUE` or `--name=VALUE`; a flag
 * without a value (OPT_FLAG) refuses `--name=...`; OPT_OPTINT takes a value
 * only after '='.
 */
#ifndef REMAT_TOOLS_OPTIONS_H
#define REMAT_TOOLS_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef enum opt_kind {
    OPT_FLAG,   /* bool set to true; no value */
    OPT_INT,    /* int in [lo, hi] */
    OPT_LONG,   /* long in [lo, hi] */
    OPT_U64,    /* uint64_t in [lo, hi] */
    OPT_NUM,    /* double in [lo, hi] */
    OPT_POSNUM, /* double in (lo, hi] */
    OPT_STR,    /* const char *, pointing into argv */
    OPT_CHOICE, /* one of choices "a|b|c": its index, stored into an int or a bool */
    OPT_OPTINT, /* int: `--name` gives bare, `--name=N` gives N in [lo, hi] */
} opt_kind;

typedef struct opt_row {
    const char *name; /* "--layers" */
    const char *meta; /* "N" after the name in the usage; NULL: none */
    opt_kind kind;
    unsigned cmds;    /* bit mask of the commands that accept the flag */
    int section;      /* index into the table's sections */
    size_t off, size; /* the field the value goes to */
    bool has_set;     /* also set the bool at set_off to true when given */
    size_t set_off;
    double lo, hi;       /* numeric bounds */
    long bare;           /* OPT_OPTINT: the value of the bare flag */
    const char *choices; /* OPT_CHOICE: "gpt|mlp" (gpt -> 0, mlp -> 1) */
    const char *help;    /* usage lines separated by '\n'; NULL: an alias left out of the usage */
    const char *dflt;    /* "[gpt]", put at the end of the help's last line; NULL: none */
} opt_row;

typedef struct opt_section {
    const char *title;    /* "model:" */
    const char *preamble; /* lines printed under the title before its flags; NULL: none */
} opt_section;

typedef struct opt_table {
    const opt_row *rows;
    int n_rows;
    const opt_section *sections;
    int n_sections;
} opt_table;

/* Fills a field of `target` (the struct the rows' offsets point into) from
 * the arguments argv[first..argc) that command `cmd_bit` accepts.
 * Returns 0 on success; 1 for --help or -h (nothing more is parsed); 2 on an
 * error, with a message in err[n] ("unknown option '--x'", "bad value for
 * '--layers': expected an integer in [1, 4096]", ...). On an error the
 * fields parsed before it keep their new values. */
int opt_parse(const opt_table *t, unsigned cmd_bit, void *target, int argc, char **argv, int first,
              char *err, size_t n);

/* Checks a value that did not come from argv (a saved run's setting) against
 * the bounds of flag `name` of command `cmd_bit`, as opt_parse would: a
 * number finite and in range, an integer in range, a choice's index.
 * Returns 0 if the flag would take it; 2 with "expected ..." in err[n]. */
int opt_check_value(const opt_table *t, unsigned cmd_bit, const char *name, double v, char *err,
                    size_t n);

/* Prints the flags of command `cmd_bit`, section by section (in the table's
 * order; sections without such a flag are left out), 80 columns wide. */
void opt_usage(const opt_table *t, unsigned cmd_bit, FILE *f);

/* Designated-initializer helpers for rows over a struct type T. */
#define OPT_TARGET(T, field) .off = offsetof(T, field), .size = sizeof(((T *)0)->field)
#define OPT_SETS(T, field) .has_set = true, .set_off = offsetof(T, field)
#endif
