#!/usr/bin/env python3
"""Independent oracle for the C++ tokenizer (tokenizer/tokenizer.h): small byte-level BPE tokenizers
built and run with Hugging Face `tokenizers`.

What it writes (tests/tokenizer/testdata/ unless --out says otherwise)
---------------------------------------------------------------------------
    glm_style.json                GLM-style: Sequence[Split(GLM regex, Isolated),
                                  ByteLevel(add_prefix_space=False, use_regex=False)], ByteLevel
                                  decoder and post-processor, merges in the ["a", "b"] pair form,
                                  special tokens <|endoftext|> and <|user|>. Vocab 1000.
    glm_style_legacy_merges.json  the same tokenizer with its merges rewritten in the legacy
                                  "a b" string form (HF must give the same ids for it).
    gpt2_style.json               a single ByteLevel(add_prefix_space=True, use_regex=True)
                                  pre-tokenizer (ByteLevel applies the GPT-2 regex itself).
    deepseek_style.json           DeepSeek-V3-like layout: normalizer Sequence[], three Splits (digit
                                  runs, CJK runs, the DeepSeek word regex) then ByteLevel,
                                  TemplateProcessing that prepends a BOS, ignore_merges=true, and
                                  added tokens exercising lstrip / rstrip / normalized / non-special
                                  and contents outside the byte-level alphabet.
    split_behaviors.json          every Split behaviour (Removed, Isolated, MergedWithPrevious,
                                  MergedWithNext, Contiguous), a literal String pattern and invert.
    glm5_format.json              a miniature of the GLM-4.5 / GLM-5 tokenizer.json (see below).
    golden.json                   for every tokenizer: each test text with the ids HF gives
                                  (`Tokenizer.encode(text).ids`, i.e. add_special_tokens=True) and
                                  HF's decode of those ids, with and without skip_special_tokens;
                                  plus decode cases of hand-picked ids (lone bytes, truncated and
                                  invalid UTF-8 sequences, special tokens).

The GLM-5 format miniature
--------------------------
We cannot download the real GLM tokenizer.json, so the miniature follows the publicly described
layout of the GLM-4.x / GLM-5 `tokenizer.json` files (tokenizers serialization version "1.0"):
  * "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
    "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
    "vocab": {...}, "merges": [["a", "b"], ...]}
  * "normalizer": null
  * "pre_tokenizer": Sequence[Split({"Regex": GLM_PATTERN}, behavior "Isolated", invert false),
    ByteLevel(add_prefix_space false, trim_offsets true, use_regex false)]
  * "post_processor": ByteLevel, "decoder": ByteLevel
  * "added_tokens": a long run of special tokens right after the model vocabulary
    (<|endoftext|>, [MASK], [gMASK], [sMASK], <sop>, <eop>, <|system|>, <|user|>, <|assistant|>,
    <|observation|>, image/video/audio markers, ...) and the reasoning / tool-call markers
    (<think>, </think>, <tool_call>, ...). Which of the latter are flagged "special" in the real file
    we do not know; the miniature marks them special=false, normalized=false so both kinds occur.
The model vocabulary is trained here on our own text, so only the layout and component types mirror
GLM, not the vocabulary.

All training and test text is written in this script by us (no third-party text).

How to run (from the repository root; CPU only, a few seconds):

    python3 research/tokenizer_golden/make_tokenizer_golden.py            # rewrite the fixtures
    python3 research/tokenizer_golden/make_tokenizer_golden.py --out /tmp/t

Requirements: `pip install tokenizers` (made with the version recorded in golden.json). Output is
deterministic; the script asserts that HF reloads every file it writes and gives the same ids.
"""

import argparse
import json
import pathlib
import re
import sys

import tokenizers
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

