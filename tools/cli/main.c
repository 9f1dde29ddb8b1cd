/*
 * tools/cli/main.c — the remat program.
 *
 *   remat                 bench on a small default GPT, plots in ./out (make run)
 *   remat train [FLAGS]   train a GPT or MLP with a checkpointing strategy
 *   remat bench [FLAGS]   compare strategies side by side
 *   remat sample [FLAGS]  generate text from a saved GPT or a Hugging Face model
 *   remat eval [FLAGS]    a Hugging Face model's loss on a text (tools/train/hf_run.c)
 *   remat tokenize ...    a text file to an llm.c token file (tools/io/tokenize.c)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "args.h"
#include "io/tokenize.h"
#include "train/bench.h"
#include "train/hf_run.h"
#include "train/sample.h"
#include "train/train.h"
#include "util.h"

/* libgomp's workers spin after every parallel region by default (300,000
 * turns, GOMP_SPINCOUNT, before they sleep). On a 2-core machine that also runs anything else
 * the spinning threads take the cores the next kernel needs: steps measured
 * 2-5x slower. The policy is read once, when libgomp loads, so remat sets it
 * and re-executes itself once; an OMP_WAIT_POLICY of the user's is kept. */
static void passive_openmp(char **argv) {
    if (getenv("OMP_WAIT_POLICY")) return;
    if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0) return;
    execv("/proc/self/exe", argv);
    /* exec failed (no /proc): carry on with the default policy */
}

int main(int argc, char **argv) {
    config c;
    passive_openmp(argv);
    stop_signals_block(); /* before any thread exists: see util.h */
    if (argc < 2 || (argv[1][0] == '-' && strcmp(argv[1], "--help") != 0 &&
                     strcmp(argv[1], "-h") != 0 && strcmp(argv[1], "--version") != 0)) {
        /* `remat` or `remat --flags`: the default bench */
        args_defaults_bench(&c);
        int rc = args_parse(&c, CMD_BENCH, argc, argv, 1);
        if (rc) return rc < 0 ? 0 : rc;
        c.out_dir = "out";
        stop_signals_default();
        return cmd_bench(&c, true);
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        args_usage_main(stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version")) {
        printf("remat %s (GEMM: %s)\n", remat_version_string(), remat_gemm_backend());
        return 0;
    }
    if (!strcmp(cmd, "train") || !strcmp(cmd, "bench")) {
        bool bench = cmd[0] == 'b';
        if (bench) args_defaults_bench(&c);
        else args_defaults_train(&c);
        int rc = args_parse(&c, bench ? CMD_BENCH : CMD_TRAIN, argc, argv, 2);
        if (rc) return rc < 0 ? 0 : rc;
        if (bench) stop_signals_default();
        return bench ? cmd_bench(&c, false) : cmd_train(&c);
    }
    if (!strcmp(cmd, "sample")) {
        args_defaults_sample(&c);
        int rc = args_parse(&c, CMD_SAMPLE, argc, argv, 2);
        if (rc) return rc < 0 ? 0 : rc;
        stop_signals_default();
        return c.init_from ? cmd_sample_hf(&c) : cmd_sample(&c);
    }
    if (!strcmp(cmd, "eval")) {
        args_defaults_eval(&c);
        int rc = args_parse(&c, CMD_EVAL, argc, argv, 2);
        if (rc) return rc < 0 ? 0 : rc;
        stop_signals_default();
        return cmd_eval(&c);
    }
    if (!strcmp(cmd, "tokenize")) return cmd_tokenize(argc - 1, argv + 1);
    fprintf(stderr, "remat: unknown command '%s'\n\n", cmd);
    args_usage_main(stderr);
    return 2;
}
