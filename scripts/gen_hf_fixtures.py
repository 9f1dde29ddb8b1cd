#!/usr/bin/env python3
"""Generates the Hugging Face transformers fixtures for tests/test_models_hf.c.

Usage:  python3 scripts/gen_hf_fixtures.py tests/fixtures/hf

Needs PyTorch 2.x and transformers (not needed by CI: the files are
committed). A virtual environment with both, from PyPI:

    python3 -m venv /work/venv-hf
    /work/venv-hf/bin/pip install torch transformers safetensors
    /work/venv-hf/bin/python scripts/gen_hf_fixtures.py tests/fixtures/hf

Every case is a tiny random model (GPT2LMHeadModel or LlamaForCausalLM) of
one shape (grouped-query and multi-query attention, tied and untied
embeddings, odd widths, large and small rope_theta, biases or none). Its
weights are generator recipes ("@uniform SEED LO HI", the splitmix64 stream
tests/support/fixtures.c regenerates bit for bit; docs/fixtures.md), scaled
up from HF's 0.02 init so that the logits are far from uniform; the ids and
targets are "@randint" recipes. The file holds the config (param lines with
the config.json keys), the logits, the loss (mean cross-entropy of the
logits against the targets, no shift, -100 ignored), the greedy
continuation (5 tokens) of the first sequence's first 3 ids and the
gradient of every parameter (sampled: "@sample STRIDE ..."), all computed by
transformers in f32 with eager attention, in eval mode (no dropout).
"""

import math
import os
import sys

import torch
import torch.nn.functional as F
import transformers
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

M64 = (1 << 64) - 1


def splitmix64(seed, n):
    s = seed & M64
    out = []
    for _ in range(n):
        s = (s + 0x9E3779B97F4A7C15) & M64
        z = s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        out.append(z ^ (z >> 31))
    return out


def uniform(shape, seed, lo, hi):
    span = float(hi) - float(lo)
    assert math.frexp(span)[0] == 0.5, "span must be a power of two"
    zs = splitmix64(seed, math.prod(shape))
    vals = [float(lo) + span * ((z >> 11) * 2.0 ** -53) for z in zs]
    return torch.tensor(vals, dtype=torch.float64).reshape(shape).to(torch.float32)


def randint(shape, seed, lo, hi):
    zs = splitmix64(seed, math.prod(shape))
    return torch.tensor([lo + (z >> 11) % (hi - lo) for z in zs], dtype=torch.int64).reshape(shape)


def fmt(t):
    return " ".join("%.9g" % v for v in t.reshape(-1).tolist())


def shape_tokens(t):
    return [str(t.dim())] + [str(s) for s in t.shape]


def sample_stride(n):
    """Every element of a small tensor, about 400 of a large one."""
    return 1 if n <= 600 else max(2, n // 400)


def value_line(key, name, t):
    t = t.detach().float().contiguous()
    stride = sample_stride(t.numel())
    if stride == 1:
        return " ".join([key, name, "f32"] + shape_tokens(t)) + " " + fmt(t)
    vals = t.reshape(-1)[::stride]
    return " ".join([key, name, "f32"] + shape_tokens(t) + ["@sample", str(stride)]) + " " + fmt(vals)


# A weight's init range: (lo, hi) with a power-of-two span.
def weight_range(name, shape):
    if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight", "layernorm.weight", "norm.weight")):
        return 0.5, 1.5  # norm gains around 1
    if len(shape) == 1:
        return -0.25, 0.25  # biases
    if "wte" in name or "wpe" in name or "embed_tokens" in name or "lm_head" in name:
        return -1.0, 1.0
    return -0.25, 0.25  # linear weights


GPT2_KEYS = ["n_layer", "n_head", "n_embd", "n_inner", "vocab_size", "n_positions",
             "layer_norm_epsilon", "activation_function", "tie_word_embeddings"]
LLAMA_KEYS = ["num_hidden_layers", "num_attention_heads", "num_key_value_heads", "hidden_size",
              "intermediate_size", "head_dim", "vocab_size", "max_position_embeddings",
              "rms_norm_eps", "rope_theta", "tie_word_embeddings", "attention_bias", "mlp_bias"]

CASES = [
    # name, family, config, B, T, ignored targets
    ("gpt2_tied", "gpt2", dict(n_layer=2, n_head=3, n_embd=24, vocab_size=61, n_positions=16,
                               tie_word_embeddings=True), 2, 7, 0),
    ("gpt2_untied_odd", "gpt2", dict(n_layer=3, n_head=3, n_embd=18, n_inner=50, vocab_size=53,
                                     n_positions=9, layer_norm_epsilon=1e-4,
                                     activation_function="gelu", tie_word_embeddings=False),
     3, 9, 2),
    ("llama_gqa_tied", "llama", dict(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                     hidden_size=32, intermediate_size=44, vocab_size=67,
                                     max_position_embeddings=16, rms_norm_eps=1e-6,
                                     rope_theta=10000.0, tie_word_embeddings=True), 2, 11, 0),
    ("llama_mqa_untied", "llama", dict(num_hidden_layers=2, num_attention_heads=6, num_key_value_heads=1,
                                       hidden_size=24, intermediate_size=40, vocab_size=59,
                                       max_position_embeddings=32, rms_norm_eps=1e-5,
                                       rope_theta=500000.0, tie_word_embeddings=False), 2, 13, 1),
    ("llama_odd_bias", "llama", dict(num_hidden_layers=2, num_attention_heads=3, num_key_value_heads=3,
                                     hidden_size=30, intermediate_size=50, vocab_size=61,
                                     max_position_embeddings=12, rms_norm_eps=1e-6, rope_theta=100.0,
                                     tie_word_embeddings=False, attention_bias=True, mlp_bias=True),
     2, 9, 0),
    ("llama_head_dim", "llama", dict(num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
                                     hidden_size=20, head_dim=6, intermediate_size=36, vocab_size=41,
                                     max_position_embeddings=10, rms_norm_eps=1e-6,
                                     rope_theta=10.0, tie_word_embeddings=True), 3, 10, 0),
]


GREEDY_PROMPT, GREEDY_NEW = 3, 5


def greedy_tokens(model, prompt, n):
    """Greedy decoding (what generate(do_sample=False) does), one full forward
    per token; every choice must win by a clear margin so that rounding
    cannot flip it."""
    seq = prompt.clone()
    out = []
    with torch.no_grad():
        for _ in range(n):
            last = model(input_ids=seq).logits[0, -1]
            top = torch.topk(last, 2)
            assert top.values[0] - top.values[1] > 1e-3, "greedy choice within 1e-3 of a tie"
            nxt = int(top.indices[0])
            out.append(nxt)
            seq = torch.cat([seq, torch.tensor([[nxt]])], dim=1)
    return out


def config_value(cfg, key):
    if key == "rope_theta":
        rp = getattr(cfg, "rope_parameters", None)
        if rp and "rope_theta" in rp:
            return rp["rope_theta"]
    v = getattr(cfg, key)
    if key == "n_inner" and v is None:
        return 0
    return v


def param_token(v):
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, float):
        return repr(v)
    return str(v)


