/*
 * tools/cli/args.h — command-line configuration of `remat train` and
 * `remat bench`, and the checkpointing strategies they understand.
 */
#ifndef REMAT_TOOLS_ARGS_H
#define REMAT_TOOLS_ARGS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "train/strategy.h"

/* MODEL_HF: a Hugging Face GPT-2 or Llama (--init-from DIR), the library's
 * model object (remat/models.h); MODEL_LLAMA: the library's Llama built from
 * the flags (--model llama: byte-level like the GPT, seeded init). The values
 * are those --save files record. */
typedef enum model_kind { MODEL_GPT = 0, MODEL_MLP = 1, MODEL_HF = 2, MODEL_LLAMA = 3 } model_kind;
typedef enum optim_kind { OPTIM_ADAMW = 0, OPTIM_SGD = 1 } optim_kind;
/* The program's commands, as bits: a flag's row says which accept it. */
typedef enum command { CMD_TRAIN = 1, CMD_BENCH = 2, CMD_SAMPLE = 4, CMD_EVAL = 8 } command;

#define ARGS_MAX_STRATEGIES 112 /* --strategies takes up to 16; the sweep adds more */
#define ARGS_MAX_LISTED 16
/* Model and batch limits of the flags; --resume bounds a file's header by them too. */
#define ARGS_MAX_LAYERS 4096
#define ARGS_MAX_WIDTH 65536
#define ARGS_MAX_HEADS 1024
#define ARGS_MAX_CONTEXT 65536
#define ARGS_MAX_BATCH (1 << 20)

typedef struct config {
    model_kind model;
    int layers, width, heads, context, batch;
    long steps;
    uint64_t seed;
    int threads;             /* 0: leave OpenMP's default */
    const char *device_text; /* --device D as given (cpu, cuda, cuda:N) */
    remat_device device;     /* where the model, the batches and the peaks are */
    double lr, weight_decay, momentum;
    optim_kind optim;
    bool cosine;    /* --lr-schedule cosine: linear warm-up, cosine decay to min_lr */
    long warmup;    /* --warmup N steps (cosine) */
    double min_lr;  /* --min-lr X (cosine floor) */
    double clip;    /* --clip X: gradient norm clipping (0: off) */
    int accum;      /* --accum N: micro-batches per optimizer step */
    bool untied;    /* GPT: separate output head instead of tied embeddings */
    bool attn_ops;  /* GPT: attention composed of ops instead of remat_attention */
    bool autocast;  /* --autocast bf16: forward under remat_autocast (bf16 mixed precision) */
    strategy strat; /* train: the strategy */
    const char *checkpoint_text; /* --checkpoint S as given (parsed into strat) */
    bool reentrant;              /* --reentrant */
    const char *data;            /* --data FILE, NULL: built-in task */
    const char *save, *resume, *trace, *timeline;
    long save_every; /* --save-every N: also write --save every N steps (0: at the end only) */
    const char *log; /* --log FILE: one JSON line per step and per evaluation */
    bool json, csv, quiet;
    bool progress;     /* train --progress: the bar even when stderr is no terminal */
    bool verbose;      /* print the planner's profile and plans */
    bool explain;      /* train --explain: what the plan keeps and recomputes per block */
    bool plan_offload; /* --plan-offload: budget= may offload ops (remat_plan_options.offload) */
    bool plan_lossy;   /* --plan-lossy: budget= may keep ops as bf16 (remat_plan_options.lossy) */
    bool report;       /* train --report: residual report of the run's first step */
    long eval_every;
    /* under mpirun (tools/train/dist.h) */
    double dist_timeout; /* --dist-timeout seconds (0: 60) */
    double bucket_mib;   /* --bucket-size MiB (0: 25) */
    bool zero;           /* --zero: AdamW state sharded across ranks (ZeRO-1) */
    /* Hugging Face models (train, sample, eval) */
    const char *init_from;      /* --init-from DIR */
    const char *export_dir;     /* train --export DIR */
    const struct hf_dir *hf;    /* the model's directory, read by the command */
    const char *const *hf_tags; /* its blocks' tags (strategy checks), once it exists */
    int n_hf_tags;
    /* sample */
    const char *prompt; /* --prompt TEXT */
    long tokens;        /* --tokens N to generate */
    double temperature; /* --temperature T (0: greedy) */
    int top_k;          /* --top-k K (0: all 256 bytes) */
    /* bench */
    const char *strategies_text; /* --strategies LIST as given (parsed into strategies) */
    strategy strategies[ARGS_MAX_STRATEGIES];
    int n_strategies;
    int reps;
    const char *svg, *out_dir;
    bool set_reps;
    bool default_strategies; /* no --strategies/--checkpoint: the list may adapt to the model */
    int sweep;               /* --sweep-budgets[=N]: N planner budgets (0: no sweep) */
    int profile;             /* bench --profile[=N]: N steps per strategy timed per kernel */
    const char *svg_pareto;  /* --svg-pareto FILE */
    /* which model-shape flags were given explicitly (a resumed file must agree) */
    bool set_layers, set_width, set_heads, set_context, set_model, set_untied, set_lr;
    bool set_batch, set_seed, set_optim, set_weight_decay, set_momentum, set_attention;
    bool set_schedule, set_warmup, set_min_lr, set_clip,
        set_accum; /* --resume takes the rest from the file */
    /* --resume also keeps the saved run's checkpointing, autocast and --save-every
     * unless given (a file that records them: tools/io/training_save.c) */
    bool set_autocast, set_reentrant, set_save_every;
} config;

/* Defaults for `remat train` / `remat bench` (bench's default is the
 * small GPT that `make run` shows). */
void args_defaults_train(config *c);
void args_defaults_bench(config *c);
void args_defaults_sample(config *c);
void args_defaults_eval(config *c);

/* Parses argv[first..argc) of command cmd into c (the flags and their
 * usage lines are one table in args.c). On error prints "remat CMD: what"
 * and the usage to stderr and returns 2; `--help` prints usage to stdout
 * and returns -1 (caller exits 0); 0 on success. */
int args_parse(config *c, command cmd, int argc, char **argv, int first);
/* The checks that depend on the model (strategies against its blocks and
 * tags, --heads against --width, the addition task's --context), warnings
 * for flags the model ignores; bench's default strategy list is trimmed to
 * what fits. Run by args_parse, or, with --resume, once the file's model
 * is known (savefile_merge_config). 0, or 1 with a message in err. */
int args_check_model(config *c, bool bench, char *err, size_t n);

/* Whether command cmd's flag (e.g. "--lr") would take the value v: for
 * settings read from elsewhere than argv (a --resume file). 0, or 2 with
 * "expected ..." in err. */
int args_check_value(command cmd, const char *flag, double v, char *err, size_t n);

/* Usage texts: the program's, and a command's (generated from its flags). */
void args_usage_main(FILE *f);
void args_usage(command cmd, FILE *f);
#endif
