#!/usr/bin/env python3
"""scripts/gen_hf_dir_fixtures.py — tiny Hugging Face model directories written by
transformers' save_pretrained, for tests/test_hf.c (remat/hf.h). Offline; not
run by CI or `make test`.

    V/bin/python scripts/gen_hf_dir_fixtures.py tests/fixtures/hf_dirs [--remat-copy build/example_hf_copy]

Writes gpt2-tiny/ (tied embeddings), llama-tiny/ (grouped-query heads, untied,
rope_theta 500000, two eos ids) and llama-sharded/ (the same Llama saved in
shards with an index), each config.json + safetensors weights, and gpt2-hub/:
gpt2-tiny's weights laid out as the hub's openai-community/gpt2
model.safetensors lays them out (the base model's names, "wte.weight",
"h.0.attn.c_attn.weight", no lm_head, and the causal-mask buffers
"h.N.attn.bias", "h.N.attn.masked_bias" beside them), checked to load in
transformers with gpt2-tiny's logits. EXPECTED below is what tests/test_hf.c
checks remat_hf_config_read reads.

With --remat-copy, remat's example program reads each directory (config and
weights into remat's model, remat/hf.h) and exports it again, whole and in
shards of 4 KB; this script then loads remat's directories with
transformers.AutoModelForCausalLM.from_pretrained and checks that their logits
equal the original model's exactly.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import safetensors.torch
import torch
import transformers
from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM


def scaled(model):
    # weights scaled up so that logits are far from uniform
    g = torch.Generator().manual_seed(31)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return model


def models():
    gpt2 = GPT2Config(n_layer=2, n_head=2, n_embd=16, vocab_size=64, n_positions=32,
                      bos_token_id=0, eos_token_id=0, layer_norm_epsilon=1e-5)
    llama_kw = dict(hidden_size=16, intermediate_size=24, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, vocab_size=64, max_position_embeddings=64,
                    rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=1, eos_token_id=[2, 3])
    try:
        llama = LlamaConfig(rope_parameters={"rope_type": "default", "rope_theta": 500000.0}, **llama_kw)
    except TypeError:  # transformers 4
        llama = LlamaConfig(rope_theta=500000.0, **llama_kw)
    torch.manual_seed(0)
    return {"gpt2-tiny": scaled(GPT2LMHeadModel(gpt2)).eval(), "llama-tiny": scaled(LlamaForCausalLM(llama)).eval()}


# What tests/test_hf.c checks that remat_hf_config_read reads (remat_model_config's
# fields; intermediate 0 is GPT-2's "4 x hidden", head_dim 0 "hidden / n_heads").
EXPECTED = {
    "gpt2-tiny": dict(family="gpt2", n_layers=2, n_heads=2, n_kv_heads=2, hidden=16, head_dim=0,
                      intermediate=0, vocab=64, max_positions=32, norm_eps=1e-5,
                      tie_word_embeddings=True, bos_token_id=0, eos_token_id=[0]),
    "llama-tiny": dict(family="llama", n_layers=2, n_heads=4, n_kv_heads=2, hidden=16, head_dim=0,
                       intermediate=24, vocab=64, max_positions=64, norm_eps=1e-5, rope_theta=500000.0,
                       tie_word_embeddings=False, bos_token_id=1, eos_token_id=[2, 3]),
}


def logits(model, vocab):
    ids = torch.arange(11).reshape(1, 11) * 7 % vocab
    with torch.no_grad():
        return model(ids).logits


def hub_style(model, d):
    """model's weights as the hub's GPT-2 file has them: the base model's
    names, no lm_head (tied), the causal masks (float, as the original
    checkpoint's registered buffers were) and masked_bias beside them."""
    os.makedirs(d, exist_ok=True)
    model.config.save_pretrained(d)
    sd = {k[len("transformer."):]: v.contiguous() for k, v in model.state_dict().items()
          if k.startswith("transformer.")}
    n = model.config.n_positions
    for i in range(model.config.n_layer):
        sd[f"h.{i}.attn.bias"] = torch.tril(torch.ones(n, n)).view(1, 1, n, n)
        sd[f"h.{i}.attn.masked_bias"] = torch.tensor(-1e4)
    safetensors.torch.save_file(sd, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    m = AutoModelForCausalLM.from_pretrained(d).eval()
    a, b = logits(model, model.config.vocab_size), logits(m, model.config.vocab_size)
    assert torch.equal(a, b), ("gpt2-hub", (a - b).abs().max())


def check_copy(exe, src, name, ref_model):
    with tempfile.TemporaryDirectory() as tmp:
        for shard in (None, 4096):
            out = os.path.join(tmp, f"export-{shard}")
            subprocess.run([exe, src, out] + ([str(shard)] if shard else []), check=True)
            sharded = os.path.exists(os.path.join(out, "model.safetensors.index.json"))
            assert sharded == bool(shard) and sharded != os.path.exists(os.path.join(out, "model.safetensors"))
            m = AutoModelForCausalLM.from_pretrained(out).eval()
            vocab = m.config.vocab_size
            a, b = logits(ref_model, vocab), logits(m, vocab)
            assert torch.equal(a, b), (name, shard, (a - b).abs().max())
            files = sorted(f for f in os.listdir(out) if f.endswith(".safetensors"))
            print(f"checked: transformers {transformers.__version__} loads remat's export of {name} "
                  f"({type(m).__name__}, {len(files)} weights file(s), logits equal, "
                  f"max |logit| {a.abs().max():.2f})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--remat-copy", help="build/example_hf_copy: check remat's exports")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    ms = models()
    for name, m in ms.items():
        d = os.path.join(a.out, name)
        shutil.rmtree(d, ignore_errors=True)
        m.save_pretrained(d)
    sh = os.path.join(a.out, "llama-sharded")
    shutil.rmtree(sh, ignore_errors=True)
    ms["llama-tiny"].save_pretrained(sh, max_shard_size="8KB")
    assert os.path.exists(os.path.join(sh, "model.safetensors.index.json"))
    hub = os.path.join(a.out, "gpt2-hub")
    shutil.rmtree(hub, ignore_errors=True)
    hub_style(ms["gpt2-tiny"], hub)
    for d in ("gpt2-tiny", "llama-tiny", "llama-sharded", "gpt2-hub"):
        p = os.path.join(a.out, d, "generation_config.json")
        if os.path.exists(p):
            os.remove(p)  # not read by remat
    for name, want in EXPECTED.items():  # what tests/test_hf.c expects remat to read
        with open(os.path.join(a.out, name, "config.json")) as f:
            cfg = json.load(f)
        assert cfg["model_type"] == want["family"], (name, cfg["model_type"])
    if a.remat_copy:
        check_copy(a.remat_copy, os.path.join(a.out, "gpt2-tiny"), "gpt2-tiny", ms["gpt2-tiny"])
        check_copy(a.remat_copy, os.path.join(a.out, "llama-tiny"), "llama-tiny", ms["llama-tiny"])
        check_copy(a.remat_copy, sh, "llama-sharded", ms["llama-tiny"])
        check_copy(a.remat_copy, hub, "gpt2-hub", ms["gpt2-tiny"])
    print("wrote", a.out, "with transformers", transformers.__version__, file=sys.stderr)


if __name__ == "__main__":
    main()
