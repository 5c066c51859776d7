#!/usr/bin/env python3
"""Derive Spindle's Unicode override tables from HF `tokenizers` (the
reference) and write src/tokenizer/tok_unicode_tables.c.

Run with the project's venv after upgrading `tokenizers`:
    .venv/bin/python scripts/gen_unicode_tables.py

Everything is measured on HF itself, code point by code point, so the
tables follow whatever Unicode versions its crates were built with:
- regex classes (\\s, \\p{L}, ...): the set HF's regex engine (Oniguruma)
  matches, found with a Split(regex, "removed") pre-tokenizer;
- Lowercase: the mapping of HF's Lowercase normalizer (Rust's
  char::to_lowercase);
- normalization barriers: code points that utf8proc decomposes and HF's
  normalizer leaves alone (its tables predate them); compared against the
  system utf8proc through ctypes;
- BERT's character classes (the unicode_categories crate, older than
  utf8proc's Unicode): punctuation (a piece of its own under
  BertPreTokenizer, also HF's Punctuation pre-tokenizer's test), nonspacing
  marks (what BertNormalizer's strip_accents drops) and controls (what its
  clean_text drops, less NUL and U+FFFD, which it drops by name).
"""
import ctypes
import ctypes.util
import sys
from pathlib import Path

import tokenizers
from tokenizers import Regex, normalizers, pre_tokenizers

OUT = Path(__file__).resolve().parents[1] / "src" / "tokenizer" / "tok_unicode_tables.c"
ALL = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]

# Escapes whose set is stored whole; the general categories are stored as
# one table (unassigned code points, Cn, left out) from which \p{L} etc.
# are unions.
CLASSES = {"s": r"\s", "d": r"\d", "w": r"\w"}
CATEGORIES = ["Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No",
              "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So",
              "Zs", "Zl", "Zp", "Cc", "Cf", "Co"]


def ranges(members):
    out = []
    for c in sorted(members):
        if out and out[-1][1] + 1 == c:
            out[-1][1] = c
        else:
            out.append([c, c])
    return out


def hf_class(pattern, text):
    kept = pre_tokenizers.Split(Regex(pattern), "removed").pre_tokenize_str(text)
    outside = {ord(ch) for piece, _ in kept for ch in piece}
    return [c for c in ALL if c not in outside]


def utf8proc_map(lib, s, opts):
    dst = ctypes.c_char_p()
    data = s.encode("utf-8")
    n = lib.utf8proc_map(data, len(data), ctypes.byref(dst), opts)
    assert n >= 0, n
    out = ctypes.string_at(dst, n).decode("utf-8")
    lib.free(dst)
    return out


def barriers():
    """Code points whose decomposition differs: flag 1 canonical, 2 compat."""
    lib = ctypes.CDLL(ctypes.util.find_library("utf8proc"))
    lib.utf8proc_map.argtypes = [ctypes.c_char_p, ctypes.c_ssize_t,
                                 ctypes.POINTER(ctypes.c_char_p), ctypes.c_int]
    lib.utf8proc_map.restype = ctypes.c_ssize_t
    lib.utf8proc_unicode_version.restype = ctypes.c_char_p
    libc = ctypes.CDLL(None)
    lib.free = libc.free
    STABLE, COMPAT, DECOMPOSE = 1 << 1, 1 << 2, 1 << 4
    flags = {}
    for bit, form, opts in [(1, "NFD", STABLE | DECOMPOSE), (2, "NFKD", STABLE | DECOMPOSE | COMPAT)]:
        norm = getattr(normalizers, form)()
        text = "\n".join(chr(c) for c in ALL[1:])
        hf = norm.normalize_str(text).split("\n")
        ours = utf8proc_map(lib, text, opts).split("\n")
        if len(hf) != len(ALL) - 1 or len(ours) != len(ALL) - 1:
            # a code point mapping to a newline: compare one by one
            hf = [norm.normalize_str(chr(c)) for c in ALL[1:]]
            ours = [utf8proc_map(lib, chr(c), opts) for c in ALL[1:]]
        for c, a, b in zip(ALL[1:], hf, ours):
            if a == b:
                continue
            if a != chr(c):
                sys.exit(f"U+{c:04X}: HF {form} gives {a!r}, utf8proc {b!r}: "
                         "only 'HF leaves it alone' differences are handled")
            flags[c] = flags.get(c, 0) | bit
    return flags, lib.utf8proc_unicode_version().decode()


def bert_sets():
    """BERT's punctuation, nonspacing marks and controls, as range lists."""
    split = pre_tokenizers.BertPreTokenizer()
    punct = [c for c in ALL if c not in (0x61, 0x62) and
             [p for p, _ in split.pre_tokenize_str("a" + chr(c) + "b")] == ["a", chr(c), "b"]]
    strip = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=False,
                                       strip_accents=True, lowercase=False)
    marks = [c for c in ALL if strip.normalize_str(chr(c)) == ""]
    clean = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=False,
                                       strip_accents=False, lowercase=False)
    controls = [c for c in ALL if c not in (0, 0xFFFD) and
                clean.normalize_str("a" + chr(c) + "b") == "ab"]
    return {"PUNCT": ranges(punct), "NONSPACING": ranges(marks), "CONTROL": ranges(controls)}


