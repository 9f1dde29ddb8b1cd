/* tools/args.c — flag parsing and usage texts of the remat program. */
#include "args.h"

#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#include "models.h"
#include "strategy.h"
#include "util.h"

void args_usage_main(FILE *f) {
    fprintf(f,
            "usage: remat [COMMAND] [FLAGS]\n"
            "\n"
            "Train neural networks in C with activation checkpointing, and see what it buys.\n"
            "\n"
            "commands:\n"
            "  bench   run one model under several checkpointing strategies side by side:\n"
            "          step time, allocator peak, peak RSS, recompute overhead, gradient check,\n"
            "          SVG plots (memory vs time, memory timelines)\n"
            "  train   train a small GPT or a deep MLP on a built-in task or a text file\n"
            "\n"
            "With no command (or only flags), remat runs `remat bench` on a small default GPT\n"
            "and writes its plots to ./out/ (this is what `make run` does).\n"
            "\n"
            "examples:\n"
            "  remat                                   the default comparison, plots in ./out\n"
            "  remat train                             GPT learns two-digit addition\n"
            "  remat train --checkpoint block --layers 8 --width 128 --context 128\n"
            "  remat train --data README.md --steps 300 --save run.bin\n"
            "  remat train --data README.md --resume run.bin --steps 600\n"
            "  remat bench --model mlp --strategies none,block,sequential=4 --svg mlp.svg\n"
            "  remat train --checkpoint budget=200MiB --layers 8 --width 128 --context 128\n"
            "  remat train --checkpoint selective=names:qkv+attn_out --report --steps 20\n"
            "  remat bench --strategies none,block,selective=dots,selective=names:qkv+mlp_up\n"
            "  remat bench --sweep-budgets            planner vs uniform segments, out/pareto.svg\n"
            "\n"
            "  remat --help | remat train --help | remat bench --help\n"
            "  docs/cli.md has the details (what is measured and how).\n");
}

static void usage_model(FILE *f) {
    fprintf(f,
            "model:\n"
            "  --model gpt|mlp       GPT (byte-level, causal attention) or deep MLP   [gpt]\n"
            "  --layers N            number of blocks\n"
            "  --width N             model width (GPT: embedding size, MLP: hidden size)\n"
            "  --heads N             GPT attention heads (must divide --width)\n"
            "  --context N           GPT context length in bytes\n"
            "  --batch N             sequences (GPT) or samples (MLP) per step\n"
            "  --untied              GPT: separate output head (default: tied to the embedding)\n"
            "  --attention K         GPT attention: fused (remat_attention: causal blocks\n"
            "                        skipped, no (T, T) matrix kept) or ops (matmul, scale,\n"
            "                        masked_fill, softmax, matmul, as in PyTorch 1.13) [fused]\n"
            "  --seed N              seed of the initialisation and of the data        [1]\n"
            "  --threads N           OpenMP/BLAS threads (default: all cores)\n"
            "\n"
            "checkpointing:\n"
            "  --checkpoint S        none | block | sequential=N | selective[=POLICY] | budget=SIZE\n"
            "                        block: every block checkpointed; sequential=N: the blocks\n"
            "                        split into N segments (checkpoint_sequential);\n"
            "                        budget=SIZE: the planner's fastest schedule whose memory\n"
            "                        fits SIZE (200MiB, 64M, 1.5GiB, 500000 bytes, or 40%% of\n"
            "                        what the blocks add without checkpointing);\n"
            "                        selective=POLICY: every block checkpointed, but the\n"
            "                        policy's op outputs are kept from the forward:\n"
            "                          dots          matmul/linear outputs (the default)\n"
            "                          names:A+B     only the tensors tagged A, B\n"
            "                          all-but:A+B   every tagged tensor but A, B\n"
            "                          except:A+B    every op's output but A's and B's\n"
            "                          nothing       nothing (= block)\n"
            "                          everything    everything (no recomputation)\n"
            "                        tags: GPT qkv, attn, attn_probs (--attention ops),\n"
            "                        attn_out, mlp_up, mlp_act, mlp_out; MLP linear, gelu\n"
            "  --reentrant           use reentrant checkpointing (default: non-reentrant;\n"
            "                        not for budget= and selective=, which are non-reentrant)\n"
            "  --verbose             print the planner's profile of the blocks and its plans\n"
            "\n"
            "data parallelism (mpirun -np N remat ...; docs/dist.md):\n"
            "  --batch is per rank; rank r takes rows [r*batch, (r+1)*batch) of each step's\n"
            "  global batch; rank 0 prints and writes files\n"
            "  --dist-timeout S      a rank that fails or stops answering ends the job\n"
            "                        within S seconds, naming it                       [60]\n"
            "  --bucket-size MIB     gradient all-reduce bucket size                   [25]\n"
            "  --zero                train: ZeRO-1, AdamW state sharded across the ranks\n"
            "                        (1/N per rank; not with --accum, --save, --resume)\n");
}

