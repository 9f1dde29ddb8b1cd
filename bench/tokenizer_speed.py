#!/usr/bin/env python3
"""Encoding speed: remat's tokenizer (bench/bench_tokenizer.c) beside the Hugging Face
`tokenizers` package, one thread each, on the same tokenizer.json and the same text.

    python3 -m venv /tmp/venv-tok && /tmp/venv-tok/bin/pip install tokenizers
    /tmp/venv-tok/bin/python bench/tokenizer_speed.py [--bin build/bench_tokenizer]
        [--tokenizer T.json ...] [--text FILE] [--rounds 5] [--mb 8]

Without --tokenizer it trains two byte-level BPE tokenizers of 32,000 tokens with the
package on the text (GPT-2 style: ByteLevel; Llama-3 style: Split with Llama 3's regex +
ByteLevel, ignore_merges) into a temporary directory. Without --text the text is --mb
megabytes gathered from this machine's documentation and Python sources (licenses,
Debian copyright files, the standard library): English prose and code, as a training set
would hold.

`tokenizers` runs with RAYON_NUM_THREADS=1 and TOKENIZERS_PARALLELISM=false; it encodes
the whole text with encode() (one call) and line by line with encode_batch() (its
documents path, one thread). The two programs take turns, round by round, and the
script prints the medians in MB/s (10^6 input bytes per second) with their spread, by the
wall clock and by CPU time (the process's: on a busy machine preemption inflates the wall
clock, not the CPU time), the CPU, the load, and whether both gave the same ids.
"""
import argparse
import glob
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def gather_text(mb):
    want = int(mb * 1e6)
    parts, size = [], 0
    pats = ["/usr/share/common-licenses/*", "/usr/share/doc/*/copyright",
            "/usr/lib/python3*/*.py", "/usr/lib/python3*/*/*.py"]
    for pat in pats:
        for path in sorted(glob.glob(pat)):
            try:
                with open(path, encoding="utf-8") as f:
                    t = f.read()
            except (OSError, UnicodeDecodeError):
                continue
            parts.append(t)
            size += len(t.encode())
            if size >= want:
                return "".join(parts).encode()[:want].decode("utf-8", "ignore")
    return "".join(parts)


def train(text, style, path):
    tok = Tokenizer(models.BPE())
    if style == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=32000, min_frequency=2, show_progress=False,
                                  special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    lines = text.splitlines(keepends=True)
    tok.train_from_iterator(lines, trainer)
    d = json.loads(tok.to_str())
    if style == "llama3":
        d["model"]["ignore_merges"] = True
    with open(path, "w", encoding="utf-8") as f:
        json.dump(d, f, ensure_ascii=False)
    return path


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def remat_round(binary, tok, text_path, lines):
    """(wall seconds, CPU seconds) of one encode of the file by bench_tokenizer."""
    args = [binary, tok, text_path, "1"] + (["--lines"] if lines else [])
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        if line.startswith("round 0:"):
            w = line.split()
            return float(w[2]), float(w[7])
    raise RuntimeError(out)


def rate(nbytes, secs):
    med = statistics.median(secs)
    return f"{nbytes / med / 1e6:6.2f} MB/s ({nbytes / max(secs) / 1e6:.2f}-{nbytes / min(secs) / 1e6:.2f})"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/bench_tokenizer")
    ap.add_argument("--tokenizer", action="append")
    ap.add_argument("--text")
    ap.add_argument("--mb", type=float, default=8)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="tokspeed_")
    if a.text:
        with open(a.text, "rb") as f:
            text = f.read().decode("utf-8", "replace")
        text_path = a.text
    else:
        text = gather_text(a.mb)
        text_path = os.path.join(tmp, "text.txt")
        with open(text_path, "w", encoding="utf-8", newline="") as f:
            f.write(text)
    nbytes = len(text.encode())
    toks = a.tokenizer or [train(text, s, os.path.join(tmp, f"{s}.json")) for s in ("gpt2", "llama3")]
    print(f"CPU: {cpu_name()}; load average {os.getloadavg()[0]:.2f}; text {nbytes} bytes; "
          f"tokenizers {__import__('tokenizers').__version__}, one thread each")
    lines = text.splitlines(keepends=True)
    for tp in toks:
        hf = Tokenizer.from_file(tp)
        ids = hf.encode(text, add_special_tokens=False).ids
        dump = os.path.join(tmp, "ids.u32")
        subprocess.run([a.bin, tp, text_path, "1", "--dump", dump], capture_output=True, check=True)
        with open(dump, "rb") as f:
            remat_ids = list(memoryview(f.read()).cast("I"))
        for mode in ("whole", "lines"):
            hf_w, hf_c, rm_w, rm_c = [], [], [], []
            for _ in range(a.rounds):
                t0, c0 = time.perf_counter(), time.process_time()
                if mode == "whole":
                    hf.encode(text, add_special_tokens=False)
                else:
                    hf.encode_batch(lines, add_special_tokens=False)
                hf_w.append(time.perf_counter() - t0)
                hf_c.append(time.process_time() - c0)
                w, c = remat_round(a.bin, tp, text_path, mode == "lines")
                rm_w.append(w)
                rm_c.append(c)
            name = os.path.basename(tp)
            for clock, hs, rs in (("wall", hf_w, rm_w), ("cpu", hf_c, rm_c)):
                print(f"{name} {mode:5s} {clock:4s}: remat {rate(nbytes, rs)}, tokenizers "
                      f"{rate(nbytes, hs)}; remat/tokenizers "
                      f"{statistics.median(hs) / statistics.median(rs):.2f}x")
        print(f"  {len(ids)} ids from tokenizers, {len(remat_ids)} from remat: "
              f"{'the same' if ids == remat_ids else 'DIFFERENT'}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    sys.exit(main())
