/* tests/support/tmpdir.c — see tmpdir.h. */
#define _XOPEN_SOURCE 700 /* nftw's FTW_DEPTH and FTW_PHYS */
#include "support/tmpdir.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char g_dir[256];

const char *rt_tmpdir_make(const char *prefix) {
    int n = snprintf(g_dir, sizeof g_dir, "/tmp/%s_XXXXXX", prefix);
    cr_assert(n > 0 && (size_t)n < sizeof g_dir, "temporary directory prefix too long");
    cr_assert(mkdtemp(g_dir) != NULL, "mkdtemp %s failed", g_dir);
    return g_dir;
}

const char *rt_tmpdir(void) { return g_dir; }

/* Children before their directory (FTW_DEPTH), links not followed (FTW_PHYS). */
static int remove_one(const char *path, const struct stat *st, int type, struct FTW *ftw) {
    (void)st, (void)type, (void)ftw;
    return remove(path);
}

void rt_tmpdir_remove(void) {
    cr_assert(g_dir[0], "rt_tmpdir_remove without rt_tmpdir_make");
    cr_assert_eq(nftw(g_dir, remove_one, 16, FTW_DEPTH | FTW_PHYS), 0, "could not remove %s",
                 g_dir);
}

const char *rt_tmpdir_path(const char *name) {
    static char bufs[4][512];
    static unsigned next;
    char *b = bufs[next++ % 4];
    int n = snprintf(b, sizeof bufs[0], "%s/%s", g_dir, name);
    cr_assert(n > 0 && (size_t)n < sizeof bufs[0], "path too long: %s/%s", g_dir, name);
    return b;
}

static int by_string(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

const char *rt_tmpdir_list(const char *sub) {
    static char out[4096];
    char *names[256];
    size_t n = 0;
    DIR *d = opendir(*sub ? rt_tmpdir_path(sub) : g_dir);
    cr_assert(d, "cannot list %s/%s", g_dir, sub);
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        cr_assert_lt(n, 256, "too many files");
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, by_string);
    out[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        cr_assert_lt(strlen(out) + strlen(names[i]) + 2, sizeof out);
        if (i) strcat(out, " ");
        strcat(out, names[i]);
        free(names[i]);
    }
    return out;
}
