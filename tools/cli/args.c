/* tools/cli/args.c — the flags of the remat program (one table: parsing and usage
 * text), their defaults, and the checks that span several flags. */
#include "args.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/hf_dir.h"
#include "options.h"
#include "train/models.h"
#include "train/strategy.h"
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
            "  sample  generate text from a GPT saved by `remat train --save FILE`, or\n"
            "          from a Hugging Face model (--init-from DIR)\n"
            "  eval    the loss of a Hugging Face model on a text (--init-from DIR)\n"
            "  tokenize  encode a text file with a Hugging Face tokenizer.json into an\n"
            "          llm.c token file (remat tokenize --help)\n"
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
            "  remat sample --resume run.bin --prompt \"## \" --tokens 200 --top-k 8\n"
            "  remat train --init-from gpt2 --data notes.txt --context 256 --export ft\n"
            "  remat eval --init-from ft --data notes.txt --context 256\n"
            "  remat sample --init-from ft --prompt \"Once\" --tokens 50 --temperature 0\n"
            "  remat bench --model mlp --strategies none,block,sequential=4 --svg mlp.svg\n"
            "  remat train --checkpoint budget=200MiB --layers 8 --width 128 --context 128\n"
            "  remat train --checkpoint selective=names:qkv+attn_out --report --steps 20\n"
            "  remat bench --strategies none,block,selective=dots,selective=names:qkv+mlp_up\n"
            "  remat bench --sweep-budgets            planner vs uniform segments, out/pareto.svg\n"
            "\n"
            "  remat --help | remat train --help | remat bench --help | remat sample --help\n"
            "  remat eval --help\n"
            "  docs/cli.md has the details (what is measured and how).\n");
}

/* ---- the flags ------------------------------------------------------------------- */
enum {
    SEC_HF,
    SEC_MODEL,
    SEC_CKPT,
    SEC_DIST,
    SEC_TRAIN,
    SEC_OUTPUT,
    SEC_BENCH,
    SEC_SAMPLE,
    N_SECTIONS
};

static const opt_section sections[N_SECTIONS] = {
    [SEC_HF] = {"Hugging Face models (docs/cli.md):", NULL},
    [SEC_MODEL] = {"model:", NULL},
    [SEC_CKPT] = {"checkpointing:", NULL},
    [SEC_DIST] = {"data parallelism (mpirun -np N remat ...; docs/dist.md):",
                  "  --batch is per rank; rank r takes rows [r*batch, (r+1)*batch) of each step's\n"
                  "  global batch; rank 0 prints and writes files; as root, Open MPI wants\n"
                  "  mpirun --allow-run-as-root\n"},
    [SEC_TRAIN] = {"training:", NULL},
    [SEC_OUTPUT] = {"output:", NULL},
    [SEC_BENCH] = {"bench:", NULL},
    [SEC_SAMPLE] = {"sampling:", NULL},
};

#define T(field) OPT_TARGET(config, field)
#define SETS(field) OPT_SETS(config, field)
#define TB (CMD_TRAIN | CMD_BENCH)
#define TE (CMD_TRAIN | CMD_EVAL)
#define BIG 1000000000.0

