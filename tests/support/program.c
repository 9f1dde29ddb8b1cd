/* tests/support/program.c — see program.h. */
#include "support/program.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

const char *rt_program_path(const char *name) {
    static char bin[4096];
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    cr_assert(n > 0, "readlink /proc/self/exe: %s", strerror(errno));
    self[n] = '\0';
    int k = snprintf(bin, sizeof bin, "%s/%s", dirname(self), name);
    cr_assert(k > 0 && (size_t)k < sizeof bin, "program path too long");
    cr_assert(access(bin, X_OK) == 0, "the %s program is not at %s", name, bin);
    return bin;
}

int rt_program_run(char **out, const char *cmd) {
    FILE *p = popen(cmd, "r");
    cr_assert(p, "popen %s", cmd);
    size_t cap = 4096, len = 0, k;
    char *buf = malloc(cap);
    cr_assert(buf);
    while ((k = fread(buf + len, 1, cap - len - 1, p)) > 0) {
        len += k;
        if (len + 1 == cap) {
            buf = realloc(buf, cap *= 2);
            cr_assert(buf);
        }
    }
    buf[len] = '\0';
    int st = pclose(p);
    *out = buf;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}