void args_usage_train(FILE *f) {
    fprintf(f,
            "usage: remat train [FLAGS]\n"
            "\n"
            "Trains a model and reports loss, accuracy on held-out examples, tokens/s and\n"
            "peak memory. The built-in task (no --data) is two-digit addition, \"12+34=46\":\n"
            "the loss is taken on the answer bytes, accuracy is per answer byte and per\n"
            "problem (greedy decoding). --model mlp regresses a fixed smooth function.\n"
            "\n");
    usage_model(f);
    fprintf(f,
            "\n"
            "training:\n"
            "  --steps N             total optimizer steps (also with --resume)      [1000]\n"
            "  --lr X                learning rate                                   [3e-3]\n"
            "  --optim adamw|sgd     optimizer                                     [adamw]\n"
            "  --weight-decay X      AdamW decoupled weight decay of matrices         [0.01]\n"
            "  --momentum X          SGD momentum                                        [0]\n"
            "  --lr-schedule S       constant, or cosine: linear warm-up over --warmup\n"
            "                        steps to --lr, then cosine decay to --min-lr  [constant]\n"
            "  --warmup N            warm-up steps of the cosine schedule                [0]\n"
            "  --min-lr X            where the cosine schedule ends                      [0]\n"
            "  --clip X              clip the gradients' global L2 norm to X (0: off)    [0]\n"
            "  --accum N             accumulate the gradients of N micro-batches (each\n"
            "                        --batch big) per optimizer step                     [1]\n"
            "  --data FILE           train a byte-level GPT on any text file\n"
            "  --eval-every N        evaluate on held-out data every N steps\n"
            "                        (0: only at the end)                  [--steps / 10]\n"
            "  --save FILE           write model + optimizer + RNG + step at the end, and\n"
            "                        on SIGINT/SIGTERM (the step finishes, the file is\n"
            "                        written, remat exits with 130/143 and says how to\n"
            "                        resume; a second signal stops at once)\n"
            "  --save-every N        also write --save every N steps                    [0]\n"
            "  --resume FILE         continue from a file written by --save\n"
            "\n"
            "output:\n"
            "  --json                print one JSON object at the end (step_ms, tokens_per_s,\n"
            "                        peak_alloc_bytes, peak_rss_bytes, loss, strategy, ...)\n"
            "  --trace FILE          Chrome-trace JSON of the allocator during the last step\n"
            "                        (open in chrome://tracing or ui.perfetto.dev)\n"
            "  --timeline FILE       SVG plot of memory over time during the last step\n"
            "  --report              print the residual report of the first step: every\n"
            "                        tensor saved for backward (op, name, shape, bytes),\n"
            "                        per-op totals and the total; with --json on stderr\n"
            "  --log FILE            one JSON line per step (step, loss, lr, step_ms,\n"
            "                        peak_bytes) and per evaluation (eval_loss, ...)\n"
            "  --quiet               no progress output\n");
}