static const opt_row rows[] = {
    /* Hugging Face models */
    {"--init-from", "DIR", OPT_STR, TB | CMD_SAMPLE | CMD_EVAL, SEC_HF, T(init_from),
     .help = "a Hugging Face GPT-2 or Llama directory (config.json,\n"
             "model.safetensors, tokenizer.json): train fine-tunes it,\n"
             "bench measures it (on --data), sample and eval run it"},
    {"--export", "DIR", OPT_STR, CMD_TRAIN, SEC_HF, T(export_dir),
     .help = "train --init-from: write the trained model as a Hugging\n"
             "Face directory (config.json, model.safetensors and the\n"
             "tokenizer files) at the end"},
    /* model */
    {"--model", "gpt|mlp|llama", OPT_CHOICE, TB, SEC_MODEL, T(model), SETS(set_model),
     .choices = "gpt|mlp|llama",
     .help = "GPT (byte-level, causal attention), deep MLP, or\n"
             "Llama (byte-level: RMSNorm, RoPE, SwiGLU MLP of\n"
             "width 8/3 x --width rounded up to 64, untied head)",
     .dflt = "[gpt]"},
    {"--layers", "N", OPT_INT, TB, SEC_MODEL, T(layers), SETS(set_layers), 1, ARGS_MAX_LAYERS,
     .help = "number of blocks"},
    {"--width", "N", OPT_INT, TB, SEC_MODEL, T(width), SETS(set_width), 1, ARGS_MAX_WIDTH,
     .help = "model width (GPT, Llama: embedding size, MLP: hidden\nsize)"},
    {"--heads", "N", OPT_INT, TB, SEC_MODEL, T(heads), SETS(set_heads), 1, ARGS_MAX_HEADS,
     .help = "GPT and Llama attention heads (must divide --width)"},
    {"--context", "N", OPT_INT, TB | CMD_EVAL, SEC_MODEL, T(context), SETS(set_context), 1,
     ARGS_MAX_CONTEXT,
     .help = "GPT context length in bytes (--init-from: in tokens,\n"
             "[128] for train, eval: the model's positions)"},
    {"--batch", "N", OPT_INT, TB | CMD_EVAL, SEC_MODEL, T(batch), SETS(set_batch), 1,
     ARGS_MAX_BATCH,
     .help = "sequences (GPT) or samples (MLP) per step (eval: [8]\nwindows per forward)"},
    {"--untied", NULL, OPT_FLAG, TB, SEC_MODEL, T(untied), SETS(set_untied),
     .help = "GPT: separate output head (default: tied to the\nembedding)"},
    {"--attention", "K", OPT_CHOICE, TB, SEC_MODEL, T(attn_ops), SETS(set_attention),
     .choices = "fused|ops",
     .help = "GPT attention: fused (remat_attention: causal blocks\n"
             "skipped, no (T, T) matrix kept) or ops (matmul, scale,\n"
             "masked_fill, softmax, matmul, as in PyTorch 1.13)",
     .dflt = "[fused]"},
    {"--autocast", "off|bf16", OPT_CHOICE, TB | CMD_EVAL, SEC_MODEL, T(autocast),
     SETS(set_autocast), .choices = "off|bf16",
     .help = "bf16 mixed precision (as torch.autocast('cpu',\n"
             "bfloat16)): matmul, linear and attention in bf16 with\n"
             "f32 accumulation, norms, softmax and the loss in f32;\n"
             "f32 parameters and optimizer (docs/autocast.md)",
     .dflt = "[off]"},
    {"--seed", "N", OPT_U64, TB, SEC_MODEL, T(seed), SETS(set_seed), 0, 9e18,
     .help = "seed of the initialisation and of the data", .dflt = "[1]"},
    {"--threads", "N", OPT_INT, TB | CMD_EVAL, SEC_MODEL, T(threads), .lo = 1, .hi = 1024,
     .help = "OpenMP/BLAS threads (default: all cores)"},
    {"--device", "D", OPT_STR, TB | CMD_EVAL, SEC_MODEL, T(device_text),
     .help = "where the model trains: cpu, or cuda[:N] (GPU N;\ndocs/cuda.md)", .dflt = "[cpu]"},
    /* checkpointing */
    {"--checkpoint", "S", OPT_STR, TB, SEC_CKPT, T(checkpoint_text),
     .help = "none | block | sequential=N | selective[=POLICY] |\n"
             "budget=SIZE[:blocks-only|:whole-blocks|:halves] |\n"
             "blocks-budget=SIZE.\n"
             "block: every block checkpointed;\n"
             "sequential=N: the blocks split into N segments\n"
             "(checkpoint_sequential);\n"
             "budget=SIZE: the planner's fastest schedule whose\n"
             "predicted peak of the whole step (parameters, grads,\n"
             "optimizer state, activations) fits SIZE: 500000\n"
             "(bytes), 64K, 200MiB, 1.5GiB, 2GB (powers of 1024), or\n"
             "P% with 0 < P <= 100: that share of the step's peak\n"
             "without checkpointing (budget=40%); it keeps or\n"
             "recomputes each op of each block; below the smallest\n"
             "such plan it runs the last blocks as two halves\n"
             "(attention, MLP) each;\n"
             "budget=SIZE:halves: halves tried at any SIZE;\n"
             "budget=SIZE:whole-blocks: per op, never in halves;\n"
             "budget=SIZE:blocks-only: whole blocks only;\n"
             "blocks-budget=SIZE: whole blocks, SIZE bounding only\n"
             "what they add (P%: of what they add without\n"
             "checkpointing);\n"
             "selective=POLICY: every block checkpointed, but the\n"
             "policy's op outputs are kept from the forward:\n"
             "  dots          matmul/linear outputs (the default)\n"
             "  names:A+B     only the tensors tagged A, B\n"
             "  all-but:A+B   every tagged tensor but A, B\n"
             "  except:A+B    every op's output but A's and B's\n"
             "  nothing       nothing (= block)\n"
             "  everything    everything (no recomputation)\n"
             "tags: GPT qkv, attn, attn_probs (--attention ops),\n"
             "attn_out, mlp_up, mlp_act, mlp_out; MLP linear, gelu"},
    {"--reentrant", NULL, OPT_FLAG, TB, SEC_CKPT, T(reentrant), SETS(set_reentrant),
     .help = "use reentrant checkpointing (default: non-reentrant;\n"
             "not for budget= and selective=, which are non-reentrant)"},
    {"--verbose", NULL, OPT_FLAG, TB, SEC_CKPT, T(verbose),
     .help = "print the planner's profile of the blocks and its plans"},
    {"--plan-offload", NULL, OPT_FLAG, TB, SEC_CKPT, T(plan_offload),
     .help = "budget=: the planner may also offload ops' outputs\n"
             "to host memory and back (cuda; nothing is offloadable\n"
             "on cpu); default: keep or recompute"},
    {"--plan-lossy", NULL, OPT_FLAG, TB, SEC_CKPT, T(plan_lossy),
     .help = "budget=: the planner may also keep ops' f32 outputs\n"
             "as bf16 until the recomputation (half the bytes, for\n"
             "two conversions; cpu). LOSSY: gradients are no longer\n"
             "bitwise those of none; default: exact plans only"},
    {"--explain", NULL, OPT_FLAG, CMD_TRAIN, SEC_CKPT, T(explain),
     .help = "budget=: per block, the ops the plan keeps and\n"
             "recomputes, predicted and measured peak and time"},
    /* data parallelism */
    {"--dist-timeout", "S", OPT_POSNUM, TB, SEC_DIST, T(dist_timeout), .lo = 0, .hi = BIG,
     .help = "a rank that fails or stops answering ends the job\nwithin S seconds, naming it",
     .dflt = "[60]"},
    {"--bucket-size", "MIB", OPT_POSNUM, TB, SEC_DIST, T(bucket_mib), .lo = 0, .hi = BIG,
     .help = "gradient all-reduce bucket size", .dflt = "[25]"},
    {"--zero", NULL, OPT_FLAG, CMD_TRAIN, SEC_DIST, T(zero),
     .help = "train: ZeRO-1, AdamW state sharded across the ranks\n"
             "(1/N per rank; rank 0 saves the whole state)"},
    /* training */
    {"--steps", "N", OPT_LONG, CMD_TRAIN, SEC_TRAIN, T(steps), .lo = 0, .hi = BIG,
     .help = "total optimizer steps (also with --resume)", .dflt = "[1000]"},
    {"--lr", "X", OPT_NUM, CMD_TRAIN, SEC_TRAIN, T(lr), SETS(set_lr), 0, HUGE_VAL,
     .help = "learning rate", .dflt = "[3e-3]"},
    {"--optim", "adamw|sgd", OPT_CHOICE, CMD_TRAIN, SEC_TRAIN, T(optim), SETS(set_optim),
     .choices = "adamw|sgd", .help = "optimizer", .dflt = "[adamw]"},
    {"--weight-decay", "X", OPT_NUM, CMD_TRAIN, SEC_TRAIN, T(weight_decay), SETS(set_weight_decay),
     0, HUGE_VAL, .help = "AdamW decoupled weight decay of matrices", .dflt = "[0.01]"},
    {"--momentum", "X", OPT_NUM, CMD_TRAIN, SEC_TRAIN, T(momentum), SETS(set_momentum), 0, HUGE_VAL,
     .help = "SGD momentum", .dflt = "[0]"},
    {"--lr-schedule", "S", OPT_CHOICE, CMD_TRAIN, SEC_TRAIN, T(cosine), SETS(set_schedule),
     .choices = "constant|cosine",
     .help = "constant, or cosine: linear warm-up over --warmup\nsteps to --lr, then cosine decay "
             "to --min-lr",
     .dflt = "[constant]"},
    {"--warmup", "N", OPT_LONG, CMD_TRAIN, SEC_TRAIN, T(warmup), SETS(set_warmup), 0, BIG,
     .help = "warm-up steps of the cosine schedule", .dflt = "[0]"},
    {"--min-lr", "X", OPT_NUM, CMD_TRAIN, SEC_TRAIN, T(min_lr), SETS(set_min_lr), 0, HUGE_VAL,
     .help = "where the cosine schedule ends", .dflt = "[0]"},
    {"--clip", "X", OPT_NUM, CMD_TRAIN, SEC_TRAIN, T(clip), SETS(set_clip), 0, HUGE_VAL,
     .help = "clip the gradients' global L2 norm to X (0: off)", .dflt = "[0]"},
    {"--accum", "N", OPT_INT, CMD_TRAIN, SEC_TRAIN, T(accum), SETS(set_accum), 1, 1 << 20,
     .help = "accumulate the gradients of N micro-batches (each\n--batch big) per optimizer step",
     .dflt = "[1]"},
    {"--data", "FILE", OPT_STR, TE | CMD_BENCH, SEC_TRAIN, T(data),
     .help = "train a byte-level GPT on any text file (--init-from:\n"
             "a text, tokenized with the model's tokenizer, or a\n"
             "token file of remat tokenize)"},
    {"--eval-every", "N", OPT_LONG, CMD_TRAIN, SEC_TRAIN, T(eval_every), .lo = 0, .hi = BIG,
     .help = "evaluate on held-out data every N steps\n(0: only at the end)",
     .dflt = "[--steps / 10]"},
    {"--save", "FILE", OPT_STR, CMD_TRAIN, SEC_TRAIN, T(save),
     .help = "write model + optimizer + RNG + step at the end, and\n"
             "on SIGINT/SIGTERM (the step finishes, the file is\n"
             "written, remat exits with 130/143 and says how to\n"
             "resume; a second one while saving stops at once)"},
    {"--save-every", "N", OPT_LONG, CMD_TRAIN, SEC_TRAIN, T(save_every), SETS(set_save_every),
     .lo = 0, .hi = BIG, .help = "also write --save every N steps", .dflt = "[0]"},
    {"--resume", "FILE", OPT_STR, CMD_TRAIN, SEC_TRAIN, T(resume),
     .help = "continue from a file written by --save"},
    /* output (train) */
    {"--json", NULL, OPT_FLAG, CMD_TRAIN, SEC_OUTPUT, T(json),
     .help = "print one JSON object at the end (step_ms, tokens_per_s,\n"
             "peak_alloc_bytes, peak_rss_bytes, loss, strategy, ...)"},
    {"--json", NULL, OPT_FLAG, CMD_EVAL, SEC_OUTPUT, T(json),
     .help = "print one JSON object (loss, tokens, perplexity, ...)"},
    {"--trace", "FILE", OPT_STR, CMD_TRAIN, SEC_OUTPUT, T(trace),
     .help = "Chrome-trace JSON of the allocator during the last step\n"
             "(open in chrome://tracing or ui.perfetto.dev)"},
    {"--timeline", "FILE", OPT_STR, CMD_TRAIN, SEC_OUTPUT, T(timeline),
     .help = "SVG plot of memory over time during the last step"},
    {"--report", NULL, OPT_FLAG, CMD_TRAIN, SEC_OUTPUT, T(report),
     .help = "print the residual report of the first step: every\n"
             "tensor saved for backward (op, name, shape, bytes),\n"
             "per-op totals and the total; with --json on stderr"},
    {"--log", "FILE", OPT_STR, CMD_TRAIN, SEC_OUTPUT, T(log),
     .help = "one JSON line per step (step, loss, lr, step_ms,\n"
             "peak_bytes) and per evaluation (eval_loss, ...)"},
    {"--quiet", NULL, OPT_FLAG, CMD_TRAIN, SEC_OUTPUT, T(quiet), .help = "no progress output"},
    {"--progress", NULL, OPT_FLAG, CMD_TRAIN, SEC_OUTPUT, T(progress),
     .help = "draw the progress bar (redrawn in place, as wide as\n"
             "$COLUMNS or the terminal, with an ETA) even when stderr\n"
             "is no terminal; without it, only on a terminal; never\n"
             "with --json or --quiet (--json: a line per 5% of steps)"},
    /* bench */
    {"--strategies", "LIST", OPT_STR, CMD_BENCH, SEC_BENCH, T(strategies_text),
     .help = "comma-separated strategies; tag names inside one are\n"
             "joined by '+': none,selective=names:qkv+attn_out,block",
     .dflt = "[none,block,sequential=2,sequential=4,budget=50%,selective=dots]"},
    {"--reps", "N", OPT_INT, CMD_BENCH, SEC_BENCH, T(reps), SETS(set_reps), 1, 1000,
     .help = "timed repetitions per strategy", .dflt = "[5]"},
    {"--out", "DIR", OPT_STR, CMD_BENCH, SEC_BENCH, T(out_dir),
     .help = "write tradeoff.svg, timeline.svg and trace.json into\n"
             "DIR (and pareto.svg when a budget= strategy ran;\n"
             "default of `remat` with no command: ./out)"},
    {"--sweep-budgets", "N", OPT_OPTINT, CMD_BENCH, SEC_BENCH, T(sweep), .lo = 2, .hi = 32,
     .bare = 8,
     .help = "(or --pareto) sweep the planner: none, sequential=2..L\n"
             "and N budgets from the planner's minimum to the\n"
             "un-checkpointed peak, each per op (budget=) and by\n"
             "whole blocks (:blocks-only) [N=8; --reps defaults to 3];\n"
             "draws the Pareto curve, time vs peak, to\n"
             "DIR/pareto.svg or ./out/pareto.svg"},
    {"--pareto", "N", OPT_OPTINT, CMD_BENCH, SEC_BENCH, T(sweep), .lo = 2, .hi = 32, .bare = 8},
    {"--svg-pareto", "FILE", OPT_STR, CMD_BENCH, SEC_BENCH, T(svg_pareto),
     .help = "SVG of step time vs peak memory, uniform segments and\nplanned budgets marked apart"},
    {"--svg", "FILE", OPT_STR, CMD_BENCH, SEC_BENCH, T(svg),
     .help = "SVG of peak memory vs step time per strategy"},
    {"--trace", "FILE", OPT_STR, CMD_BENCH, SEC_BENCH, T(trace),
     .help = "Chrome-trace JSON of every strategy's measured step"},
    {"--profile", "N", OPT_OPTINT, CMD_BENCH, SEC_BENCH, T(profile), .lo = 1, .hi = 1000, .bare = 3,
     .help = "after the timings, N more steps per strategy [N=3] with\n"
             "every kernel timed (a GPU's by its events): a table per\n"
             "strategy by op, kernel and phase (forward, backward,\n"
             "recompute), with GB/s, TFLOP/s and the ratio to the\n"
             "floor (bytes at the measured copy rate, FLOPs at the\n"
             "measured GEMM rate); --json carries every row"},
    {"--csv", NULL, OPT_FLAG, CMD_BENCH, SEC_BENCH, T(csv),
     .help = "print CSV instead of the table"},
    {"--json", NULL, OPT_FLAG, CMD_BENCH, SEC_BENCH, T(json),
     .help = "print one JSON object instead of the table"},
    {"--quiet", NULL, OPT_FLAG, CMD_BENCH, SEC_BENCH, T(quiet),
     .help = "no progress output on stderr"},
    /* sample */
    {"--resume", "FILE", OPT_STR, CMD_SAMPLE, SEC_SAMPLE, T(resume),
     .help = "the GPT to sample from: a file written by train --save\n(or --init-from DIR)"},
    {"--prompt", "TEXT", OPT_STR, CMD_SAMPLE, SEC_SAMPLE, T(prompt),
     .help = "the text the generation continues (empty: a newline)"},
    {"--tokens", "N", OPT_LONG, CMD_SAMPLE, SEC_SAMPLE, T(tokens), .lo = 0, .hi = 1000000,
     .help = "bytes (--init-from: tokens) to generate; a Hugging Face\n"
             "model also stops at its end-of-sequence token",
     .dflt = "[200]"},
    {"--temperature", "T", OPT_NUM, CMD_SAMPLE, SEC_SAMPLE, T(temperature), .lo = 0, .hi = 100,
     .help = "divides the logits; 0: always the likeliest token\n(greedy)", .dflt = "[1]"},
    {"--top-k", "K", OPT_INT, CMD_SAMPLE, SEC_SAMPLE, T(top_k), .lo = 0, .hi = 1 << 30,
     .help = "sample among the K likeliest tokens (0: all)", .dflt = "[0]"},
    {"--seed", "N", OPT_U64, CMD_SAMPLE, SEC_SAMPLE, T(seed), SETS(set_seed), 0, 9e18,
     .help = "seed of the sampling (same seed, same text)", .dflt = "[1]"},
    {"--threads", "N", OPT_INT, CMD_SAMPLE, SEC_SAMPLE, T(threads), .lo = 1, .hi = 1024,
     .help = "OpenMP/BLAS threads (default: all cores)"},
    {"--device", "D", OPT_STR, CMD_SAMPLE, SEC_SAMPLE, T(device_text),
     .help = "--init-from: cpu, or cuda[:N]", .dflt = "[cpu]"},
    {"--json", NULL, OPT_FLAG, CMD_SAMPLE, SEC_SAMPLE, T(json),
     .help = "print one JSON object (prompt, text, tokens, seed, ...);\n"
             "bytes outside ASCII are \\u00XX, one per byte"},
};
#undef T
#undef SETS

