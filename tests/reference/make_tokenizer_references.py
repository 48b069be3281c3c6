"""Token ids that Hugging Face's tokenizer gives for a corpus, for tests/apps/test_tokenizers.cpp.

Run by the build in the LibTorch 2.x lane, after scripts/convert-gguf.py wrote the model folder:
  .venv-torch/bin/python tests/reference/make_tokenizer_references.py --model DIR --out FILE.json

The tokenizer is transformers' AutoTokenizer on DIR (the tokenizer.json that attn's tokenizer reads too). The
output is a JSON list of {"text", "ids", "decoded"}: encode without special tokens added, and decode of those ids.
The corpus mixes prose, code, numbers, whitespace runs and Unicode (accents, CJK, emoji, combining marks, RTL,
zero-width characters), and special tokens written in the text.
"""
import argparse
import json

from transformers import AutoTokenizer

CORPUS = [
    "Hello world",
    "Hello, world! How are you doing today?",
    " leading space",
    "trailing space ",
    "  two leading spaces",
    "multiple   spaces   inside",
    "tabs\tand\ttabs\t\t",
    "new\nlines\n\nand\r\nwindows",
    "\n\n\n",
    "   ",
    "",
    "a",
    "I'm sure they'll say it's what we'd've done; WE'RE NOT.",
    "Numbers: 0 1 12 123 1234 12345 3.14159 -42 1e10 2,000,000",
    "Dates 2026-11-22 and times 23:59:59",
    "def f(x):\n    return x ** 2  # square\n",
    "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }",
    "https://example.com/path?query=1&other=two#frag",
    "email@example.org, @handle, #hashtag, $100, 50%, C++, C#",
    "Ünïcödé àccénts: café, naïve, façade, Straße, Øresund",
    "Ελληνικά, русский текст, עברית, العربية",
    "中文字符和日本語のテキスト、한국어 텍스트",
    "Emoji: 🙂😀🚀👩‍👩‍👧‍👦 🇫🇷 ❤️",
    "Combining: e\u0301 a\u0308 n\u0303 (decomposed)",
    "Zero\u200bwidth\u200dspace and\u00a0no-break\u2009thin",
    "Punctuation!!! ??? ... --- *** ((( ))) [[[ ]]] {{{ }}}",
    "Mixed123Numbers456and789Letters",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "text<|endoftext|>more text",
    "The quick brown fox jumps over the lazy dog. " * 8,
    "Gravitational waves are ripples in spacetime caused by accelerating masses, predicted by Einstein in 1916.",
    "ALL CAPS SENTENCE WITH SOME lowercase AND MiXeD cAsE",
    "’curly quotes’ “double” — em dash – en dash … ellipsis",
    "\u3000ideographic space\u3000",
]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="the folder with tokenizer.json")
    parser.add_argument("--out", required=True, help="the JSON file to write")
    args = parser.parse_args()
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    cases = []
    for text in CORPUS:
        ids = tokenizer.encode(text, add_special_tokens=False)
        cases.append({"text": text, "ids": ids, "decoded": tokenizer.decode(ids)})
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False, indent=1)
    print(f"wrote {len(cases)} tokenizer cases ({sum(len(c['ids']) for c in cases)} tokens) to {args.out}")


if __name__ == "__main__":
    main()
