/*
 * tools/main.c — the remat program.
 *
 *   remat                 bench on a small default GPT, plots in ./out (make run)
 *   remat train [FLAGS]   train a GPT or MLP with a checkpointing strategy
 *   remat bench [FLAGS]   compare strategies side by side
 */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "bench.h"
#include "train.h"

int main(int argc, char **argv) {
    config c;
    if (argc < 2) {
        args_defaults_bench(&c);
        int rc = args_parse(&c, "bench", argc, argv, 1);
        if (rc) return rc < 0 ? 0 : rc;
        c.out_dir = "out";
        return cmd_bench(&c, true);
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        args_usage_main(stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version")) {
        printf("remat %d.%d.%d (GEMM: %s)\n", REMAT_VERSION_MAJOR, REMAT_VERSION_MINOR,
               REMAT_VERSION_PATCH, remat_gemm_backend());
        return 0;
    }
    if (!strcmp(cmd, "train") || !strcmp(cmd, "bench")) {
        bool bench = cmd[0] == 'b';
        if (bench)
            args_defaults_bench(&c);
        else
            args_defaults_train(&c);
        int rc = args_parse(&c, cmd, argc, argv, 2);
        if (rc) return rc < 0 ? 0 : rc;
        return bench ? cmd_bench(&c, false) : cmd_train(&c);
    }
    fprintf(stderr, "remat: unknown command '%s'\n\n", cmd);
    args_usage_main(stderr);
    return 2;
}