def make_case(name, family, kw, B, T, n_ignored, case_seed):
    torch.manual_seed(0)
    if family == "gpt2":
        cfg = GPT2Config(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=None,
                         eos_token_id=None, **kw)
        keys = GPT2_KEYS
        cfg._attn_implementation = "eager"
        model = GPT2LMHeadModel(cfg)
    else:
        cfg = LlamaConfig(attention_dropout=0.0, **kw)
        keys = LLAMA_KEYS
        cfg._attn_implementation = "eager"
        model = LlamaForCausalLM(cfg)
    model = model.float().eval()
    lines = ["# remat Hugging Face fixture -- generated by scripts/gen_hf_fixtures.py, do not edit",
             "# torch %s, transformers %s" % (torch.__version__, transformers.__version__),
             "# command: python3 scripts/gen_hf_fixtures.py tests/fixtures/hf",
             "case hf/" + name, "op " + family, "dtype f32"]
    for key in keys:
        lines.append("param %s %s" % (key, param_token(config_value(cfg, key))))
    lines.append("param batch %d" % B)
    lines.append("param seq %d" % T)
    V = cfg.vocab_size
    ids_seed, tgt_seed = case_seed * 1000 + 1, case_seed * 1000 + 2
    ids = randint((B, T), ids_seed, 0, V)
    targets = randint((B, T), tgt_seed, 0, V)
    for i in range(n_ignored):  # a few ignored targets (fixed places)
        targets.view(-1)[(7 * i + 3) % (B * T)] = -100
    lines.append("input ids i64 2 %d %d @randint %d 0 %d" % (B, T, ids_seed, V))
    lines.append("input targets i64 2 %d %d %s" % (B, T, " ".join(str(v) for v in targets.reshape(-1).tolist())))
    params = list(model.named_parameters())  # tied lm_head is listed once, as wte
    with torch.no_grad():
        for k, (pname, p) in enumerate(params):
            lo, hi = weight_range(pname, tuple(p.shape))
            seed = case_seed * 1000 + 100 + k
            p.copy_(uniform(tuple(p.shape), seed, lo, hi))
            lines.append(" ".join(["input", pname, "f32"] + shape_tokens(p) +
                                  ["@uniform", str(seed), repr(float(lo)), repr(float(hi))]))
    logits = model(input_ids=ids).logits
    loss = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index=-100)
    loss.backward()
    lines.append(value_line("output", "logits", logits))
    lines.append("output loss f32 0 %.9g" % loss.item())
    greedy = greedy_tokens(model, ids[:1, :GREEDY_PROMPT], GREEDY_NEW)
    lines.append("output greedy i64 1 %d %s" % (GREEDY_NEW, " ".join(str(v) for v in greedy)))
    for pname, p in params:
        lines.append(value_line("grad", pname, p.grad))
    lines.append("end")
    spread = logits.std(dim=-1).mean().item()
    return "\n".join(lines) + "\n", spread, loss.item()


def main():
    if len(sys.argv) != 2:
        sys.stderr.write("usage: gen_hf_fixtures.py OUT_DIR\n")
        return 2
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for i, (name, family, kw, B, T, n_ign) in enumerate(CASES):
        text, spread, loss = make_case(name, family, kw, B, T, n_ign, i + 1)
        with open(os.path.join(out, name + ".txt"), "w") as f:
            f.write(text)
        print("%-18s logit std %.2f  loss %.4f (uniform: %.4f)" % (name, spread, loss, math.log(kw["vocab_size"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