GLM_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
DEEPSEEK_DIGITS = r"\p{N}{1,3}"
DEEPSEEK_CJK = "[一-龥\u3040-ゟ゠-ヿ]+"
DEEPSEEK_WORDS = (r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+|"
                  r" ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# ------------------------------------------------------------------------------------------------
# Training text (ours). Plain prose, a little code, and a few lines in other scripts so that some
# multi-byte merges exist.
# ------------------------------------------------------------------------------------------------
TRAINING_TEXT = r"""
The little tokenizer reads a sentence, splits it into words, and then merges bytes into tokens.
A draft model proposes several tokens at once; the target model checks them in a single pass.
When the draft is right, we keep every token it guessed. When it is wrong, we keep the prefix that
matched and sample one more token from the target. That is the whole idea of speculative decoding.
We measure the acceptance rate, the mean accepted length, and the wall-clock speed-up per request.
It's not magic: it's bookkeeping. You'll see that the cache must roll back when drafts are rejected.
They're careful about positions. We've written tests for every rule, and I'm sure they'd catch a bug.
Numbers matter too: 1, 12, 123, 1234, 12345, 2024, 3.14159, 0.001, 65536, 1000000 and 42.
The quick brown fox was replaced by a slow green turtle, which walked across the quiet garden.
Morning light fell on the table where three cups of tea were cooling next to an open notebook.
Every line in the notebook described an experiment: the seed, the prompt, the temperature, the result.
Some experiments failed. Others surprised us. Most of them confirmed what the equations predicted.
If the acceptance rule is strict, the output distribution is exactly the target distribution.
If the rule is relaxed, decoding is faster but the text may drift away from what the target wants.

def accept_prefix(draft, target):
    accepted = 0
    for d, t in zip(draft, target):
        if d != t:
            break
        accepted += 1
    return accepted

class Cache:
    def __init__(self, capacity):
        self.capacity = capacity
        self.length = 0

    def truncate(self, n):
        if n < 0 or n > self.length:
            raise ValueError(f"cannot truncate to {n}")
        self.length = n

int CountTokens(const std::vector<int>& ids) {
  int count = 0;
  for (int id : ids) {
    if (id >= 0) ++count;
  }
  return count;
}

for (size_t i = 0; i < rows; ++i) {
	total += values[i] * weights[i];
}

中文分词需要处理没有空格的句子。模型一次提出几个候选词，然后目标模型一起检查它们。
日本語の文章には、ひらがなとカタカナと漢字が混ざっています。テストは大切です。
한국어 문장은 띄어쓰기가 있습니다. 토크나이저는 바이트 단위로 동작합니다.
Les phrases françaises ont des accents : é, è, à, ç, ô. Déjà vu, naïve café.
Emoji appear in chat logs 😀 👍 🎉 and must survive the round trip.
"""

# ------------------------------------------------------------------------------------------------
# Test texts (ours): full of Unicode, whitespace runs, code, contractions and special tokens.
# ------------------------------------------------------------------------------------------------
COMMON_TEXTS = [
    "",
    "a",
    " ",
    "\n",
    "中",
    "👍",
    "é",
    "\u0000",
    "\x07bell",
    "Hello, world! This is a simple sentence.",
    "don't, I'LL, you're, we've, she'd, it's, THEY'RE, I'm, O'Neil's",
    "IT'S ok; it'S fine; it\u2019s curly",
    "中文文本测试：分词器应该正确处理汉字。",
    "日本語のテキストを分割します。カタカナとひらがな、漢字。",
    "한국어 문장도 잘 처리되어야 합니다. 감사합니다!",
    "Family: 👩\u200d👩\u200d👧 thumbs: 👍🏽 flags: 🇯🇵🇰🇷 heart: ❤️ keycap: 1️⃣",
    "cafe\u0301 vs caf\u00e9 and n\u0303 and a\u0308\u0301",
    "हिन्दी क्षत्रिय नमस्ते दुनिया",
    "مرحبا بالعالم، هذا اختبار رقم ١٢٣.",
    "1234567 and 12 and 3.14159 and 1,000,000 and ７８９",
    "tabs\there\t\tand  two   three    spaces\r\nCRLF line\r\n\r\nend   ",
    "   leading spaces",
    "trailing spaces   ",
    "\n\n\n",
    " \t \n ",
    "a\u00a0b\u3000c\u2003d\u200be",
    "def main():\n    for i in range(10):\n        print(f\"{i:>3}\")\n    return 0\n",
    "int main() {\n\tstd::vector<int> v{1, 2, 3};\n\treturn v.size() > 2 ? 0 : 1;\n}\n",
    "abc中文def123한국ghi!!!???...",
    "Mixed 😀text😀 with emoji😀😀 glued",
    "The cache must roll back when drafts are rejected, and we've tested it.",
]

GLM_SPECIAL_TEXTS = [
    "<|user|>",
    "<|user|>Hi there<|endoftext|>",
    "x<|user|>y",
    "<|user|> <|user|>  <|endoftext|>\n",
    "<|endoftext|<|user|>",
    "<|USER|> is not special",
    "中文<|user|>👍<|endoftext|>한국",
]

DEEPSEEK_SPECIAL_TEXTS = [
    "<｜begin▁of▁sentence｜>Hi",
    "<｜User｜>What is 2+2?<｜Assistant｜><think>\nfour\n</think>4<｜end▁of▁sentence｜>",
    "left   <mask>   right",
    "a<sep>   b<sep>\n\nc",
    "say hello world twice: hello world!",
    "hello worlds and hello  world",
    "<mask><mask> <sep><sep>",
]

GLM5_SPECIAL_TEXTS = [
    "[gMASK]<sop><|system|>\nYou are helpful.<|user|>\nHi<|assistant|>\n<think></think>\nHello!",
    "<|user|>\nCall a tool<|assistant|>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n"
    "<arg_value>北京</arg_value>\n</tool_call><|observation|>\n<tool_response>晴</tool_response>",
    "[MASK] [sMASK] <eop> <|endoftext|>",
    "<|begin_of_image|><|end_of_image|>/nothink",
    "<think>推理</think>答案",
]

BEHAVIOR_TEXTS = [
    "well-known co-op x-ray",
    "aeiou and AEIOU",
    "xxx-yyy--zzz",
    "numbers 12 345 and 6789",
    "  spaced  out  ",
]


def byte_level_alphabet():
    """Byte -> char table of GPT-2's byte-level encoding, used to find single-byte token ids."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    table = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def train(pre_tokenizer, vocab_size, special_tokens):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=1, show_progress=False,
                                  special_tokens=special_tokens,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    # Repeat the text so pair counts are well separated; order is fixed, so training is deterministic.
    tok.train_from_iterator([TRAINING_TEXT] * 4, trainer=trainer)
    return tok


def glm_pre_tokenizer():
    return pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(GLM_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])


def to_json(tok):
    return json.loads(tok.to_str())


def from_json(data):
    return Tokenizer.from_str(json.dumps(data, ensure_ascii=False))


def build_glm_style():
    tok = train(glm_pre_tokenizer(), 1000, ["<|endoftext|>", "<|user|>"])
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return to_json(tok)


def build_legacy(glm_json):
    data = json.loads(json.dumps(glm_json))
    merges = data["model"]["merges"]
    assert merges and isinstance(merges[0], list), "expected the pair form from this tokenizers version"
    for a, b in merges:
        assert " " not in a and " " not in b
    data["model"]["merges"] = [f"{a} {b}" for a, b in merges]
    return data


def build_gpt2_style():
    tok = train(pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True), 600,
                ["<|endoftext|>", "<|user|>"])
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    return to_json(tok)


def build_deepseek_style():
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(DEEPSEEK_DIGITS), behavior="isolated", invert=False),
        pre_tokenizers.Split(Regex(DEEPSEEK_CJK), behavior="isolated", invert=False),
        pre_tokenizers.Split(Regex(DEEPSEEK_WORDS), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    bos, eos = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
    tok = train(pre, 600, [bos, eos])
    tok.add_special_tokens([
        tokenizers.AddedToken("<｜User｜>", special=True, normalized=False),
        tokenizers.AddedToken("<｜Assistant｜>", special=True, normalized=False),
        tokenizers.AddedToken("<mask>", special=True, normalized=False, lstrip=True),
        tokenizers.AddedToken("<sep>", special=True, normalized=False, rstrip=True),
    ])
    tok.add_tokens([
        tokenizers.AddedToken("<think>", special=False, normalized=False),
        tokenizers.AddedToken("</think>", special=False, normalized=False),
        tokenizers.AddedToken("hello world", special=False, normalized=True),
    ])
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tok.token_to_id(bos))])
    data = to_json(tok)
    data["normalizer"] = {"type": "Sequence", "normalizers": []}
    data["model"]["ignore_merges"] = True
    return data


def build_split_behaviors():
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split("-", behavior="merged_with_previous"),
        pre_tokenizers.Split(Regex(r"[aeiouAEIOU]"), behavior="merged_with_next"),
        pre_tokenizers.Split("x", behavior="contiguous"),
        pre_tokenizers.Split(Regex(r"\p{N}+"), behavior="removed"),
        pre_tokenizers.Split(Regex(r"\S+"), behavior="isolated", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok = train(pre, 400, ["<|endoftext|>"])
    return to_json(tok)


GLM5_SPECIAL = [
    "<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|system|>", "<|user|>",
    "<|assistant|>", "<|observation|>", "<|begin_of_image|>", "<|end_of_image|>", "<|begin_of_video|>",
    "<|end_of_video|>", "<|begin_of_audio|>", "<|end_of_audio|>", "<|begin_of_transcription|>",
    "<|end_of_transcription|>", "<|code_prefix|>", "<|code_middle|>", "<|code_suffix|>",
]
GLM5_NON_SPECIAL = [
    "/nothink", "<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>",
    "</tool_response>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>",
]


def build_glm5_format():
    tok = train(glm_pre_tokenizer(), 500, [])
    tok.add_special_tokens([tokenizers.AddedToken(t, special=True, normalized=False) for t in GLM5_SPECIAL])
    tok.add_tokens([tokenizers.AddedToken(t, special=False, normalized=False) for t in GLM5_NON_SPECIAL])
    tok.post_processor = processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True)
    data = to_json(tok)
    # The field layout of the real file: every BPE option spelled out.
    model = data["model"]
    for key, value in [("dropout", None), ("unk_token", None), ("continuing_subword_prefix", None),
                       ("end_of_word_suffix", None), ("fuse_unk", False), ("byte_fallback", False),
                       ("ignore_merges", False)]:
        assert model.get(key, value) == value, (key, model.get(key))
        model[key] = value
    data["pre_tokenizer"]["pretokenizers"][1]["trim_offsets"] = True
    return data


def decode_cases(tok, specials):
    """Hand-picked ids: lone and truncated UTF-8 bytes, invalid sequences, special tokens."""
    table = byte_level_alphabet()

    def byte_ids(data):
        ids = []
        for b in data:
            i = tok.token_to_id(table[b])
            assert i is not None, f"byte {b:#x} has no token"
            ids.append(i)
        return ids

    raw_cases = [
        b"\xe4",                  # first byte of U+4E2D alone
        b"\xe4\xb8",              # two of three bytes
        b"\xe4\xb8\xad",          # the whole character
        b"\xff",                  # never valid in UTF-8
        b"\x80",                  # lone continuation byte
        b"\xf0\x9f\x91a",         # truncated emoji, then ASCII
        b"\xc0\xaf",              # overlong encoding
        b"\xed\xa0\x80",          # UTF-16 surrogate
        b"\xf4\x90\x80\x80",      # above U+10FFFF
        b"\xf0\x80\x80A",         # bad second byte after F0
        b"ok\xe4ok\x80\x80ok",
        b"\xe2\x82\xac\xe2\x82",  # euro sign, then a truncated one
    ]
    cases = [{"ids": byte_ids(raw)} for raw in raw_cases]
    if specials:
        first = tok.token_to_id(specials[0])
        second = tok.token_to_id(specials[-1])
        cases.append({"ids": [first] + byte_ids(b"hi\xe4") + [second]})
        cases.append({"ids": [second, second] + byte_ids(b" a b")})
    result = []
    for case in cases:
        for skip in (False, True):
            result.append({"ids": case["ids"], "skip_special_tokens": skip,
                           "text": tok.decode(case["ids"], skip_special_tokens=skip)})
    return result


def golden_for(name, data, texts, specials, lossless):
    tok = from_json(data)
    cases = []
    for text in texts:
        ids = tok.encode(text).ids
        decoded = tok.decode(ids, skip_special_tokens=False)
        if lossless:
            assert decoded == text, (name, text, decoded)
        cases.append({"text": text, "ids": ids, "decoded": decoded,
                      "decoded_skip_special": tok.decode(ids, skip_special_tokens=True)})
    return {
        "file": f"{name}.json",
        "vocab_size": tok.get_vocab_size(with_added_tokens=True),
        "lossless": lossless,
        "encode": cases,
        "decode": decode_cases(tok, specials),
    }


def compact_json(value):
    """Indented JSON with every list of numbers kept on one line (keeps golden.json small)."""
    text = json.dumps(value, ensure_ascii=False, indent=1)
    return re.sub(r"\[\s*(-?\d+(?:,\s*-?\d+)*)\s*\]",
                  lambda m: "[" + ",".join(m.group(1).replace(",", " ").split()) + "]", text)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="tests/tokenizer/testdata")
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    glm = build_glm_style()
    built = {
        "glm_style": (glm, COMMON_TEXTS + GLM_SPECIAL_TEXTS, ["<|endoftext|>", "<|user|>"], True),
        "glm_style_legacy_merges": (build_legacy(glm), COMMON_TEXTS + GLM_SPECIAL_TEXTS,
                                    ["<|endoftext|>", "<|user|>"], True),
        "gpt2_style": (build_gpt2_style(), COMMON_TEXTS + GLM_SPECIAL_TEXTS,
                       ["<|endoftext|>", "<|user|>"], False),
        "deepseek_style": (build_deepseek_style(), COMMON_TEXTS + DEEPSEEK_SPECIAL_TEXTS,
                           ["<｜begin▁of▁sentence｜>", "<mask>"], False),
        "split_behaviors": (build_split_behaviors(), COMMON_TEXTS + BEHAVIOR_TEXTS, ["<|endoftext|>"], False),
        "glm5_format": (build_glm5_format(), COMMON_TEXTS + GLM5_SPECIAL_TEXTS, ["[gMASK]", "</think>"], True),
    }

    golden = {"tokenizers_version": tokenizers.__version__, "tokenizers": {}}
    for name, (data, texts, specials, lossless) in built.items():
        text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
        (out / f"{name}.json").write_text(text + "\n", encoding="utf-8")
        reloaded = Tokenizer.from_file(str(out / f"{name}.json"))
        for sample in texts:
            assert reloaded.encode(sample).ids == from_json(data).encode(sample).ids, (name, sample)
        golden["tokenizers"][name] = golden_for(name, data, texts, specials, lossless)

    # The legacy merges form must not change a single id.
    for a, b in zip(golden["tokenizers"]["glm_style"]["encode"],
                    golden["tokenizers"]["glm_style_legacy_merges"]["encode"]):
        assert a["ids"] == b["ids"], a["text"]

    (out / "golden.json").write_text(compact_json(golden) + "\n", encoding="utf-8")
    total = sum(p.stat().st_size for p in out.iterdir())
    print(f"wrote {len(built) + 1} files to {out} ({total / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