void args_usage_bench(FILE *f) {
    fprintf(f,
            "usage: remat bench [FLAGS]\n"
            "\n"
            "Runs one forward+backward step of the same model (same seed, same batch) under\n"
            "each strategy, interleaved over several repetitions, and prints medians: step\n"
            "time, allocator peak, RSS growth, recompute overhead (time / time of `none`),\n"
            "and whether every parameter gradient equals the un-checkpointed one bitwise.\n"
            "\n");
    usage_model(f);
    fprintf(f,
            "\n"
            "bench:\n"
            "  --strategies LIST     comma-separated strategies; tag names inside one are\n"
            "                        joined by '+': none,selective=names:qkv+attn_out,block\n"
            "                 [none,block,sequential=2,sequential=4,budget=50%%,selective=dots]\n"
            "  --reps N              timed repetitions per strategy                     [5]\n"
            "  --out DIR             write tradeoff.svg, timeline.svg and trace.json into\n"
            "                        DIR (and pareto.svg when a budget= strategy ran;\n"
            "                        default of `remat` with no command: ./out)\n"
            "  --sweep-budgets[=N]   (or --pareto) sweep the planner: none, sequential=2..L\n"
            "                        and N budgets from the planner's minimum to the\n"
            "                        un-checkpointed peak [N=8; --reps defaults to 3];\n"
            "                        draws the Pareto curve, time vs peak, to\n"
            "                        DIR/pareto.svg or ./out/pareto.svg\n"
            "  --svg-pareto FILE     SVG of step time vs peak memory, uniform segments and\n"
            "                        planned budgets marked apart\n"
            "  --svg FILE            SVG of peak memory vs step time per strategy\n"
            "  --trace FILE          Chrome-trace JSON of every strategy's measured step\n"
            "  --csv                 print CSV instead of the table\n"
            "  --json                print one JSON object instead of the table\n"
            "  --quiet               no progress output on stderr\n");
}

static void defaults_common(config *c) {
    memset(c, 0, sizeof *c);
    c->model = MODEL_GPT;
    c->seed = 1;
    c->lr = 3e-3;
    c->weight_decay = 0.01;
    c->optim = OPTIM_ADAMW;
    c->accum = 1;
    c->reps = 5;
    strategy_parse("none", false, &c->strat, NULL, 0);
}

/* Model sizes for a model kind (applied after parsing for flags not given). */
static void model_defaults(config *c, bool bench) {
    if (c->model == MODEL_GPT) {
        if (!c->set_layers) c->layers = bench ? 8 : 2;
        if (!c->set_width) c->width = bench ? 128 : 64;
        if (!c->set_heads) c->heads = 4;
        if (!c->set_context) c->context = bench ? 128 : 32;
        if (!c->batch) c->batch = bench ? 8 : 16;
    } else {
        if (!c->set_layers) c->layers = bench ? 32 : 8;
        if (!c->set_width) c->width = bench ? 512 : 128;
        if (!c->set_heads) c->heads = 1;
        if (!c->set_context) c->context = 1;
        if (!c->batch) c->batch = bench ? 256 : 64;
    }
}

void args_defaults_train(config *c) {
    defaults_common(c);
    c->steps = 1000;
    c->eval_every = -1; /* steps / 10 */
}

void args_defaults_bench(config *c) {
    defaults_common(c);
    c->steps = 1;
    const char *def[] = {"none",         "block",      "sequential=2",
                         "sequential=4", "budget=50%", "selective=dots"};
    const int n = (int)(sizeof def / sizeof *def);
    for (int i = 0; i < n; i++) strategy_parse(def[i], false, &c->strategies[i], NULL, 0);
    c->n_strategies = n;
}

/* ---- parsing ---------------------------------------------------------------------- */
typedef enum { A_NONE, A_INT, A_LONG, A_DOUBLE, A_STR } arg_type;

static int fail(const char *cmd, const char *msg, const char *a, const char *b) {
    fprintf(stderr, "remat %s: %s", cmd, msg);
    if (a) fprintf(stderr, " '%s'", a);
    if (b) fprintf(stderr, ": %s", b);
    fprintf(stderr, "\n\n");
    if (strcmp(cmd, "bench") == 0)
        args_usage_bench(stderr);
    else
        args_usage_train(stderr);
    return 2;
}

/* Smallest --context of the built-in addition task: its rows ("a+b=ccc\n")
 * must leave answer tokens to learn, or the loss is a mean over nothing. */