static const opt_table table = {rows, (int)(sizeof rows / sizeof *rows), sections, N_SECTIONS};

/* ---- usage ------------------------------------------------------------------------- */
static const char *const cmd_names[] = {"train", "bench", "sample", "eval"};

/* What each command does, above its flags. */
static const char *const cmd_intro[] = {
    "Trains a model and reports loss, accuracy on held-out examples, tokens/s and\n"
    "peak memory. The built-in task (no --data) is two-digit addition, \"12+34=46\":\n"
    "the loss is taken on the answer bytes, accuracy is per answer byte and per\n"
    "problem (greedy decoding). --model mlp regresses a fixed smooth function.\n",
    "Runs one forward+backward step of the same model (same seed, same batch) under\n"
    "each strategy, interleaved over several repetitions, and prints medians: step\n"
    "time, allocator peak, RSS growth, recompute overhead (time / time of `none`),\n"
    "and whether every parameter gradient equals the un-checkpointed one bitwise.\n",
    "Generates text from a GPT trained by `remat train --save FILE`: the model reads\n"
    "the prompt (its last --context bytes), one byte is drawn from the softmax of\n"
    "its logits (divided by --temperature, limited to the --top-k likeliest), and\n"
    "so on for --tokens bytes. Prints the prompt and what follows it. The draws\n"
    "come from remat's random generator: the same file, flags and --seed give the\n"
    "same text.\n"
    "With --init-from DIR (a Hugging Face GPT-2 or Llama), the prompt is encoded with\n"
    "DIR's tokenizer and --tokens tokens follow, run with a KV cache; --json ends\n"
    "with one JSON object: ids (the generated ids), text, tokens_per_s, ...\n",
    "Evaluates a Hugging Face GPT-2 or Llama (--init-from DIR) on --data FILE (a\n"
    "text, tokenized with DIR's tokenizer, or a token file of remat tokenize): the\n"
    "mean next-token cross-entropy over the windows of T + 1 tokens (T: --context)\n"
    "at token 0, T, 2T, ... while one fits (the first T in, the last T predicted).\n"
    "--json ends with one JSON object: loss, tokens (predicted), perplexity, ...\n",
};

