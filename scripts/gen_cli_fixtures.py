#!/usr/bin/env python3
"""scripts/gen_cli_fixtures.py — tiny Hugging Face model directories (config.json,
model.safetensors, tokenizer.json) and what transformers computes on them, for
the `remat eval`, `remat sample` and `remat train --init-from ... --export`
tests in tests/test_cli.c. Offline; not run by CI or `make test`.

    V/bin/python scripts/gen_cli_fixtures.py tests/fixtures/hf_cli [--remat build/remat]

Writes gpt2/ (GPT-2, tied, the GPT-2-style tokenizer of tests/fixtures/tokenizer)
and llama/ (Llama, grouped-query heads, untied, rope_theta 500000, the Llama-3-style
tokenizer), data.txt (a text to evaluate and train on) and expected.json:

  eval   the contract of `remat eval --context T`: the text tokenized with the
         directory's tokenizer (tokenizers' encode(text).ids), windows of T+1
         tokens at 0, T, 2T, ... while one fits, the mean cross-entropy of the
         last T tokens given the first T (transformers' logits)
  sample transformers' greedy generate() after the prompt: the new ids and
         tokenizer.decode(ids, skip_special_tokens=True)
  train  `remat train --init-from DIR --data data.txt --context T --batch B
         --optim sgd --lr LR --steps S` replayed in PyTorch: the training windows
         (the tokens' first 90%, windows at kT, step s row r takes window
         (s*B + r) mod their count), mean cross-entropy, plain SGD; then the
         eval loss of the trained model (what `remat eval` reads from --export)

With --remat, the script also runs that training with the remat program, loads
its --export directory with transformers.AutoModelForCausalLM.from_pretrained and
checks that the logits equal those of the model trained in PyTorch.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import torch
import transformers
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
TOKENIZERS = os.path.join(HERE, "..", "tests", "fixtures", "tokenizer")
CONTEXT = 16
PROMPT = "The model reads"
SAMPLE_TOKENS = 12
TRAIN = dict(batch=2, lr=0.05, steps=3)


def scaled(model, seed, scale):
    # weights scaled up from HF's init so that logits are far from uniform
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1 and ("ln" in name or "norm" in name):
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(scale * torch.randn(p.shape, generator=g))
    return model


def models(tok):
    gv = tok["gpt2"].get_vocab_size(with_added_tokens=True)
    lv = tok["llama"].get_vocab_size(with_added_tokens=True)
    eot = tok["gpt2"].token_to_id("<|endoftext|>")
    gpt2 = GPT2Config(n_layer=2, n_head=4, n_embd=24, vocab_size=gv, n_positions=64, bos_token_id=eot,
                      eos_token_id=eot, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    llama_kw = dict(hidden_size=24, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, vocab_size=lv, max_position_embeddings=64, rms_norm_eps=1e-5,
                    tie_word_embeddings=False, bos_token_id=tok["llama"].token_to_id("<|begin_of_text|>"),
                    eos_token_id=tok["llama"].token_to_id("<|end_of_text|>"))
    try:
        llama = LlamaConfig(rope_parameters={"rope_type": "default", "rope_theta": 500000.0}, **llama_kw)
    except TypeError:  # transformers 4
        llama = LlamaConfig(rope_theta=500000.0, **llama_kw)
    torch.manual_seed(0)
    # seeds and scales picked for greedy samples that do not repeat one token
    return {"gpt2": scaled(GPT2LMHeadModel(gpt2), 36, 0.5).eval(),
            "llama": scaled(LlamaForCausalLM(llama), 32, 0.3).eval()}


def windows(ids, T, end):
    return [ids[k:k + T + 1] for k in range(0, end - T, T) if k + T + 1 <= end]


def eval_loss(model, ids, T):
    ws = windows(ids, T, len(ids))
    x = torch.tensor([w[:T] for w in ws])
    y = torch.tensor([w[1:] for w in ws])
    with torch.no_grad():
        logits = model(x).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).double(), y.reshape(-1))
    return loss.item(), y.numel()


def train_split(n, T):
    # remat's held-out tail: the last 10% when both sides keep a window of T+1
    split = n - n // 10
    if split < T + 2 or n - split < T + 2:
        split = n
    return split


def train(model, ids, T, batch, lr, steps):
    ws = windows(ids, T, train_split(len(ids), T))
    model.train()
    for s in range(steps):
        rows = [ws[(s * batch + r) % len(ws)] for r in range(batch)]
        x = torch.tensor([w[:T] for w in rows])
        y = torch.tensor([w[1:] for w in rows])
        model.zero_grad()
        logits = model(x).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= lr * p.grad
    model.eval()
    return model


def greedy(model, tok, prompt, n):
    ids = tok.encode(prompt).ids
    with torch.no_grad():
        # stops early at the end-of-sequence token, as remat sample does
        out = model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False, pad_token_id=0)
        # the smallest gap between the chosen logit and the next one: far from a tie
        logits = model(out[:, :-1]).logits[0, len(ids) - 1:]
    top2 = logits.topk(2, dim=-1).values
    new = out[0, len(ids):].tolist()
    return new, tok.decode(new, skip_special_tokens=True), (top2[:, 0] - top2[:, 1]).min().item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--remat", help="build/remat: check that transformers loads its --export")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    tok_files = {"gpt2": os.path.join(TOKENIZERS, "gpt2.json"), "llama": os.path.join(TOKENIZERS, "llama3.json")}
    tok = {k: Tokenizer.from_file(v) for k, v in tok_files.items()}
    with open(os.path.join(TOKENIZERS, "corpus.txt"), encoding="utf-8") as f:
        text = f.read()[:1200]
    data = os.path.join(a.out, "data.txt")
    with open(data, "w", encoding="utf-8") as f:
        f.write(text)
    expected = {"context": CONTEXT, "prompt": PROMPT, "sample_tokens": SAMPLE_TOKENS, "train": TRAIN,
                "transformers": transformers.__version__, "torch": torch.__version__}
    for name, m in models(tok).items():
        d = os.path.join(a.out, name)
        shutil.rmtree(d, ignore_errors=True)
        m.save_pretrained(d)
        p = os.path.join(d, "generation_config.json")
        if os.path.exists(p):
            os.remove(p)  # not read by remat
        shutil.copyfile(tok_files[name], os.path.join(d, "tokenizer.json"))
        ids = tok[name].encode(text).ids
        loss, n = eval_loss(m, ids, CONTEXT)
        new, new_text, gap = greedy(m, tok[name], PROMPT, SAMPLE_TOKENS)
        trained = train(AutoModelForCausalLM.from_pretrained(d), ids, CONTEXT, **TRAIN)
        tloss, _ = eval_loss(trained, ids, CONTEXT)
        expected[name] = {"eval_loss": loss, "eval_tokens": n, "data_tokens": len(ids), "sample_ids": new,
                          "sample_text": new_text, "sample_min_gap": gap, "trained_eval_loss": tloss}
        print(f"{name}: {len(ids)} tokens, eval loss {loss:.6f} over {n}, greedy {new} "
              f"(smallest top-2 gap {gap:.3f}), trained eval loss {tloss:.6f}", file=sys.stderr)
        if a.remat:
            check_export(a.remat, d, data, trained)
    with open(os.path.join(a.out, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print("wrote", a.out, "with transformers", transformers.__version__, file=sys.stderr)


def check_export(exe, d, data, trained):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "export")
        subprocess.run([exe, "train", "--init-from", d, "--data", data, "--context", str(CONTEXT),
                        "--batch", str(TRAIN["batch"]), "--optim", "sgd", "--lr", str(TRAIN["lr"]),
                        "--steps", str(TRAIN["steps"]), "--quiet", "--export", out], check=True)
        m = AutoModelForCausalLM.from_pretrained(out).eval()
        ids = torch.arange(20).reshape(1, 20) * 7 % m.config.vocab_size
        with torch.no_grad():
            x, y = trained(ids).logits, m(ids).logits
        err = ((x - y).abs().max() / x.abs().max()).item()
        assert err < 1e-5, (d, err)
        print(f"checked: transformers loads remat's --export of {os.path.basename(d)} "
              f"({type(m).__name__}): logits within {err:.2e} of the model trained in PyTorch", file=sys.stderr)


if __name__ == "__main__":
    main()
