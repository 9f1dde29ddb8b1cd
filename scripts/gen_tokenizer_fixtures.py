#!/usr/bin/env python3
"""Makes the tokenizer fixtures of tests/test_tokenizer.c with the Hugging Face
`tokenizers` package, offline.

Usage:
    python3 -m venv /tmp/venv-tok && /tmp/venv-tok/bin/pip install tokenizers
    /tmp/venv-tok/bin/python scripts/gen_tokenizer_fixtures.py tests/fixtures/tokenizer

It writes, into the directory:
  corpus.txt        the training text: sentences this script composes from its own
                    word lists (English, numbers, code, accented Latin, Greek, Cyrillic,
                    Hebrew, Arabic, CJK, Korean, emoji), seeded, so a rerun writes the
                    same bytes
  gpt2.json         byte-level BPE, GPT-2 style: ByteLevel pre-tokenizer (its built-in
                    regex), merges in the "a b" string form, <|endoftext|> in the model
                    vocabulary, added tokens with lstrip / rstrip / single_word /
                    normalized set
  gpt2_prefix.json  the same with ByteLevel add_prefix_space = true
  llama3.json       Llama-3 style: Sequence[Split(Regex, Isolated), ByteLevel(use_regex
                    false)], ignore_merges, merges as [a, b] pairs, special tokens after
                    the model vocabulary, TemplateProcessing adding <|begin_of_text|>
  llama3_merges.json  llama3.json without ignore_merges (some inputs encode differently:
                    the script checks that they do)
  split_*.json      small tokenizers whose Split pre-tokenizers use the other behaviors
                    (removed, merged_with_previous, merged_with_next, contiguous, invert)
  cases.txt         what `tokenizers` returns for the hard inputs below, one line each:
                      tokenizer NAME.json              (the cases below use it)
                      encode ADD HEXTEXT : ID...       tokenizer.encode(text, add_special_tokens=ADD)
                      decode SKIP ID... : HEXTEXT      tokenizer.decode(ids, skip_special_tokens=SKIP)
                    HEXTEXT is the UTF-8 (for encode: the raw input bytes, which may be
                    invalid UTF-8; Python encodes bytes.decode("utf-8", "replace"), which is
                    what remat does with such bytes) as hex, "-" for the empty text. In a
                    decode line "@" stands for the ids of the encode line before it, and
                    the text "=" for that line's input (after the replacement above).
"""
import json
import os
import random
import sys

import tokenizers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from tokenizers import trainers

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

WORDS = """the a an of to and in is it that for on with as was he she they we you I at be this
have from or by one had not but what all were when there can more if no out so said up its about
into than them only some could new time two may then do first any my now such like our over man me
even most made after also did many before must through back years where much your way well down
should because each just those people how too little state good very make world still own see men
work long get here between both life being under never day same another know while last might us
great old year off come since against go came right used take three states himself few house use
during without again place american around however home small found thought went say part once
general high upon school every don't does got united left number course war until always away
something fact though water less public put think almost hand enough far took head yet government
system better set told nothing night end why called didn't eyes find going look asked later knew
point next program city business give group toward young days let room president side social
given present several order national possible rather second face per among form important often
things looking early white john become case big large need four within felt along children saw
best church ever least power development light thing seemed family interest want members mind
country area others done turned although open god service certain kind problem began different door
thus help sense means whole matter perhaps itself it's times law human line above name example
action company hands local show whether five history gave today either act feet across taken past
quite anything seen having death experience body word half really week field car words already
themselves information tell college shall money period held keep sure probably free seems political
real behind cannot miss question air office making brought whose special heard major problems ago
became federal moment study available known result street economic boy position reason change
south board individual job society areas west close turn love community true court force full
""".split()

UNICODE_WORDS = """café naïve résumé façade Zürich über straße garçon piñata São Paulo
Ελληνικά γλώσσα καλημέρα Русский язык привет мир Україна עברית שלום العربية مرحبا
中文 字符 测试 漢字 東京 日本語 のテキスト ひらがな カタカナ 한국어 텍스트 안녕하세요
हिन्दी नमस्ते ไทย สวัสดี Tiếng Việt ễ ở ẫ e\u0301 a\u0308 n\u0303""".split()

EMOJI = ["👍", "👍🏽", "👨‍👩‍👧", "🇫🇷", "❤️", "😀", "🚀", "🎉", "✨", "🙂"]

