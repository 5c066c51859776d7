"""Deterministic test corpus for tokenizer parity (Spindle vs HF tokenizers).

corpus(seed, specials) returns a list of strings covering: multilingual
text (Latin with diacritics, CJK, Arabic, Hebrew, Devanagari, Thai, Cyrillic,
Greek, Korean), emoji with ZWJ sequences and skin tones, source code with
tabs, CRLF and long whitespace runs, numbers, the tokenizer's own special
tokens typed inside text, seeded random Unicode scalar values (astral planes
and combining marks included), the empty string and one 100 KB line.
"""
import random

PHRASES = [
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure they'll say it's what we've done; don't you think?",
    "Ça va? Über naïve façade, déjà vu — coöperate résumé.",
    "Ñandú, pingüino, ¿qué tal? ¡Olé!",
    "Привет, как дела? Съешь же ещё этих мягких французских булок.",
    "Γειά σου Κόσμε· ΑΒΓΔ αβγδ ς",
    "你好，世界！今天天气很好。我们一起去吃饭吧。",
    "東京は日本の首都です。カタカナとひらがなを混ぜる。",
    "안녕하세요, 세계! 한국어 문장입니다.",
    "مرحبا بالعالم! هذه جملة عربية مع أرقام ١٢٣٤٥.",
    "שלום עולם! זה משפט בעברית.",
    "नमस्ते दुनिया! यह हिंदी में एक वाक्य है।",
    "สวัสดีชาวโลก ภาษาไทยไม่มีช่องว่างระหว่างคำ",
    "Tiếng Việt có nhiều dấu: ắ ằ ẳ ẵ ặ.",
    "ﬁ ﬂ ﬃ Ⅻ ① ㍿ ＡＢＣ ｶﾀｶﾅ",  # compatibility characters
    "e\u0301 a\u0308 n\u0303 \u1100\u1161\u11a8",  # decomposed forms
    "İstanbul ıi ẞ ß ǅ",
    "Tab\there\tand\tthere",
    "line one\r\nline two\r\n\r\nline four",
    "   leading and trailing spaces   ",
    "multiple     internal      spaces",
    "\n\n\nnewlines\n\n",
    "zero\u200bwidth\u200cjoiner\u200dtest\ufeff",
    "nbsp\u00a0thin\u2009ideographic\u3000space",
    "Don't, won't, can't. SHOULDN'T WE'LL I'D",
]

EMOJI = [
    "😀", "👍🏽", "👩‍💻", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇯🇵", "🇺🇸", "❤️", "🤗", "🧑🏿‍🚀",
    "👋🏻", "✋🏾", "🫶", "🥹", "1️⃣", "#️⃣", "🏴󠁧󠁢󠁳󠁣󠁴󠁿",
]

CODE = [
    "def f(x):\n\treturn x ** 2  # square\n",
    "int main(void) {\r\n    printf(\"%d\\n\", 42);\r\n    return 0;\r\n}\r\n",
    "for (let i = 0; i < n; i++) {\n        console.log(`i=${i}`);\n}\n",
    "SELECT * FROM users WHERE id = 1 AND name LIKE '%bob%';",
    "<div class=\"a\">&amp; &lt;tag&gt;</div>",
    "x = [1, 2, 3]\ny = {'a': 1, \"b\": [2.5, -3e10]}\n",
    "    \t    \t\t  mixed   \t indentation\n",
    "if a != b && c >= d || !e { return; }",
    "https://example.com/path?query=1&x=y#frag",
    "C:\\Users\\name\\file.txt",
    "emoji_in_code = '🚀'  # launch",
]


def _numbers(rng):
    kinds = [
        lambda: str(rng.randint(0, 10 ** rng.randint(1, 20))),
        lambda: f"{rng.uniform(-1e6, 1e6):.{rng.randint(0, 8)}f}",
        lambda: f"{rng.randint(1, 31)}/{rng.randint(1, 12)}/{rng.randint(1900, 2100)}",
        lambda: f"{rng.randint(0, 99999):,}",
        lambda: "+" + str(rng.randint(10 ** 9, 10 ** 12)),
        lambda: f"{rng.random():e}",
        lambda: "٣٤٥ ४५६ ๑๒๓ １２３",
    ]
    return rng.choice(kinds)()