def lowercase():
    norm = normalizers.Lowercase()
    out = []
    for c in ALL:
        low = norm.normalize_str(chr(c))
        if low != chr(c):
            assert 1 <= len(low) <= 2, (c, low)
            out.append((c, ord(low[0]), ord(low[1]) if len(low) > 1 else 0))
    return out


def main():
    text = "".join(chr(c) for c in ALL)
    classes = {name: ranges(hf_class(pat, text)) for name, pat in CLASSES.items()}
    category = {}
    for k, gc in enumerate(CATEGORIES):
        for c in hf_class(rf"\p{{{gc}}}", text):
            assert c not in category, f"U+{c:04X} in two categories"
            category[c] = k
    for major in "LMNPSZ":  # the unions the C side builds are HF's sets
        union = {c for c, k in category.items() if CATEGORIES[k][0] == major}
        assert union == set(hf_class(rf"\p{{{major}}}", text)), major
    runs = []
    for c in sorted(category):
        if runs and runs[-1][1] + 1 == c and runs[-1][2] == category[c]:
            runs[-1][1] = c
        else:
            runs.append([c, c, category[c]])
    bars, utf8proc_version = barriers()
    lower = lowercase()
    bert = bert_sets()
    w = []
    w.append("/* GENERATED by scripts/gen_unicode_tables.py from HF tokenizers "
             f"{tokenizers.__version__}\n * (utf8proc {utf8proc_version} compared); "
             "do not edit. See tok_unicode.h. */\n")
    w.append('#include "tokenizer/tok_unicode.h"\n\n#include <stddef.h>\n')
    for i, (name, rs) in enumerate(classes.items()):
        w.append(f"\nstatic const sp_uc_range CLASS_{i}[] = {{")
        for k, (a, b) in enumerate(rs):
            w.append(("\n    " if k % 6 == 0 else " ") + f"{{0x{a:X}, 0x{b:X}}},")
        w.append("\n};\n")
    w.append("\nconst sp_uc_class SP_UC_CLASSES[] = {\n")
    for i, (name, rs) in enumerate(classes.items()):
        w.append(f'    {{"{name}", CLASS_{i}, {len(rs)}}},\n')
    w.append("};\nconst size_t SP_UC_N_CLASSES = sizeof SP_UC_CLASSES / sizeof *SP_UC_CLASSES;\n")
    w.append("\nconst char *const SP_UC_CATEGORY_NAMES[] = {")
    w.append(", ".join(f'"{gc}"' for gc in CATEGORIES) + ", NULL};\n")
    w.append("\nconst sp_uc_category_run SP_UC_CATEGORIES[] = {")
    for k, (a, b, gc) in enumerate(runs):
        w.append(("\n    " if k % 5 == 0 else " ") + f"{{0x{a:X}, 0x{b:X}, {gc}}},")
    w.append("\n};\nconst size_t SP_UC_N_CATEGORIES = sizeof SP_UC_CATEGORIES / sizeof *SP_UC_CATEGORIES;\n")
    w.append("\nconst sp_uc_barrier SP_UC_NORM_BARRIERS[] = {")
    for k, c in enumerate(sorted(bars)):
        w.append(("\n    " if k % 8 == 0 else " ") + f"{{0x{c:X}, {bars[c]}}},")
    w.append("\n};\nconst size_t SP_UC_N_NORM_BARRIERS = "
             "sizeof SP_UC_NORM_BARRIERS / sizeof *SP_UC_NORM_BARRIERS;\n")
    w.append("\nconst sp_uc_lower_map SP_UC_LOWER[] = {")
    for k, (c, a, b) in enumerate(lower):
        w.append(("\n    " if k % 5 == 0 else " ") + f"{{0x{c:X}, {{0x{a:X}, 0x{b:X}}}}},")
    w.append("\n};\nconst size_t SP_UC_N_LOWER = sizeof SP_UC_LOWER / sizeof *SP_UC_LOWER;\n")
    for name, rs in bert.items():
        w.append(f"\nconst sp_uc_range SP_UC_BERT_{name}[] = {{")
        for k, (a, b) in enumerate(rs):
            w.append(("\n    " if k % 6 == 0 else " ") + f"{{0x{a:X}, 0x{b:X}}},")
        w.append(f"\n}};\nconst size_t SP_UC_N_BERT_{name} = "
                 f"sizeof SP_UC_BERT_{name} / sizeof *SP_UC_BERT_{name};\n")
    OUT.write_text("".join(w))
    print(f"{OUT}: {len(classes)} classes, {len(runs)} category runs, {len(bars)} barriers, "
          f"{len(lower)} lowercase mappings, BERT sets of " +
          ", ".join(f"{len(rs)} ranges" for rs in bert.values()))


if __name__ == "__main__":
    main()