#define ADDITION_MIN_CONTEXT 6

int args_check_model(config *c, bool bench, char *err, size_t n) {
    if (c->model == MODEL_GPT) {
        if (c->width % c->heads != 0) {
            snprintf(err, n, "--heads (%d) must divide --width (%d)", c->heads, c->width);
            return 1;
        }
        if (!c->data && c->context < ADDITION_MIN_CONTEXT) {
            snprintf(err, n, "--context %d is too short for the built-in addition task (at least "
                     "%d, or train on a file with --data)", c->context, ADDITION_MIN_CONTEXT);
            return 1;
        }
    } else {
        if (c->data) {
            snprintf(err, n, "--data needs --model gpt");
            return 1;
        }
        if (c->set_heads || c->set_context || c->set_attention || c->set_untied)
            remat_warn("--heads, --context, --attention and --untied are GPT settings: the MLP "
                       "ignores them");
    }
    if (c->set_momentum && c->optim == OPTIM_ADAMW && c->momentum != 0)
        remat_warn("--momentum is an SGD setting: --optim adamw ignores it");
    /* bench's default list keeps what fits the model; chosen strategies must fit */
    if (bench && c->default_strategies) {
        int w = 0;
        for (int i = 0; i < c->n_strategies; i++)
            if (!(c->strategies[i].kind == STRAT_SEQUENTIAL && c->strategies[i].segments > c->layers))
                c->strategies[w++] = c->strategies[i];
        c->n_strategies = w;
    }
    const strategy *all = bench ? c->strategies : &c->strat;
    int n_tags = 0;
    const char *const *tags = model_tags(c->model, &n_tags);
    char why[400];
    for (int i = 0; i < (bench ? c->n_strategies : 1); i++) {
        /* sequential=N needs at least N blocks (as checkpoint_sequential's chunks) */
        if (all[i].kind == STRAT_SEQUENTIAL && all[i].segments > c->layers) {
            snprintf(err, n, "bad strategy '%s': %d segments but only %d blocks (--layers)",
                     all[i].name, all[i].segments, c->layers);
            return 1;
        }
        /* a misspelt tag would silently save nothing */
        if (!strategy_check_tags(&all[i], n_tags, tags, c->model == MODEL_GPT ? "GPT" : "MLP",
                                 why, sizeof why)) {
            snprintf(err, n, "bad strategy '%s': %s", all[i].name, why);
            return 1;
        }
    }
    return 0;
}

