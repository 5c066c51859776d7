#!/usr/bin/env python3
"""Checks that every `#include "folder/file.h"` under src/ points down the
layer order (docs/ARCHITECTURE.md, "Layering"), that the front ends use only
the public header plus the internal headers named for them, and that
include/spindle.h and its parts (include/spindle/*.h) stand alone.

    scripts/check_layering.py [--root DIR]

Prints one line per violation, `file:line: folder A includes folder B (...)`,
and exits 1 if there is any. tests/ and bench/ may include anything and are
not read."""
import argparse
import pathlib
import re
import sys

# The layer order, lowest first: a folder of src/ may include the headers of
# its own folder and of the folders in lower layers. Folders sharing a layer
# are peers and include each other only through PEER_HEADERS. Every folder of
# src/ must be named here, so a new one gets a place before it gets code.
LAYERS = (
    ("base",),
    ("compute",),
    ("artifacts",),
    ("tokenizer", "template", "runtime", "hub"),
    ("models",),
    ("convert", "generation", "grammar", "embedding", "vision"),
    ("cli", "server"),
)

# Peer includes that are allowed, one way: folder -> the headers it may use.
# spindle_chat_render renders the tokenizer's own chat template, so template/
# reads it (and the special-token strings) through tokenizer/'s internal view.
PEER_HEADERS = {
    "template": ("tokenizer/tokenizer.h",),
}

# Front ends build on include/spindle.h. Beyond it and their own folder they
# may include exactly these internal headers: `spindle convert` is a tool
# over the converter's internal API, and `spindle template` reads its JSON
# files with base's whole-file reader, and `spindle tokenize` decodes its own
# JSON string lines (cJSON cannot keep \u0000) with base's UTF-8 encoder;
# `spindle serve` starts the server through server/'s one entry header;
# `spindle pull` and `-m hf://` fetch models through hub/'s one header.
# The server keeps request bodies, held-back stop text and its SSE output in
# base's growable string (sp_strbuf), the project's one such buffer, and
# checks its jobs' state transitions with base's SP_DEBUG_CHECK, and sends
# its messages to the library's log handler (base/log.h), which `spindle
# serve` installs, so that they reach stderr as the library's do.
FRONT_END_HEADERS = {
    "cli": ("convert/convert.h", "base/mapped_file.h", "base/utf8.h", "server/server.h",
            "hub/hub.h"),
    "server": ("base/strbuf.h", "base/check.h", "base/log.h"),
}

PUBLIC_HEADER = "spindle.h"
SOURCE_SUFFIXES = (".c", ".h", ".inc")
INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.MULTILINE)
COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.DOTALL)


def layer_order_text():
    return " < ".join("|".join(layer) for layer in LAYERS)


def layer_of(folder):
    for rank, layer in enumerate(LAYERS):
        if folder in layer:
            return rank
    return None


def includes(path):
    """(line, included name) of each quoted include, comments blanked out
    (newlines kept, so line numbers stay right)."""
    text = path.read_text(encoding="utf-8", errors="replace")
    text = COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
    for m in INCLUDE.finditer(text):
        yield text.count("\n", 0, m.start()) + 1, m.group(1)


def include_violation(folder, name):
    """Why `folder` may not include `name`, or None when it may."""
    if name == PUBLIC_HEADER:
        return None
    if "/" not in name:
        return f'includes "{name}" (write "folder/file.h", relative to src/)'
    target = name.split("/", 1)[0]
    if target == folder:
        return None
    if layer_of(target) is None:
        return (f"folder {folder} includes {name} of unknown folder {target} "
                f"(layer order: {layer_order_text()})")
    if folder in FRONT_END_HEADERS:
        if name in FRONT_END_HEADERS[folder]:
            return None
        allowed = ", ".join(FRONT_END_HEADERS[folder]) or "none"
        return (f"folder {folder} includes folder {target} ({folder} uses "
                f"{PUBLIC_HEADER}; internal headers allowed: {allowed})")
    own, other = layer_of(folder), layer_of(target)
    if other < own or name in PEER_HEADERS.get(folder, ()):
        return None
    kind = "peer " if other == own else ""
    return (f"folder {folder} includes {kind}folder {target} "
            f"(layer order: {layer_order_text()})")


def check_src(root):
    problems = []
    src = root / "src"
    for path in sorted(src.rglob("*")):
        if not path.is_file() or path.suffix not in SOURCE_SUFFIXES:
            continue
        rel = path.relative_to(root)
        parts = path.relative_to(src).parts
        if len(parts) < 2:
            problems.append(f"{rel}:1: a source directly in src/ has no folder "
                            f"(layer order: {layer_order_text()})")
            continue
        folder = parts[0]
        if layer_of(folder) is None:
            problems.append(f"{rel}:1: folder {folder} is not in the layer order "
                            f"({layer_order_text()}; add it to scripts/check_layering.py)")
            continue
        for line, name in includes(path):
            why = include_violation(folder, name)
            if why:
                problems.append(f"{rel}:{line}: {why}")
    return problems


def check_public_header(root):
    """The public API must compile on its own: include/spindle.h and its
    parts in include/spindle/ include system headers and those parts only."""
    problems = []
    include = root / "include"
    headers = sorted(include.glob("*.h")) + sorted(include.glob("spindle/*.h"))
    for path in headers:
        for line, name in includes(path):
            if name.startswith("spindle/") and (include / name).is_file():
                continue
            problems.append(f"{path.relative_to(root)}:{line}: the public header "
                            f'includes "{name}" (it may use system headers and '
                            f"include/spindle/ only)")
    return problems


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=pathlib.Path,
                        default=pathlib.Path(__file__).resolve().parent.parent,
                        help="repository root (default: this script's)")
    args = parser.parse_args(argv)
    if not (args.root / "src").is_dir():
        print(f"check_layering: {args.root / 'src'} is not a directory", file=sys.stderr)
        return 2
    problems = check_src(args.root) + check_public_header(args.root)
    for p in problems:
        print(p)
    if problems:
        print(f"check_layering: {len(problems)} include(s) break the layering "
              "(docs/ARCHITECTURE.md, Layering)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