static int cmd_index(command cmd) {
    return cmd == CMD_TRAIN ? 0 : cmd == CMD_BENCH ? 1 : cmd == CMD_SAMPLE ? 2 : 3;
}

void args_usage(command cmd, FILE *f) {
    int i = cmd_index(cmd);
    fprintf(f, "usage: remat %s [FLAGS]\n\n%s\n", cmd_names[i], cmd_intro[i]);
    opt_usage(&table, cmd, f);
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
    if (c->model == MODEL_HF) {                /* the rest comes from the directory's config.json */
        if (!c->set_context) c->context = 128; /* or the model's positions, if fewer */
        if (!c->batch) c->batch = 8;
    } else if (c->model == MODEL_GPT || c->model == MODEL_LLAMA) {
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

/* Smallest --context of the built-in addition task: its rows ("a+b=ccc\n")
 * must leave answer tokens to learn, or the loss is a mean over nothing. */
#define ADDITION_MIN_CONTEXT 6

/* Every strategy of all (n_all) fits the model: enough blocks for sequential=N, tags the
 * model has (a misspelt one would silently save nothing). */
static int check_strategies(const config *c, const strategy *all, int n_all, int n_tags,
                            const char *const *tags, char *err, size_t n) {
    char why[400];
    for (int i = 0; i < n_all; i++) {
        /* sequential=N needs at least N blocks (as checkpoint_sequential's chunks) */
        if (all[i].kind == STRAT_SEQUENTIAL && all[i].segments > c->layers) {
            snprintf(err, n, "bad strategy '%s': %d segments but only %d blocks (--layers)",
                     all[i].name, all[i].segments, c->layers);
            return 1;
        }
        /* a misspelt tag would silently save nothing */
        if (!strategy_check_tags(&all[i], n_tags, tags,
                                 c->model == MODEL_GPT                            ? "GPT"
                                 : c->model == MODEL_MLP                          ? "MLP"
                                 : c->model == MODEL_LLAMA                        ? "Llama"
                                 : c->hf && c->hf->cfg.family == REMAT_MODEL_GPT2 ? "GPT-2 model"
                                 : c->hf                                          ? "Llama model"
                                                                                  : "model",
                                 why, sizeof why)) {
            snprintf(err, n, "bad strategy '%s': %s", all[i].name, why);
            return 1;
        }
    }
    return 0;
}

/* args_check_model's per-family checks (the model's own flags). */
static int check_family(const config *c, char *err, size_t n) {
    if (c->model == MODEL_HF) {
        if (!c->data) {
            snprintf(err, n,
                     "--init-from needs --data FILE (a text, tokenized with the model's "
                     "tokenizer, or a token file of remat tokenize)");
            return 1;
        }
    } else if (c->model == MODEL_GPT || c->model == MODEL_LLAMA) {
        if (c->width % c->heads != 0) {
            snprintf(err, n, "--heads (%d) must divide --width (%d)", c->heads, c->width);
            return 1;
        }
        if (c->model == MODEL_LLAMA && (c->width / c->heads) % 2 != 0) {
            snprintf(err, n, "--width / --heads (%d / %d) must be even for the Llama (RoPE)",
                     c->width, c->heads);
            return 1;
        }
        if (c->model == MODEL_LLAMA && (c->set_attention || c->set_untied))
            remat_warn("--attention and --untied are GPT settings: the Llama's attention is "
                       "fused and its head untied");
        if (!c->data && c->context < ADDITION_MIN_CONTEXT) {
            snprintf(err, n,
                     "--context %d is too short for the built-in addition task (at least "
                     "%d, or train on a file with --data)",
                     c->context, ADDITION_MIN_CONTEXT);
            return 1;
        }
    } else {
        if (c->data) {
            snprintf(err, n, "--data needs --model gpt or llama");
            return 1;
        }
        if (c->set_heads || c->set_context || c->set_attention || c->set_untied)
            remat_warn("--heads, --context, --attention and --untied are GPT settings: the MLP "
                       "ignores them");
    }
    return 0;
}

int args_check_model(config *c, bool bench, char *err, size_t n) {
    if (check_family(c, err, n)) return 1;
    if (!bench && c->cosine && c->steps > 0 && c->warmup >= c->steps) {
        if (c->resume && !c->set_warmup) /* the saved run's warm-up, not a flag given */
            snprintf(err, n,
                     "--steps %ld must be above the saved run's --warmup %ld (%s--lr-schedule "
                     "cosine): give more --steps, or --warmup",
                     c->steps, c->warmup, c->set_schedule ? "" : "its ");
        else
            snprintf(err, n,
                     "--warmup must be below --steps with --lr-schedule cosine (--warmup %ld, "
                     "--steps %ld)",
                     c->warmup, c->steps);
        return 1;
    }
    if (c->set_momentum && c->optim == OPTIM_ADAMW && c->momentum != 0)
        remat_warn("--momentum is an SGD setting: --optim adamw ignores it");
    /* bench's default list keeps what fits the model; chosen strategies must fit */
    if (bench && c->default_strategies) {
        int w = 0;
        for (int i = 0; i < c->n_strategies; i++)
            if (!(c->strategies[i].kind == STRAT_SEQUENTIAL &&
                  c->strategies[i].segments > c->layers))
                c->strategies[w++] = c->strategies[i];
        c->n_strategies = w;
    }
    int n_tags = 0;
    const char *const *tags = model_tags(c->model, &n_tags);
    /* a Hugging Face model's blocks are known once its directory is read
     * (the command checks again then) */
    if (c->model == MODEL_HF && !c->hf_tags) return 0;
    if (c->model == MODEL_HF) tags = c->hf_tags, n_tags = c->n_hf_tags;
    return check_strategies(c, bench ? c->strategies : &c->strat, bench ? c->n_strategies : 1,
                            n_tags, tags, err, n);
}

void args_defaults_sample(config *c) {
    defaults_common(c);
    c->prompt = "";
    c->tokens = 200;
    c->temperature = 1.0;
}

void args_defaults_eval(config *c) {
    defaults_common(c);
    c->model = MODEL_HF;
    c->batch = 8;
}

/* ---- parsing ---------------------------------------------------------------------- */
static int fail(command cmd, const char *msg, const char *a, const char *b) {
    fprintf(stderr, "remat %s: %s", cmd_names[cmd_index(cmd)], msg);
    if (a) fprintf(stderr, " '%s'", a);
    if (b) fprintf(stderr, ": %s", b);
    fprintf(stderr, "\n\n");
    args_usage(cmd, stderr);
    return 2;
}

/* --strategies LIST into c->strategies. */
static int parse_strategy_list(config *c, command cmd, char *err, size_t n) {
    char buf[1024];
    if (strlen(c->strategies_text) >= sizeof buf)
        return fail(cmd, "bad value for --strategies", "(too long)", NULL);
    strcpy(buf, c->strategies_text);
    c->n_strategies = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (c->n_strategies == ARGS_MAX_LISTED)
            return fail(cmd, "too many strategies (at most 16)", NULL, NULL);
        if (!strategy_parse(tok, c->reentrant, &c->strategies[c->n_strategies], err, n)) {
            /* "selective=names:qkv,attn_out": the comma ended the strategy */
            const strategy *prev = c->n_strategies ? &c->strategies[c->n_strategies - 1] : NULL;
            if (prev && prev->kind == STRAT_SELECTIVE && prev->n_sac_names > 0)
                snprintf(err, n,
                         "not a strategy (commas separate strategies: join the tag "
                         "names of one policy with '+', e.g. %s+%s)",
                         prev->name, tok);
            return fail(cmd, "bad strategy", tok, err);
        }
        c->n_strategies++;
    }
    if (c->n_strategies == 0)
        return fail(cmd, "bad value for --strategies", c->strategies_text, "empty list");
    return 0;
}

/* bench: the strategies to compare, from --strategies, --checkpoint, the
 * sweep, or the default list. */
static int bench_strategies(config *c, char *err, size_t n) {
    if (c->strategies_text && c->checkpoint_text)
        return fail(CMD_BENCH, "give --strategies or --checkpoint, not both", NULL, NULL);
    if (c->checkpoint_text) {
        /* bench --checkpoint S: compare S with none */
        strategy_parse("none", c->reentrant, &c->strategies[0], NULL, 0);
        c->strategies[1] = c->strat;
        c->n_strategies = c->strat.kind == STRAT_NONE ? 1 : 2;
    } else if (c->strategies_text) {
        int rc = parse_strategy_list(c, CMD_BENCH, err, n);
        if (rc) return rc;
    } else if (!c->sweep) {
        /* budget= and selective= entries stay non-reentrant (their checkpoints need it) */
        for (int i = 0; i < c->n_strategies; i++)
            if (c->strategies[i].kind == STRAT_BLOCK || c->strategies[i].kind == STRAT_SEQUENTIAL)
                c->strategies[i].reentrant = c->reentrant;
        c->default_strategies = true;
    } else {
        /* the sweep builds its own list (cmd_bench adds none, sequential=2..L and
         * the budgets once the blocks are profiled) */
        c->n_strategies = 0;
    }
    if (c->sweep && !c->set_reps) c->reps = 3;
    for (int i = 0; i < c->n_strategies; i++) {
        strategy_name(&c->strategies[i]);
        if (!strategy_available(&c->strategies[i], err, n))
            return fail(CMD_BENCH, "strategy not available", c->strategies[i].name, err);
    }
    return 0;
}

/* --checkpoint S (or none) into c->strat. */
static int parse_checkpoint(config *c, command cmd, char *err, size_t n) {
    const char *text = c->checkpoint_text;
    if (!text) {
        strategy_parse("none", c->reentrant, &c->strat, NULL, 0);
        return 0;
    }
    if (!strategy_parse(text, c->reentrant, &c->strat, err, n))
        return fail(cmd, "bad value for --checkpoint", text, err);
    if (c->strat.kind == STRAT_BUDGET && c->reentrant)
        return fail(cmd, "--reentrant does not combine with", text,
                    "the planner's schedules are nested non-reentrant checkpoints");
    if (c->strat.kind == STRAT_SELECTIVE && c->reentrant)
        return fail(cmd, "--reentrant does not combine with", text,
                    "selective checkpointing runs in non-reentrant checkpoints (as in "
                    "PyTorch, context_fn needs use_reentrant=False)");
    return 0;
}

/* More threads than the OpenMP runtime accepts may make it exit the process. */
static int check_threads(const config *c, command cmd) {
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int max_threads = ncpu > 0 && ncpu < 256 ? 4 * (int)ncpu : 1024;
    if (c->threads <= max_threads) return 0;
    char why[96];
    snprintf(why, sizeof why, "at most %d (4 per online cpu)", max_threads);
    return fail(cmd, "bad value for", "--threads", why);
}

/* --device: cpu, cuda or cuda:N; a GPU that cannot be used is an error
 * naming why (no driver, no device, a build without CUDA). */
static int parse_device(config *c, command cmd) {
    const char *s = c->device_text;
    c->device = REMAT_DEVICE_CPU;
    if (!s || strcmp(s, "cpu") == 0 || strcmp(s, "cpu:0") == 0) return 0;
    size_t len = strcspn(s, ":");
    char name[32];
    long index = 0;
    if (len == 0 || len >= sizeof name)
        return fail(cmd, "bad value for", "--device", "expected cpu or cuda[:N]");
    memcpy(name, s, len);
    name[len] = '\0';
    if (s[len] == ':') {
        char *end = NULL;
        index = strtol(s + len + 1, &end, 10);
        if (end == s + len + 1 || *end || index < 0 || index >= REMAT_MAX_DEVICES_PER_TYPE)
            return fail(cmd, "bad value for", "--device", "expected cuda[:N], N a GPU index");
    }
    const char *why = NULL;
    if (strcmp(name, "cuda") == 0 && !remat_cuda_available(&why))
        return fail(cmd, "cannot use", "--device", why);
    int type = remat_device_type_id(name);
    if (type < 0) return fail(cmd, "bad value for", "--device", "expected cpu or cuda[:N]");
    c->device = (remat_device){type, (int)index};
    if (remat_device_check(c->device) != REMAT_OK)
        return fail(cmd, "cannot use", "--device", remat_last_error());
    return 0;
}

int args_check_value(command cmd, const char *flag, double v, char *err, size_t n) {
    return opt_check_value(&table, cmd, flag, v, err, n);
}

int args_parse(config *c, command cmd, int argc, char **argv, int first) {
    char err[512];
    int rc = opt_parse(&table, cmd, c, argc, argv, first, err, sizeof err);
    if (rc == 1) {
        args_usage(cmd, stdout);
        return -1;
    }
    if (rc) return fail(cmd, err, NULL, NULL);
    /* --model's choices are listed gpt|mlp|llama; Llama's kind is 3 (MODEL_HF is 2) */
    if (c->set_model && (int)c->model == 2) c->model = MODEL_LLAMA;
    if ((rc = check_threads(c, cmd))) return rc;
    if (cmd == CMD_SAMPLE) {
        if (c->resume && c->init_from)
            return fail(cmd, "give --resume FILE or --init-from DIR, not both", NULL, NULL);
        if (!c->resume && !c->init_from)
            return fail(cmd,
                        "give --resume FILE (a GPT saved by remat train --save) or --init-from "
                        "DIR (a Hugging Face model)",
                        NULL, NULL);
        return c->init_from ? parse_device(c, cmd) : 0;
    }
    if (cmd == CMD_EVAL) {
        if (!c->init_from || !c->data)
            return fail(cmd,
                        !c->init_from ? "give --init-from DIR (a Hugging Face model directory)"
                                      : "give --data FILE (a text, or a token file of remat "
                                        "tokenize)",
                        NULL, NULL);
        return parse_device(c, cmd);
    }
    if ((rc = parse_device(c, cmd))) return rc;
    if (c->init_from) { /* train: the model is the directory's */
        if (c->set_model || c->set_layers || c->set_width || c->set_heads || c->set_untied ||
            c->set_attention)
            return fail(cmd,
                        "--model, --layers, --width, --heads, --untied and --attention do not "
                        "combine with --init-from: the model is the directory's config.json",
                        NULL, NULL);
        if (!c->data)
            return fail(cmd,
                        "--init-from needs --data FILE (a text, tokenized with the model's "
                        "tokenizer, or a token file of remat tokenize)",
                        NULL, NULL);
        c->model = MODEL_HF;
        if (!c->set_lr) c->lr = c->optim == OPTIM_SGD ? 1e-3 : 5e-5; /* fine-tuning rates */
    }
    if (c->export_dir && !c->init_from && !c->resume)
        return fail(cmd, "--export needs --init-from DIR (a Hugging Face model to fine-tune)", NULL,
                    NULL);
    bool bench = cmd == CMD_BENCH;
    if (!c->set_batch) c->batch = 0;
    model_defaults(c, bench);
    if (c->eval_every < 0) c->eval_every = c->steps >= 10 ? c->steps / 10 : 0;

    if ((rc = parse_checkpoint(c, cmd, err, sizeof err))) return rc;
    if (bench) {
        if ((rc = bench_strategies(c, err, sizeof err))) return rc;
    } else if (!strategy_available(&c->strat, err, sizeof err)) {
        return fail(cmd, "strategy not available", c->strat.name, err);
    }
    /* on --resume the model comes from the file: train checks it after reading
     * the header (savefile_merge_config) */
    /* a Hugging Face model's are checked once its directory is read (hf_check_flags) */
    if (!c->resume && !c->init_from && args_check_model(c, bench, err, sizeof err))
        return fail(cmd, err, NULL, NULL);
    if (c->optim == OPTIM_SGD && !c->set_lr && c->model != MODEL_HF) c->lr = 0.1;
    if (!bench && c->save_every > 0 && !c->save)
        return fail(cmd, "--save-every needs --save FILE", NULL, NULL);
    return 0;
}