int args_parse(config *c, const char *cmd, int argc, char **argv, int first) {
    bool bench = strcmp(cmd, "bench") == 0;
    const char *strategies_text = NULL, *checkpoint_text = NULL;
    bool reentrant = false, set_batch = false;
    for (int i = first; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            if (bench)
                args_usage_bench(stdout);
            else
                args_usage_train(stdout);
            return -1;
        }
        if (strncmp(arg, "--", 2) != 0) return fail(cmd, "unexpected argument", arg, NULL);
        /* --flag=value or --flag value */
        char name[64];
        const char *eq = strchr(arg, '=');
        size_t nlen = eq ? (size_t)(eq - arg) : strlen(arg);
        if (nlen >= sizeof name) return fail(cmd, "unknown option", arg, NULL);
        memcpy(name, arg, nlen);
        name[nlen] = '\0';

        /* --sweep-budgets[=N] (alias --pareto): a value only with '=' */
        if (bench && (!strcmp(name, "--sweep-budgets") || !strcmp(name, "--pareto"))) {
            long n = 8;
            if (eq && !util_parse_long(eq + 1, 2, 32, &n))
                return fail(cmd, "bad value for", name, "expected an integer in [2, 32]");
            c->sweep = (int)n;
            continue;
        }
        /* flags without a value */
        bool *flag = NULL;
        if (!strcmp(name, "--json")) flag = &c->json;
        else if (!strcmp(name, "--quiet")) flag = &c->quiet;
        else if (!strcmp(name, "--untied")) { flag = &c->untied; c->set_untied = true; }
        else if (!strcmp(name, "--reentrant")) flag = &reentrant;
        else if (!strcmp(name, "--verbose")) flag = &c->verbose;
        else if (!bench && !strcmp(name, "--report")) flag = &c->report;
        else if (!bench && !strcmp(name, "--zero")) flag = &c->zero;
        else if (bench && !strcmp(name, "--csv")) flag = &c->csv;
        if (flag) {
            if (eq) return fail(cmd, "option takes no value", arg, NULL);
            *flag = true;
            continue;
        }

        /* flags with a value */
        const char *val = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        long lv = 0;
        double dv = 0;
#define NEED_VAL() \
    if (!val) return fail(cmd, "missing value for", name, NULL)
#define INT_ARG(field, lo, hi, setflag)                                                   \
    do {                                                                                  \
        NEED_VAL();                                                                       \
        if (!util_parse_long(val, lo, hi, &lv))                                           \
            return fail(cmd, "bad value for", name, "expected an integer in [" #lo ", " #hi "]"); \
        c->field = (int)lv;                                                               \
        setflag;                                                                          \
    } while (0)
        if (!strcmp(name, "--model")) {
            NEED_VAL();
            if (!strcmp(val, "gpt")) c->model = MODEL_GPT;
            else if (!strcmp(val, "mlp")) c->model = MODEL_MLP;
            else return fail(cmd, "bad value for --model", val, "expected gpt or mlp");
            c->set_model = true;
        } else if (!strcmp(name, "--attention")) {
            NEED_VAL();
            if (!strcmp(val, "fused")) c->attn_ops = false;
            else if (!strcmp(val, "ops")) c->attn_ops = true;
            else return fail(cmd, "bad value for --attention", val, "expected fused or ops");
            c->set_attention = true;
        } else if (!strcmp(name, "--layers")) {
            INT_ARG(layers, 1, ARGS_MAX_LAYERS, c->set_layers = true);
        } else if (!strcmp(name, "--width")) {
            INT_ARG(width, 1, ARGS_MAX_WIDTH, c->set_width = true);
        } else if (!strcmp(name, "--heads")) {
            INT_ARG(heads, 1, ARGS_MAX_HEADS, c->set_heads = true);
        } else if (!strcmp(name, "--context")) {
            INT_ARG(context, 1, ARGS_MAX_CONTEXT, c->set_context = true);
        } else if (!strcmp(name, "--batch")) {
            INT_ARG(batch, 1, ARGS_MAX_BATCH, set_batch = c->set_batch = true);
        } else if (!strcmp(name, "--threads")) {
            INT_ARG(threads, 1, 1024, (void)0);
            long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
            int max_threads = ncpu > 0 && ncpu < 256 ? 4 * (int)ncpu : 1024;
            if (c->threads > max_threads) { /* the OpenMP runtime may exit the process */
                char why[96];
                snprintf(why, sizeof why, "at most %d (4 per online cpu)", max_threads);
                return fail(cmd, "bad value for", name, why);
            }
        } else if (!strcmp(name, "--reps") && bench) {
            INT_ARG(reps, 1, 1000, c->set_reps = true);
        } else if (!strcmp(name, "--steps") && !bench) {
            NEED_VAL();
            if (!util_parse_long(val, 0, 1000000000L, &lv))
                return fail(cmd, "bad value for", name, "expected an integer >= 0");
            c->steps = lv;
        } else if (!strcmp(name, "--eval-every") && !bench) {
            NEED_VAL();
            if (!util_parse_long(val, 0, 1000000000L, &lv))
                return fail(cmd, "bad value for", name, "expected an integer >= 0");
            c->eval_every = lv;
        } else if (!strcmp(name, "--seed")) {
            NEED_VAL();
            if (!util_parse_long(val, 0, 0x7fffffffffffffffL, &lv))
                return fail(cmd, "bad value for", name, "expected an integer >= 0");
            c->seed = (uint64_t)lv;
            c->set_seed = true;
        } else if (!strcmp(name, "--lr") || !strcmp(name, "--weight-decay") ||
                   !strcmp(name, "--momentum")) {
            NEED_VAL();
            if (!util_parse_double(val, &dv) || dv < 0)
                return fail(cmd, "bad value for", name, "expected a number >= 0");
            if (!strcmp(name, "--lr")) {
                c->lr = dv;
                c->set_lr = true;
            }
            else if (!strcmp(name, "--weight-decay")) {
                c->weight_decay = dv;
                c->set_weight_decay = true;
            } else {
                c->momentum = dv;
                c->set_momentum = true;
            }
        } else if ((!strcmp(name, "--min-lr") || !strcmp(name, "--clip")) && !bench) {
            NEED_VAL();
            if (!util_parse_double(val, &dv) || dv < 0)
                return fail(cmd, "bad value for", name, "expected a number >= 0");
            *(!strcmp(name, "--clip") ? &c->clip : &c->min_lr) = dv;
        } else if (!strcmp(name, "--save-every") && !bench) {
            NEED_VAL();
            if (!util_parse_long(val, 0, 1000000000L, &lv))
                return fail(cmd, "bad value for", name, "expected an integer >= 0");
            c->save_every = lv;
        } else if (!strcmp(name, "--log") && !bench) {
            NEED_VAL();
            c->log = val;
        } else if (!strcmp(name, "--warmup") && !bench) {
            NEED_VAL();
            if (!util_parse_long(val, 0, 1000000000L, &lv))
                return fail(cmd, "bad value for", name, "expected an integer >= 0");
            c->warmup = lv;
        } else if (!strcmp(name, "--accum") && !bench) {
            INT_ARG(accum, 1, 1 << 20, (void)0);
        } else if (!strcmp(name, "--lr-schedule") && !bench) {
            NEED_VAL();
            if (!strcmp(val, "constant")) c->cosine = false;
            else if (!strcmp(val, "cosine")) c->cosine = true;
            else return fail(cmd, "bad value for --lr-schedule", val, "expected constant or cosine");
        } else if (!strcmp(name, "--optim") && !bench) {
            NEED_VAL();
            if (!strcmp(val, "adamw")) c->optim = OPTIM_ADAMW;
            else if (!strcmp(val, "sgd")) c->optim = OPTIM_SGD;
            else return fail(cmd, "bad value for --optim", val, "expected adamw or sgd");
            c->set_optim = true;
        } else if (!strcmp(name, "--checkpoint")) {
            NEED_VAL();
            checkpoint_text = val;
        } else if (!strcmp(name, "--strategies") && bench) {
            NEED_VAL();
            strategies_text = val;
        } else if (!strcmp(name, "--data") && !bench) {
            NEED_VAL();
            c->data = val;
        } else if (!strcmp(name, "--dist-timeout") || !strcmp(name, "--bucket-size")) {
            NEED_VAL();
            if (!util_parse_double(val, &dv) || !(dv > 0) || dv > 1e9)
                return fail(cmd, "bad value for", name, "expected a number > 0");
            if (name[2] == 'd') c->dist_timeout = dv;
            else c->bucket_mib = dv;
        } else if (!strcmp(name, "--save") && !bench) {
            NEED_VAL();
            c->save = val;
        } else if (!strcmp(name, "--resume") && !bench) {
            NEED_VAL();
            c->resume = val;
        } else if (!strcmp(name, "--trace")) {
            NEED_VAL();
            c->trace = val;
        } else if (!strcmp(name, "--timeline") && !bench) {
            NEED_VAL();
            c->timeline = val;
        } else if (!strcmp(name, "--svg") && bench) {
            NEED_VAL();
            c->svg = val;
        } else if (!strcmp(name, "--svg-pareto") && bench) {
            NEED_VAL();
            c->svg_pareto = val;
        } else if (!strcmp(name, "--out") && bench) {
            NEED_VAL();
            c->out_dir = val;
        } else {
            return fail(cmd, "unknown option", arg, NULL);
        }
#undef INT_ARG
#undef NEED_VAL
    }
    if (!set_batch) c->batch = 0;
    model_defaults(c, bench);
    if (c->eval_every < 0) c->eval_every = c->steps >= 10 ? c->steps / 10 : 0;

    char err[512];
    if (checkpoint_text) {
        if (!strategy_parse(checkpoint_text, reentrant, &c->strat, err, sizeof err))
            return fail(cmd, "bad value for --checkpoint", checkpoint_text, err);
        if (c->strat.kind == STRAT_BUDGET && reentrant)
            return fail(cmd, "--reentrant does not combine with", checkpoint_text,
                        "the planner's schedules are nested non-reentrant checkpoints");
        if (c->strat.kind == STRAT_SELECTIVE && reentrant)
            return fail(cmd, "--reentrant does not combine with", checkpoint_text,
                        "selective checkpointing runs in non-reentrant checkpoints (as in "
                        "PyTorch, context_fn needs use_reentrant=False)");
    } else {
        strategy_parse("none", reentrant, &c->strat, NULL, 0);
    }
    if (bench) {
        if (strategies_text && checkpoint_text)
            return fail(cmd, "give --strategies or --checkpoint, not both", NULL, NULL);
        if (checkpoint_text) {
            /* bench --checkpoint S: compare S with none */
            strategy_parse("none", reentrant, &c->strategies[0], NULL, 0);
            c->strategies[1] = c->strat;
            c->n_strategies = c->strat.kind == STRAT_NONE ? 1 : 2;
        } else if (strategies_text) {
            char buf[1024];
            if (strlen(strategies_text) >= sizeof buf)
                return fail(cmd, "bad value for --strategies", "(too long)", NULL);
            strcpy(buf, strategies_text);
            c->n_strategies = 0;
            char *save = NULL;
            for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                if (c->n_strategies == ARGS_MAX_LISTED)
                    return fail(cmd, "too many strategies (at most 16)", NULL, NULL);
                if (!strategy_parse(tok, reentrant, &c->strategies[c->n_strategies], err,
                                    sizeof err)) {
                    /* "selective=names:qkv,attn_out": the comma ended the strategy */
                    const strategy *prev =
                        c->n_strategies ? &c->strategies[c->n_strategies - 1] : NULL;
                    if (prev && prev->kind == STRAT_SELECTIVE && prev->n_sac_names > 0)
                        snprintf(err, sizeof err,
                                 "not a strategy (commas separate strategies: join the tag "
                                 "names of one policy with '+', e.g. %s+%s)",
                                 prev->name, tok);
                    return fail(cmd, "bad strategy", tok, err);
                }
                c->n_strategies++;
            }
            if (c->n_strategies == 0)
                return fail(cmd, "bad value for --strategies", strategies_text, "empty list");
        } else if (!c->sweep) {
            /* budget= and selective= entries stay non-reentrant (their checkpoints need it) */
            for (int i = 0; i < c->n_strategies; i++)
                if (c->strategies[i].kind == STRAT_BLOCK || c->strategies[i].kind == STRAT_SEQUENTIAL)
                    c->strategies[i].reentrant = reentrant;
            c->default_strategies = true;
        } else {
            /* the sweep builds its own list (cmd_bench adds none, sequential=2..L and
             * the budgets once the blocks are profiled) */
            c->n_strategies = 0;
        }
        if (c->sweep && !c->set_reps) c->reps = 3;
        for (int i = 0; i < c->n_strategies; i++) {
            strategy_name(&c->strategies[i]);
            if (!strategy_available(&c->strategies[i], err, sizeof err))
                return fail(cmd, "strategy not available", c->strategies[i].name, err);
        }
    } else if (!strategy_available(&c->strat, err, sizeof err)) {
        return fail(cmd, "strategy not available", c->strat.name, err);
    }

    /* on --resume the model comes from the file: train checks it after reading
     * the header (savefile_merge_config) */
    if (!c->resume && args_check_model(c, bench, err, sizeof err)) return fail(cmd, err, NULL, NULL);
    if (c->optim == OPTIM_SGD && !c->set_lr) c->lr = 0.1;
    if (!bench && c->save_every > 0 && !c->save)
        return fail(cmd, "--save-every needs --save FILE", NULL, NULL);
    if (!bench && c->cosine && c->steps > 0 && c->warmup >= c->steps)
        return fail(cmd, "--warmup must be below --steps with --lr-schedule cosine", NULL, NULL);
    return 0;
}