CODE = [
    "def f(x):\n    return x**2  # square\n",
    "for (int i = 0; i < n; i++) {\n\tsum += a[i];\n}\n",
    "if x == 10:\n        print('ten')\n    else:\n        pass\n",
    "{\"key\": [1, 2, 3], \"v\": null}\n",
    "SELECT name, count(*) FROM t WHERE id > 42;\r\n",
]


WHOLE_WORDS = []


def byte_chars():
    """GPT-2's byte -> character table (the ByteLevel alphabet), byte order."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs))
    return [chr(table[b]) for b in range(256)]


BYTE_CHARS = byte_chars()


def corpus(seed=31, n_sentences=900):
    rng = random.Random(seed)
    out = []
    for i in range(n_sentences):
        k = rng.randint(4, 16)
        words = []
        for _ in range(k):
            r = rng.random()
            if r < 0.72:
                w = rng.choice(WORDS)
            elif r < 0.84:
                w = rng.choice(UNICODE_WORDS)
            elif r < 0.90:
                w = str(rng.choice([rng.randint(0, 99), rng.randint(100, 99999),
                                    rng.randint(1900, 2030)]))
            elif r < 0.94:
                w = rng.choice(EMOJI)
            else:
                w = rng.choice(["I'm", "you're", "we'll", "they've", "she'd", "IT'S", "can't",
                                "3.14", "1,000", "$5", "100%", "e-mail", "(see", "below)"])
            if rng.random() < 0.08:
                w = w.capitalize()
            words.append(w)
        s = " ".join(words)
        s = s[0].upper() + s[1:]
        s += rng.choice([".", ".", ".", "!", "?", ";", ":", "..."])
        out.append(s)
        r = rng.random()
        if r < 0.06:
            out.append("\n\n" + rng.choice(CODE))
        elif r < 0.12:
            out.append("\n")
        elif r < 0.14:
            out.append("\r\n")
        elif r < 0.16:
            out.append("   \t")
        else:
            out.append(" ")
    return "".join(out)


def hard_inputs(text):
    """The inputs every tokenizer is checked on: (bytes, name)."""
    rng = random.Random(7)
    long_text = text[:8000]
    s = [
        "", "Hello world", " leading space", "trailing space ", "  two leading", "x",
        "a  b   c\t\td\n\n\ne", "\r\n\r\n", "   ", "\t", "x \n y", "a \n\n b  \r\n c",
        " \u00a0 \u2003 \u3000 \u180e \u0085 x \u200b y\ufeffz \u2028 \u2029 \u202f \u205f",
        "1234567890", "3.14159 2,718 1e-9 100000 007", "٣٤٥ ١٢ ５６", "½ ² Ⅻ ⅷ", "12a34b567c",
        "don't I'm we'll they've she'd it's Y'ALL'RE 'ſ 'K 'S 'LL", "' s 'x '' '''s",
        "café naïve résumé", "Ελληνικά Русский", "עברית العربية", "e\u0301 a\u0308\u0308",
        "中文字符測試", "日本語のテキスト", "한국어 텍스트", "𠀀𪚥 𝔘𝔫𝔦",
        "👍🏽 👨‍👩‍👧 🇫🇷 ❤️", "😀😀😀😀", "x🚀y",
        "def f(x):\n    return x**2  # sq\n", "\tif (a&&b) { c |= 0x1F; }",
        "a\x00b\x01c\x7f\x1b[0m", "\u0000",
        "<|endoftext|>", "<|endoftext|>Hello<|endoftext|><|endoftext|> x <|endoftext|>",
        "<|endoftext|", "<|endof<|endoftext|>text|>", "a   <mask>   b", "<mask>x<mask>",
        "[SW] x[SW] [SW]y ([SW]) [SW]", "say hello world twice: hello world.",
        "<pad>  q <pad>", "<|begin_of_text|>hi<|end_of_text|>", "<|eot_id|><|eot_id|>",
        "<|reserved_special_token_3|> <|reserved_special_token_30|>",
        "🙂<|endoftext|>🙂", " <|endoftext|> ",
        long_text, "a" * 3000, " " * 2000, "7" * 1000, "ab" * 800, "\n" * 300 + "z",
        ("<|endoftext|>" + "word ") * 50, "é" * 600, "x" + "\t \n" * 200,
    ]
    out = [(t.encode("utf-8"), None) for t in s]
    # invalid UTF-8: lone and truncated sequences, overlongs, surrogates, out of range
    bad = [
        b"\xff\xfe abc \xc3\x28 \xe2\x82 \xf0\x9f\x98 \xed\xa0\x80 \xc0\xaf \x80\x80",
        b"abc\xe2\x82", b"\xf0\x9f\x98", b"\xf4\x90\x80\x80 \xf8\x88\x80\x80\x80",
        b"\xe0\x80\x80 \xe0\xa0 \xc1\xbf \xf5", b"ok\xc3", b"\x80", b"\xc3\xa9\xa9",
        "caf\u00e9".encode("latin-1") + b" na\xefve",
    ]
    out += [(b, None) for b in bad]
    # random bytes
    out += [(bytes(rng.randrange(256) for _ in range(n)), None) for n in (10, 100, 1000)]
    return out


def bpe_trained(text, vocab_size, pre_tokenizer, specials):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator([text], trainer)
    return tok


def with_json(tok, edit):
    d = json.loads(tok.to_str())
    edit(d)
    return Tokenizer.from_str(json.dumps(d))


def merges_as_strings(d):
    d["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in d["model"]["merges"]]


def write_json(tok, path, edit=None):
    d = json.loads(tok.to_str())
    if edit:
        edit(d)
    s = json.dumps(d, ensure_ascii=False, indent=1)
    with open(path, "w", encoding="utf-8") as f:
        f.write(s + "\n")
    return Tokenizer.from_file(path)


def hexs(b):
    return b.hex() if b else "-"


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/tokenizer"
    os.makedirs(out_dir, exist_ok=True)
    text = corpus()
    with open(os.path.join(out_dir, "corpus.txt"), "w", encoding="utf-8", newline="") as f:
        f.write(text)

    toks = {}
    # GPT-2 style
    gpt2 = bpe_trained(text, 800, pre_tokenizers.ByteLevel(add_prefix_space=False), ["<|endoftext|>"])
    gpt2.post_processor = processors.ByteLevel(trim_offsets=False)
    gpt2.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True, normalized=False),
                             AddedToken("<pad>", rstrip=True, special=True, normalized=False)])
    gpt2.add_tokens([AddedToken("[SW]", single_word=True, normalized=False),
                     AddedToken("hello world", normalized=True), AddedToken(" twice", normalized=False)])
    toks["gpt2.json"] = write_json(gpt2, os.path.join(out_dir, "gpt2.json"), merges_as_strings)

    def prefix(d):
        merges_as_strings(d)
        d["pre_tokenizer"]["add_prefix_space"] = True
    toks["gpt2_prefix.json"] = write_json(gpt2, os.path.join(out_dir, "gpt2_prefix.json"), prefix)

    # Llama-3 style
    llama_pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    llama = bpe_trained(text, 1200, llama_pre, [])
    # Words the merges split into several tokens, added to the model vocabulary whole:
    # ignore_merges then encodes them as one token, as Llama 3's vocabulary (not made by
    # these merges) does for many words.
    split_words = [w for w in sorted(set(WORDS)) if len(llama.encode(" " + w, add_special_tokens=False).ids) > 2]
    WHOLE_WORDS[:] = [" " + w for w in split_words[:6]]
    n_vocab = llama.get_vocab_size()

    def add_words(d):
        for k, w in enumerate(WHOLE_WORDS):
            d["model"]["vocab"]["".join(BYTE_CHARS[b] for b in w.encode("utf-8"))] = n_vocab + k
    llama = with_json(llama, add_words)
    specials = ["<|begin_of_text|>", "<|end_of_text|>"] + \
        [f"<|reserved_special_token_{i}|>" for i in range(40)] + ["<|eot_id|>"]
    llama.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    bos = llama.token_to_id("<|begin_of_text|>")
    llama.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos)])])

    def ignore(d, ignore_merges=True):
        d["model"]["ignore_merges"] = ignore_merges
    toks["llama3.json"] = write_json(llama, os.path.join(out_dir, "llama3.json"), ignore)

    def no_ignore(d):
        ignore(d, False)
    toks["llama3_merges.json"] = write_json(llama, os.path.join(out_dir, "llama3_merges.json"), no_ignore)

    # the other Split behaviors, on a small vocabulary
    small = bpe_trained(text[:6000], 320, pre_tokenizers.ByteLevel(add_prefix_space=False), ["<|endoftext|>"])
    variants = {
        "split_removed.json": {"type": "Split", "pattern": {"String": " "}, "behavior": "Removed", "invert": False},
        "split_prev.json": {"type": "Split", "pattern": {"Regex": r"\s+"}, "behavior": "MergedWithPrevious", "invert": False},
        "split_next.json": {"type": "Split", "pattern": {"Regex": r"\p{P}"}, "behavior": "MergedWithNext", "invert": False},
        "split_contiguous.json": {"type": "Split", "pattern": {"Regex": r"\d"}, "behavior": "Contiguous", "invert": False},
        "split_invert.json": {"type": "Split", "pattern": {"Regex": r"\p{L}+|\p{N}+"}, "behavior": "Removed", "invert": True},
        "split_empty.json": {"type": "Split", "pattern": {"Regex": r"(?=\p{P})|x*"}, "behavior": "Isolated", "invert": False},
    }
    for name, split in variants.items():
        def edit(d, split=split):
            d["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
                split, {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": False}]}
        toks[name] = write_json(small, os.path.join(out_dir, name), edit)

    inputs = hard_inputs(text)
    inputs.append((("".join(WHOLE_WORDS) + " x" + "".join(WHOLE_WORDS).upper()).encode("utf-8"), None))
    lines = [f"# made by scripts/gen_tokenizer_fixtures.py with tokenizers {tokenizers.__version__}"]
    differ = 0
    for name, tok in toks.items():
        lines.append(f"tokenizer {name}")
        byte_ids = {}
        vocab = tok.get_vocab()
        alphabet = {}
        for b in range(256):
            ch = bytes([b]).decode("latin-1")
            alphabet[b] = ch
        # the ids of single bytes (the ByteLevel alphabet) for the decode cases
        bl = decoders.ByteLevel()
        for tokstr, i in vocab.items():
            try:
                d = bl.decode([tokstr]).encode("utf-8", "surrogatepass")
            except Exception:
                continue
            if len(tokstr) == 1 and len(d) in (1, 3):
                byte_ids[tokstr] = i
        main_tok = name in ("llama3.json", "gpt2.json")
        for raw, _ in inputs:
            if len(raw) > 600 and not main_tok:
                continue
            text_in = raw.decode("utf-8", "replace")
            for add in (True, False):
                if not add and (not main_tok or len(raw) > 600):
                    continue
                ids = tok.encode(text_in, add_special_tokens=add).ids
                lines.append(f"encode {int(add)} {hexs(raw)} : {' '.join(map(str, ids))}")
                if add:
                    for skip in (True, False):
                        s = tok.decode(ids, skip_special_tokens=skip).encode("utf-8")
                        lines.append(f"decode {int(skip)} @ : {'=' if s == text_in.encode() else hexs(s)}")
            if name == "llama3.json":
                other = toks["llama3_merges.json"].encode(text_in).ids
                differ += other != tok.encode(text_in).ids
        # decoding arbitrary ids: single bytes that are not UTF-8 alone, unknown ids, specials
        rng = random.Random(11)
        single = sorted(byte_ids.values())
        size = tok.get_vocab_size()
        for _ in range(12):
            ids = [rng.choice(single) for _ in range(rng.randint(1, 9))]
            ids += [rng.randrange(size + 10) for _ in range(rng.randint(0, 4))]
            rng.shuffle(ids)
            for skip in (True, False):
                s = tok.decode(ids, skip_special_tokens=skip).encode("utf-8")
                lines.append(f"decode {int(skip)} {' '.join(map(str, ids))} : {hexs(s)}")
        for ids in ([], [size + 5], [10**6], list(range(size - 8, size + 3))):
            for skip in (True, False):
                s = tok.decode(ids, skip_special_tokens=skip).encode("utf-8")
                lines.append(f"decode {int(skip)} {' '.join(map(str, ids))} : {hexs(s)}")
    assert differ > 0, "ignore_merges changes no input: the llama3 fixture would not test it"
    with open(os.path.join(out_dir, "cases.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    total = sum(os.path.getsize(os.path.join(out_dir, n)) for n in os.listdir(out_dir))
    print(f"wrote {len(lines)} lines, {len(toks)} tokenizers, {total} bytes in {out_dir}; "
          f"ignore_merges changes {differ} inputs")


if __name__ == "__main__":
    main()