# Code point ranges to draw random scalar values from, weighted towards
# scripts that exercise pre-tokenizer classes.
_RANGES = [
    (0x20, 0x7E), (0x00, 0x1F), (0xA0, 0x24F), (0x300, 0x36F), (0x370, 0x3FF),
    (0x400, 0x4FF), (0x590, 0x5FF), (0x600, 0x6FF), (0x900, 0x97F),
    (0xE00, 0xE7F), (0x1100, 0x11FF), (0x2000, 0x206F), (0x20A0, 0x20CF),
    (0x2190, 0x2BFF), (0x3000, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3),
    (0xE000, 0xE0FF), (0xF900, 0xFAFF), (0xFB00, 0xFDFF), (0xFE00, 0xFE0F),
    (0xFF00, 0xFFEF), (0xFFF0, 0xFFFF), (0x10000, 0x1007F), (0x1D400, 0x1D7FF),
    (0x1F300, 0x1FAFF), (0x20000, 0x2A6DF), (0xE0000, 0xE007F),
    (0xF0000, 0xF00FF), (0x10FF00, 0x10FFFF),
]


def _random_unicode(rng, n):
    out = []
    for _ in range(n):
        lo, hi = rng.choice(_RANGES)
        cp = rng.randint(lo, hi)
        if 0xD800 <= cp <= 0xDFFF:
            cp = 0xFFFD
        out.append(chr(cp))
    return "".join(out)


def _mixed(rng, specials):
    parts = []
    for _ in range(rng.randint(1, 6)):
        r = rng.random()
        if r < 0.35:
            parts.append(rng.choice(PHRASES))
        elif r < 0.5:
            parts.append("".join(rng.choice(EMOJI) for _ in range(rng.randint(1, 4))))
        elif r < 0.62:
            parts.append(rng.choice(CODE))
        elif r < 0.72:
            parts.append(_numbers(rng))
        elif r < 0.82 and specials:
            parts.append(rng.choice(specials))
        elif r < 0.9:
            parts.append(" " * rng.randint(1, 40) + "\t" * rng.randint(0, 3))
        else:
            parts.append(_random_unicode(rng, rng.randint(1, 12)))
    sep = rng.choice(["", " ", "\n", "  ", "\t", "\r\n"])
    return sep.join(parts)


def corpus(seed=1234, specials=(), n=5000):
    """At least `n` deterministic strings; `specials` are typed into text."""
    rng = random.Random(seed)
    specials = list(specials)
    out = ["", " ", "  ", "\n", "a", "\u00e9", "e\u0301", "🤗"]
    out += PHRASES + CODE + EMOJI
    out += [s for s in specials[:64]]
    for sp in specials[:32]:
        out += [f"x{sp}y", f" {sp} ", f"{sp}{sp}", f"word {sp}\n", f"{sp} lead"]
    while len(out) < n - 1:
        r = rng.random()
        if r < 0.55:
            out.append(_mixed(rng, specials))
        elif r < 0.85:
            out.append(_random_unicode(rng, rng.randint(1, 60)))
        else:
            out.append(_numbers(rng) + rng.choice(["", " ", "."]) + _numbers(rng))
    # One ~100 KB line (no newline inside: it is one input line anyway).
    big = []
    size = 0
    while size < 100_000:
        piece = _mixed(rng, specials).replace("\n", " ")
        big.append(piece)
        size += len(piece.encode("utf-8"))
    out.append(" ".join(big))
    return out


if __name__ == "__main__":
    import json
    import sys

    for s in corpus(int(sys.argv[1]) if len(sys.argv) > 1 else 1234):
        print(json.dumps(s))
