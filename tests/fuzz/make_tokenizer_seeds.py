#!/usr/bin/env python3
"""tests/fuzz/make_tokenizer_seeds.py — the seeds of fuzz_tokenizer
(tests/fuzz/corpus/tokenizer): small tokenizer.json files cut from the
tokenizer test fixtures (tests/fixtures/tokenizer, scripts/gen_tokenizer_fixtures.py),
each followed by a NUL byte and a text to encode. Small, so that the
fuzzer's mutations reach past the JSON into the tokenizer: the byte alphabet
and the first merges of each vocabulary, a few added tokens. Python's
standard library only:

    python3 tests/fuzz/make_tokenizer_seeds.py tests/fixtures/tokenizer tests/fuzz/corpus/tokenizer
"""
import json
import os
import sys

TEXT = ("Hello world! It's 2026: naïve café, 東京 😀 <|endoftext|> <|begin_of_text|>x"
        "  \t\r\n 123456 don't 'S ").encode() + b"\xff\xc3 end"


def cut(tok, n_merges, n_added):
    m = tok["model"]
    merges = m["merges"][:n_merges]
    keep = set()
    for mg in merges:
        a, b = mg.split(" ", 1) if isinstance(mg, str) else mg
        keep.update((a, b, a + b))
    # the byte alphabet (single characters) and what the kept merges use and make
    vocab = {t: i for t, i in m["vocab"].items() if len(t) == 1 or t in keep}
    m["vocab"], m["merges"] = vocab, merges
    added = tok.get("added_tokens") or []
    tok["added_tokens"] = added[:n_added]
    return tok


def main():
    src, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    for name in sorted(os.listdir(src)):
        if not name.endswith(".json"):
            continue
        with open(os.path.join(src, name), encoding="utf-8") as f:
            tok = json.load(f)
        big = len(tok["model"]["vocab"]) > 400
        tok = cut(tok, 24 if big else 40, 3)
        data = json.dumps(tok, ensure_ascii=False, separators=(",", ":")).encode()
        with open(os.path.join(out, name[:-5]), "wb") as f:
            f.write(data + b"\0" + TEXT)
        print(name, len(data), "bytes of JSON", file=sys.stderr)


if __name__ == "__main__":
    main()
